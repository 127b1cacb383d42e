use super::*;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn small() -> PortLimits {
    PortLimits {
        max_connections: 4,
        max_connections_per_client: 3,
        max_unproven: 2,
        unproven_deadline: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_calls: 3,
        max_calls_per_client: 2,
        ..PortLimits::default()
    }
}

/// Opens a connection that then makes a call with the token.
fn proven(book: &mut PortBook, client: IpAddr, now: Instant) -> ConnId {
    let (id, evict) = open(book, client, now);
    assert!(evict.is_empty(), "{evict:?}");
    book.proven(id);
    id
}

fn open(book: &mut PortBook, client: IpAddr, now: Instant) -> (ConnId, Vec<ConnId>) {
    match book.accept(client, now) {
        Accept::Open { id, evict } => (id, evict),
        refused => panic!("refused: {refused:?}"),
    }
}

#[test]
fn a_flood_of_unproven_connections_evicts_the_oldest_and_never_a_proven_one() {
    let now = Instant::now();
    let mut book = PortBook::new(small());
    let (good, _) = open(&mut book, ip(1), now);
    book.proven(good);
    let (a, _) = open(&mut book, ip(2), now);
    let (_b, evicted) = open(&mut book, ip(2), now);
    assert!(evicted.is_empty());
    // The third unproven connection evicts the oldest unproven one, not the proven one.
    let (_c, evicted) = open(&mut book, ip(3), now);
    assert_eq!(evicted, [a]);
    assert_eq!(book.counts(), (3, 2, 0));
}

/// A flood of unproven connections from one address evicts its own, never the one connection
/// of another address that has not made its first call yet (before, the oldest unproven
/// connection of any address went, and a good client's new connection was pushed out by a
/// flood before it could prove itself).
#[test]
fn a_flood_from_one_address_evicts_its_own_unproven_connections_not_another_addresss() {
    let now = Instant::now();
    let limits = PortLimits {
        max_unproven: 4,
        ..PortLimits::default()
    };
    let mut book = PortBook::new(limits);
    for _ in 0..4 {
        open(&mut book, ip(9), now);
    }
    let (good, _) = open(&mut book, ip(1), now);
    for _ in 0..100 {
        let (_, evicted) = open(&mut book, ip(9), now);
        assert_eq!(evicted.len(), 1);
        assert!(
            !evicted.contains(&good),
            "the good client's connection was evicted"
        );
    }
    assert!(book.call_opened(good).is_ok());
    book.proven(good);
    assert_eq!(book.counts(), (4, 3, 1));
}

#[test]
fn an_unproven_connection_is_closed_at_its_deadline_and_an_idle_one_after_the_idle_timeout() {
    let t0 = Instant::now();
    let mut book = PortBook::new(small());
    let (silent, _) = open(&mut book, ip(1), t0);
    let (client, _) = open(&mut book, ip(1), t0);
    book.proven(client);
    book.call_opened(client).unwrap();
    assert_eq!(
        book.expired(t0 + Duration::from_secs(9)),
        Vec::<ConnId>::new()
    );
    assert_eq!(book.expired(t0 + Duration::from_secs(10)), [silent]);
    // A connection with a call open is never idle.
    assert!(book.expired(t0 + Duration::from_secs(600)).is_empty());
    let t1 = t0 + Duration::from_secs(600);
    book.call_closed(client, t1);
    assert!(book.expired(t1 + Duration::from_secs(59)).is_empty());
    assert_eq!(book.expired(t1 + Duration::from_secs(60)), [client]);
    assert_eq!(book.counts(), (0, 0, 0));
}

#[test]
fn one_address_past_its_bound_gives_up_its_own_idle_connection_or_is_refused() {
    let now = Instant::now();
    let mut book = PortBook::new(PortLimits {
        max_calls_per_client: 10,
        max_calls: 10,
        ..small()
    });
    let ids: Vec<ConnId> = (0..3).map(|_| proven(&mut book, ip(1), now)).collect();
    book.call_opened(ids[1]).unwrap();
    book.call_opened(ids[2]).unwrap();
    // ids[0] is idle: the fourth connection of the address takes its place.
    let (fourth, evicted) = open(&mut book, ip(1), now);
    assert_eq!(evicted, [ids[0]]);
    book.proven(fourth);
    book.call_opened(fourth).unwrap();
    match book.accept(ip(1), now) {
        Accept::Refused { why, evict } => {
            assert!(why.contains("address"), "{why}");
            assert!(evict.is_empty());
        }
        open => panic!("{open:?}"),
    }
    // Another address is still let in.
    open(&mut book, ip(2), now);
}

#[test]
fn a_full_node_closes_the_oldest_idle_connection_and_refuses_when_all_are_busy() {
    let now = Instant::now();
    let mut book = PortBook::new(PortLimits {
        max_calls_per_client: 10,
        max_calls: 10,
        ..small()
    });
    let ids: Vec<ConnId> = (1..=4).map(|n| proven(&mut book, ip(n), now)).collect();
    for id in &ids {
        book.call_opened(*id).unwrap();
    }
    match book.accept(ip(9), now) {
        Accept::Refused { why, evict } => {
            assert!(why.contains("busy"), "{why}");
            assert!(evict.is_empty());
        }
        open => panic!("{open:?}"),
    }
    book.call_closed(ids[2], now);
    let (_, evicted) = open(&mut book, ip(9), now);
    assert_eq!(evicted, [ids[2]]);
}

#[test]
fn calls_are_bounded_per_address_and_on_the_node_and_freed_with_their_connection() {
    let now = Instant::now();
    let mut book = PortBook::new(small());
    let (a, _) = open(&mut book, ip(1), now);
    let (b, _) = open(&mut book, ip(2), now);
    book.call_opened(a).unwrap();
    book.call_opened(a).unwrap();
    assert!(
        book.call_opened(a)
            .unwrap_err()
            .contains("max_calls_per_client")
    );
    book.call_opened(b).unwrap();
    assert!(book.call_opened(b).unwrap_err().contains("max_calls"));
    book.closed(a);
    assert_eq!(book.counts(), (1, 1, 1));
    book.call_opened(b).unwrap();
    book.call_closed(b, now);
    book.call_closed(b, now);
    assert_eq!(book.counts(), (1, 1, 0));
    // A call of a connection closed meanwhile is refused.
    assert!(book.call_opened(a).is_err());
}
