//! Ghosts: when a node goes down, its agents' entries are handed to placeholders that keep
//! every lock held (and every wait queued) exactly as it was until the lock server removes them
//! after the lock-delay. A request of the old agent afterwards is a new one, behind its ghost.

mod common;

use common::*;
use locks_core::proto::{EntryState, ServerRequest};
use locks_core::{AgentId, Mode, NodeId, lock_id};

fn remote(serial: u64) -> AgentId {
    AgentId::new(NodeId::new("far").unwrap(), 7, serial)
}

#[test]
fn a_downed_nodes_agents_keep_their_places_as_ghosts_until_removed() {
    let mut tb = table();
    let (l, m) = (lock_id!["l"], lock_id!["m", "x"]);
    let far = remote(1);
    tb.handle(ServerRequest::Lock {
        agent: far.clone(),
        lock: l.clone(),
        mode: Mode::X,
    });
    tb.handle(ServerRequest::Lock {
        agent: far.clone(),
        lock: m.clone(),
        mode: Mode::S,
    });
    lock(&mut tb, 1, &l, Mode::X);
    let version = tb.version();

    let ghosts = tb.ghost_agents_of(far.node());
    assert_eq!(ghosts.len(), 1);
    let ghost = &ghosts[0];
    assert!(ghost.is_ghost() && ghost.node() == &node());
    // Nothing moved, nothing changed version: only the name.
    assert_eq!(tb.version(), version);
    assert_eq!(tb.state(&far, &l), EntryState::Absent);
    assert_eq!(tb.state(ghost, &l), EntryState::Granted(Mode::X));
    assert_eq!(
        tb.state(ghost, &lock_id!["m"]),
        EntryState::Granted(Mode::IS)
    );
    assert!(tb.state(&t(1), &l).is_waiting());
    assert!(tb.agents_on(far.node()).is_empty());

    // The old agent asks again: a new entry, behind its own ghost and the local waiter.
    tb.handle(ServerRequest::Lock {
        agent: far.clone(),
        lock: l.clone(),
        mode: Mode::X,
    });
    assert!(tb.state(&far, &l).is_waiting());

    tb.handle(ServerRequest::RemoveAgent {
        agent: ghost.clone(),
    });
    assert!(holds(&tb, 1, &l, Mode::X), "{}", shape(&tb, &l));
    assert!(tb.state(&far, &l).is_waiting());
    assert!(tb.view(&m).is_none(), "the ghost's read lock went with it");
}

#[test]
fn ghosts_of_two_downs_never_share_a_name() {
    let mut tb = table();
    let l = lock_id!["l"];
    for serial in 1..=2 {
        tb.handle(ServerRequest::Lock {
            agent: remote(serial),
            lock: l.clone(),
            mode: Mode::S,
        });
    }
    let first = tb.ghost_agents_of(&NodeId::new("far").unwrap());
    tb.handle(ServerRequest::Lock {
        agent: remote(3),
        lock: l.clone(),
        mode: Mode::S,
    });
    let second = tb.ghost_agents_of(&NodeId::new("far").unwrap());
    assert_eq!(first.len(), 2);
    assert_eq!(second.len(), 1);
    assert!(!first.contains(&second[0]));
    assert_eq!(tb.view(&l).unwrap().granted.len(), 3);
}
