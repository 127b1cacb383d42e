use super::*;
use locks_core::{Mode, lock_id};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn agent(n: &str, serial: u64) -> AgentId {
    AgentId::new(node(n), 1, serial)
}

fn limits(locks: u64, queued: u64, bytes: u64) -> PeerQuotas {
    PeerQuotas {
        locks,
        queued,
        bytes,
    }
}

fn usage(locks: u64, queued: u64, bytes: u64) -> Usage {
    Usage {
        locks,
        queued,
        bytes,
    }
}

const GRANTED: EntryState = EntryState::Granted(Mode::X);
const WAITING: EntryState = EntryState::Waiting(Mode::X);

/// The notices a granted `Lock` of `lock` by `a` sends it: its lock and every ancestor.
fn granted_path(book: &mut QuotaBook, a: &AgentId, lock: &LockId) {
    for depth in 1..=lock.depth() {
        book.notice(a, &lock.prefix(depth).unwrap(), GRANTED);
    }
}

#[test]
fn counts_entries_queued_entries_and_the_bytes_of_their_ids() {
    let mut book = QuotaBook::new(node("a"), PeerQuotas::default());
    let b1 = agent("b", 1);
    granted_path(&mut book, &b1, &lock_id!["db", "x"]);
    // ["db"] (2 bytes) and ["db", "x"] (3 bytes).
    assert_eq!(book.usage(&node("b")), usage(2, 0, 5));
    book.notice(&b1, &lock_id!["db", "yy"], WAITING);
    assert_eq!(book.usage(&node("b")), usage(3, 1, 9));
    // Granted later: no longer queued, same entry.
    book.notice(&b1, &lock_id!["db", "yy"], GRANTED);
    assert_eq!(book.usage(&node("b")), usage(3, 0, 9));
    // An integer key counts 8 bytes.
    book.notice(&agent("b", 2), &lock_id![7u64], WAITING);
    assert_eq!(book.usage(&node("b")), usage(4, 1, 17));
    book.notice(&b1, &lock_id!["db", "x"], EntryState::Absent);
    assert_eq!(book.usage(&node("b")), usage(3, 1, 14));
    book.remove_agent(&b1);
    assert_eq!(book.usage(&node("b")), usage(1, 1, 8));
    book.node_down(&node("b"));
    assert_eq!(book.usage(&node("b")), Usage::default());
    assert!(book.peers.is_empty());
}

#[test]
fn the_nodes_own_agents_are_neither_counted_nor_refused() {
    let mut book = QuotaBook::new(node("a"), limits(0, 0, 0));
    let own = agent("a", 1);
    book.notice(&own, &lock_id!["x"], WAITING);
    assert!(book.peers.is_empty());
    assert_eq!(book.admit(&own, &lock_id!["x", "y"]), Ok(()));
    assert_eq!(
        book.admit(&agent("b", 1), &lock_id!["x"]),
        Err(Quota::Locks)
    );
}

#[test]
fn an_id_deeper_than_the_tables_limit_is_left_to_the_table_uncounted() {
    let book = QuotaBook::new(node("a"), limits(0, 0, 0));
    let deep = LockId::new(0..(DEFAULT_MAX_DEPTH as u64 + 1)).unwrap();
    assert_eq!(book.admit(&agent("b", 1), &deep), Ok(()));
    let at_limit = LockId::new(0..DEFAULT_MAX_DEPTH as u64).unwrap();
    assert_eq!(book.admit(&agent("b", 1), &at_limit), Err(Quota::Locks));
}

#[test]
fn a_lock_is_refused_only_past_a_limit_counting_the_entries_it_may_create() {
    let mut book = QuotaBook::new(node("a"), limits(3, 10, 1000));
    let b1 = agent("b", 1);
    let b2 = agent("b", 2);
    // Two new entries ([q] and [q, 1]) of three.
    assert_eq!(book.admit(&b1, &lock_id!["q", "1"]), Ok(()));
    granted_path(&mut book, &b1, &lock_id!["q", "1"]);
    // [q] is b1's already: one more entry fits...
    assert_eq!(book.admit(&b1, &lock_id!["q", "2"]), Ok(()));
    // ... but not two, for another agent of the same peer.
    assert_eq!(book.admit(&b2, &lock_id!["q", "2"]), Err(Quota::Locks));
    // Another peer has its own quota.
    assert_eq!(book.admit(&agent("c", 1), &lock_id!["q", "2"]), Ok(()));
    // Once b1 releases [q, 1] (and with it [q]), b2 fits again.
    book.notice(&b1, &lock_id!["q", "1"], EntryState::Absent);
    book.notice(&b1, &lock_id!["q"], EntryState::Absent);
    assert_eq!(book.admit(&b2, &lock_id!["q", "2"]), Ok(()));
}

#[test]
fn every_entry_of_the_path_may_queue_and_bytes_count_per_entry() {
    let mut book = QuotaBook::new(node("a"), limits(100, 2, 1000));
    let b1 = agent("b", 1);
    assert_eq!(book.admit(&b1, &lock_id!["q", "1"]), Ok(()));
    assert_eq!(
        book.admit(&b1, &lock_id!["q", "1", "x"]),
        Err(Quota::Queued)
    );
    book.notice(&b1, &lock_id!["q"], WAITING);
    // [q] is queued already: only [q, 1] may queue on top of it.
    assert_eq!(book.admit(&b1, &lock_id!["q", "1"]), Ok(()));
    book.notice(&b1, &lock_id!["q", "1"], WAITING);
    assert_eq!(book.usage(&node("b")).queued, 2);
    assert_eq!(book.admit(&b1, &lock_id!["q", "2"]), Err(Quota::Queued));

    let book = QuotaBook::new(node("a"), limits(100, 100, 9));
    // ["abc"] counts 3 and ["abc", "def"] 6: 9 fits, one byte more does not.
    assert_eq!(book.admit(&b1, &lock_id!["abc", "def"]), Ok(()));
    assert_eq!(book.admit(&b1, &lock_id!["abc", "defg"]), Err(Quota::Bytes));
}

#[test]
fn a_withdrawal_drops_the_lock_and_its_descendants() {
    let mut book = QuotaBook::new(node("a"), PeerQuotas::default());
    let b1 = agent("b", 1);
    granted_path(&mut book, &b1, &lock_id!["q", "1", "x"]);
    granted_path(&mut book, &b1, &lock_id!["r"]);
    book.withdrawn(&b1, &lock_id!["q", "1"]);
    // [q] and [r] are left.
    assert_eq!(book.usage(&node("b")), usage(2, 0, 2));
}

/// One input of the book, on a small world (nodes b and c, two agents each, locks from a few
/// keys, so that paths share prefixes).
#[derive(Clone, Debug)]
enum Op {
    /// A `Lock` request: if admitted, the table creates or re-states every entry of the path,
    /// each in a state picked here (`true`: queued).
    Lock(AgentId, LockId, Vec<bool>),
    Absent(AgentId, LockId),
    Withdrawn(AgentId, LockId),
    Remove(AgentId),
    Down(NodeId),
}

fn small_agent() -> impl Strategy<Value = AgentId> {
    (prop_oneof![Just("a"), Just("b"), Just("c")], 1u64..3).prop_map(|(n, s)| agent(n, s))
}

fn small_lock() -> impl Strategy<Value = LockId> {
    prop::collection::vec(prop_oneof![Just("p"), Just("qq"), Just("rrr")], 1..4)
        .prop_map(|keys| LockId::new(keys).unwrap())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (small_agent(), small_lock(), prop::collection::vec(any::<bool>(), 3))
            .prop_map(|(a, l, q)| Op::Lock(a, l, q)),
        3 => (small_agent(), small_lock()).prop_map(|(a, l)| Op::Absent(a, l)),
        1 => (small_agent(), small_lock()).prop_map(|(a, l)| Op::Withdrawn(a, l)),
        1 => small_agent().prop_map(Op::Remove),
        1 => prop_oneof![Just("b"), Just("c")].prop_map(|n| Op::Down(node(n))),
    ]
}

/// What the table holds, by the simplest bookkeeping: (agent, lock) → queued.
type Held = BTreeMap<(AgentId, LockId), bool>;

/// `peer`'s usage as counted from `held`.
fn counted(held: &Held, peer: &NodeId) -> Usage {
    let mut u = Usage::default();
    for ((a, l), queued) in held {
        if a.node() == peer {
            u.locks += 1;
            u.queued += u64::from(*queued);
            u.bytes += entry_bytes(l);
        }
    }
    u
}

/// `peer`'s usage if `a`'s `Lock` of `lock` went as badly as it may: every entry of the path
/// created and queued.
fn worst(held: &Held, a: &AgentId, lock: &LockId) -> Usage {
    let mut held = held.clone();
    for depth in 1..=lock.depth() {
        held.insert((a.clone(), lock.prefix(depth).unwrap()), true);
    }
    counted(&held, a.node())
}

fn over(u: Usage, l: &PeerQuotas) -> Option<Quota> {
    if u.locks > l.locks {
        Some(Quota::Locks)
    } else if u.queued > l.queued {
        Some(Quota::Queued)
    } else if u.bytes > l.bytes {
        Some(Quota::Bytes)
    } else {
        None
    }
}

proptest! {
    /// Random requests, grants, releases, withdrawals, removals and nodes going down: the book's
    /// counts are always what is held, a request is refused exactly when its worst outcome
    /// would pass a limit (naming that limit), and so admitted requests never pass one.
    #[test]
    fn the_book_counts_what_is_held_and_refuses_only_past_a_limit(
        ops in prop::collection::vec(op(), 1..80),
        locks in 1u64..12,
        queued in 0u64..8,
        bytes in 1u64..40,
    ) {
        let limits = limits(locks, queued, bytes);
        let own = node("a");
        let mut book = QuotaBook::new(own.clone(), limits);
        let mut held = Held::new();
        for op in ops {
            match op {
                Op::Lock(a, lock, states) => {
                    let expected = if a.node() == &own { None } else { over(worst(&held, &a, &lock), &limits) };
                    let admitted = book.admit(&a, &lock);
                    prop_assert_eq!(admitted.err(), expected, "{} asks for {}", a, lock);
                    if admitted.is_ok() {
                        for (depth, queued) in (1..=lock.depth()).zip(states) {
                            let id = lock.prefix(depth).unwrap();
                            book.notice(&a, &id, if queued { WAITING } else { GRANTED });
                            if a.node() != &own {
                                held.insert((a.clone(), id), queued);
                            }
                        }
                    }
                }
                Op::Absent(a, lock) => {
                    book.notice(&a, &lock, EntryState::Absent);
                    held.remove(&(a, lock));
                }
                Op::Withdrawn(a, lock) => {
                    book.withdrawn(&a, &lock);
                    held.retain(|(b, l), _| b != &a || !(l == &lock || l.is_descendant_of(&lock)));
                }
                Op::Remove(a) => {
                    book.remove_agent(&a);
                    held.retain(|(b, _), _| b != &a);
                }
                Op::Down(n) => {
                    book.node_down(&n);
                    held.retain(|(b, _), _| b.node() != &n);
                }
            }
            for peer in ["b", "c"].map(node) {
                let u = book.usage(&peer);
                prop_assert_eq!(u, counted(&held, &peer));
                prop_assert_eq!(over(u, &limits), None);
            }
            prop_assert_eq!(book.usage(&own), Usage::default());
        }
    }
}
