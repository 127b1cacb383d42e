use super::*;

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

#[test]
fn a_single_dial_registers_on_both_sides() {
    let (a, b) = (n("a"), n("b"));
    let mut ma = Membership::new(a.clone());
    let mut mb = Membership::new(b.clone());
    let ha = ma.begin(Role::Initiator);
    let hb = mb.begin(Role::Acceptor);
    assert_eq!(mb.check(hb, &a), Ok(()));
    assert_eq!(ma.check(ha, &b), Ok(()));
    let rb = mb.established(hb, &a).unwrap();
    let ra = ma.established(ha, &b).unwrap();
    assert_eq!((ra.role, rb.role), (Role::Initiator, Role::Acceptor));
    assert_eq!(ma.link(&b), Some(ra));
    assert_eq!(ma.handshakes(), 0);
}

#[test]
fn own_name_connected_and_apart_peers_are_refused() {
    let (a, b) = (n("a"), n("b"));
    let mut m = Membership::new(a.clone());
    let h = m.begin(Role::Acceptor);
    assert_eq!(m.check(h, &a), Err(NameRefusal::OwnName));
    m.failed(h);

    let h = m.begin(Role::Acceptor);
    m.check(h, &b).unwrap();
    let r = m.established(h, &b).unwrap();
    for role in [Role::Acceptor, Role::Initiator] {
        let h = m.begin(role);
        assert_eq!(m.check(h, &b), Err(NameRefusal::Connected));
        m.failed(h);
    }

    assert_eq!(m.disconnect(&b), Some(r.link));
    assert!(m.link_down(&b, r.link));
    for role in [Role::Acceptor, Role::Initiator] {
        let h = m.begin(role);
        assert_eq!(m.check(h, &b), Err(NameRefusal::Apart), "{role:?}");
        m.failed(h);
    }
    assert!(m.reconnect(&b));
    let h = m.begin(Role::Initiator);
    assert_eq!(m.check(h, &b), Ok(()));
}

#[test]
fn disconnect_dooms_a_handshake_in_progress() {
    let (a, b) = (n("a"), n("b"));
    let mut m = Membership::new(a);
    let h = m.begin(Role::Acceptor);
    m.check(h, &b).unwrap();
    assert_eq!(m.disconnect(&b), None);
    assert_eq!(m.established(h, &b), Err(LinkRejection::Superseded));
    assert_eq!(m.link(&b), None);
}

#[test]
fn a_stale_link_going_down_changes_nothing() {
    let (a, b) = (n("a"), n("b"));
    let mut m = Membership::new(a);
    let h = m.begin(Role::Initiator);
    m.check(h, &b).unwrap();
    let first = m.established(h, &b).unwrap();
    assert!(m.link_down(&b, first.link));
    let h = m.begin(Role::Acceptor);
    m.check(h, &b).unwrap();
    let second = m.established(h, &b).unwrap();
    assert_ne!(first.link, second.link);
    assert!(
        !m.link_down(&b, first.link),
        "the old link is not the peer's link"
    );
    assert_eq!(m.link(&b), Some(second));
}

#[test]
fn two_handshakes_in_the_same_direction_keep_the_first() {
    let (a, b) = (n("a"), n("b"));
    let mut m = Membership::new(b.clone());
    let h1 = m.begin(Role::Acceptor);
    let h2 = m.begin(Role::Acceptor);
    m.check(h1, &a).unwrap();
    assert_eq!(m.check(h2, &a), Err(NameRefusal::Handshaking));
    m.failed(h1);
    assert_eq!(m.check(h2, &a), Ok(()), "free again once the first failed");
}

/// The steps of one connection's handshake, as the two registries see them: the initiator's
/// name check (on the acceptor's `Hello`; it then sends its proof), the acceptor's name check
/// (on that proof, once verified), the acceptor's end (it sends its proof and registers), the
/// initiator's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    InitiatorCheck,
    AcceptorCheck,
    AcceptorEnd,
    InitiatorEnd,
}

const STEPS: [Step; 4] = [
    Step::InitiatorCheck,
    Step::AcceptorCheck,
    Step::AcceptorEnd,
    Step::InitiatorEnd,
];

/// One simulated connection between the two registries `[a, b]`.
struct Conn {
    initiator: usize,
    hs: [HandshakeId; 2],
    next: usize,
    /// Refused at a check, or closed by the initiator at its end.
    closed: bool,
    /// The acceptor rejected the connection after sending its proof.
    acceptor_rejected: bool,
    registered: [Option<LinkId>; 2],
}

/// Runs two connections (connection `i` dialed by node `i`) through the step order `order` (a
/// sequence of connection indices, each appearing four times). Returns, per node, how many
/// links it ever registered, and per connection which nodes have it registered at the end.
fn run(order: &[usize], names: [&str; 2]) -> ([usize; 2], [[bool; 2]; 2]) {
    let ids = [n(names[0]), n(names[1])];
    let mut m = [
        Membership::new(ids[0].clone()),
        Membership::new(ids[1].clone()),
    ];
    let mut conns: Vec<Conn> = (0..2)
        .map(|initiator| {
            let acceptor = 1 - initiator;
            let mut hs = [0; 2];
            hs[initiator] = m[initiator].begin(Role::Initiator);
            hs[acceptor] = m[acceptor].begin(Role::Acceptor);
            Conn {
                initiator,
                hs,
                next: 0,
                closed: false,
                acceptor_rejected: false,
                registered: [None, None],
            }
        })
        .collect();
    let mut ever = [0usize; 2];
    for &c in order {
        let conn = &mut conns[c];
        if conn.closed {
            continue;
        }
        let step = STEPS[conn.next];
        conn.next += 1;
        let (ini, acc) = (conn.initiator, 1 - conn.initiator);
        match step {
            Step::AcceptorCheck | Step::InitiatorCheck => {
                let (side, other) = if step == Step::AcceptorCheck {
                    (acc, ini)
                } else {
                    (ini, acc)
                };
                if m[side].check(conn.hs[side], &ids[other]).is_err() {
                    // The refusing side tells the peer; both handshakes fail.
                    m[side].failed(conn.hs[side]);
                    m[other].failed(conn.hs[other]);
                    conn.closed = true;
                }
            }
            Step::AcceptorEnd => match m[acc].established(conn.hs[acc], &ids[ini]) {
                Ok(r) => {
                    conn.registered[acc] = Some(r.link);
                    ever[acc] += 1;
                }
                // Its proof is already on the way: the initiator's end still comes.
                Err(_) => conn.acceptor_rejected = true,
            },
            Step::InitiatorEnd => {
                conn.closed = true;
                match m[ini].established(conn.hs[ini], &ids[acc]) {
                    Ok(r) => {
                        ever[ini] += 1;
                        if conn.acceptor_rejected {
                            assert!(m[ini].link_down(&ids[acc], r.link));
                        } else {
                            conn.registered[ini] = Some(r.link);
                            conn.closed = false;
                        }
                    }
                    Err(_) => {
                        if let Some(link) = conn.registered[acc].take() {
                            assert!(m[acc].link_down(&ids[ini], link));
                        }
                    }
                }
            }
        }
    }
    let kept = [0, 1].map(|c| [0, 1].map(|side| conns[c].registered[side].is_some()));
    (ever, kept)
}

/// Every interleaving of two sequences of four steps.
fn interleavings() -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for mask in 0u32..256 {
        if mask.count_ones() == 4 {
            out.push((0..8).map(|i| ((mask >> i) & 1) as usize).collect());
        }
    }
    out
}

#[test]
fn simultaneous_dials_keep_one_connection_in_every_order() {
    let orders = interleavings();
    assert_eq!(orders.len(), 70);
    for names in [["a", "b"], ["b", "a"]] {
        for order in &orders {
            let (ever, kept) = run(order, names);
            // Exactly one connection is kept, by both nodes, and neither node ever registered
            // another one (which would have been a node down and up).
            let both: Vec<usize> = (0..2).filter(|&c| kept[c] == [true, true]).collect();
            assert_eq!(both.len(), 1, "{names:?} {order:?}: kept {kept:?}");
            let other = 1 - both[0];
            assert_eq!(kept[other], [false, false], "{names:?} {order:?}");
            assert_eq!(ever, [1, 1], "{names:?} {order:?}: a node flapped");
        }
    }
}

#[test]
fn in_lockstep_the_dial_of_the_smaller_name_wins() {
    let lockstep = [0, 1, 0, 1, 0, 1, 0, 1];
    // Node 0 is "a": its dial (connection 0) is kept.
    assert_eq!(run(&lockstep, ["a", "b"]).1, [[true, true], [false, false]]);
    // Node 0 is "b": node 1's dial is kept.
    assert_eq!(run(&lockstep, ["b", "a"]).1, [[false, false], [true, true]]);
}
