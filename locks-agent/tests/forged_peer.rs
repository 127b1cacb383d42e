//! A member of the cluster (it knows the cookie) that sends what only another node may say:
//! each attack is driven as a peer would drive it, frames over a real loopback link
//! (`locks_testing::forged_peer`), against a real node whose transactions hold and wait for locks. The
//! node drops every such message and counts it; what its transactions believe they hold never
//! changes. Every wait is bounded.

mod common;

use common::{BOUND, Harness, bounded, config};
use locks_agent::{LockState, Options, Req, begin_transaction};
use locks_core::proto::{
    AgentMessage, EntryState, LockNotice, LockView, Message, Probe, ProbeEdge, QueueEntry,
    Rejection, ServerRequest,
};
use locks_core::{AgentId, LockId, Mode, NodeId, lock_id};
use locks_server::Node;
use locks_testing::forged_peer::RawPeer;
use locks_testing::seeded::{Rng, seeds_from_env};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// A node of the test cluster, listening on loopback, and an attacker connected to it as
/// `attacker`.
async fn node_and_attacker(attacker: &str) -> (Harness, RawPeer) {
    let node = bounded(Node::start(config("a"))).await.unwrap();
    let addr = node.local_addr().unwrap();
    let peer = RawPeer::connect(addr, attacker, common::COOKIE, BOUND).await;
    (Harness { node }, peer)
}

/// A version larger than any the node handed out so far, yet one a node could issue a second
/// from now: only the sender is wrong in a notice that carries it.
fn plausible_version() -> u64 {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    (micros + 1_000_000) * 1024
}

fn notice(server: &str, lock: &LockId, version: u64, state: EntryState) -> AgentMessage {
    AgentMessage::Notice(LockNotice {
        node: n(server),
        lock: lock.clone(),
        version,
        state,
        queue: None,
        note: None,
    })
}

fn to(agent: &AgentId, msg: AgentMessage) -> Message {
    Message::Agent {
        to: agent.clone(),
        msg,
    }
}

#[tokio::test]
async fn a_grant_forged_for_another_nodes_server_does_not_reach_a_waiter() {
    let (h, mut attacker) = node_and_attacker("c").await;
    let x = lock_id!["db", "x"];
    let holder = h.client().await;
    holder.lock(x.clone(), Mode::X).await;
    let mut waiter = h.client().await;
    let lx = x.clone();
    let pending = waiter.call(move |t| async move { t.lock(lx, Mode::X).await });
    h.wait_blocked(&waiter.id(), &x).await;

    let forged = notice("a", &x, plausible_version(), EntryState::Granted(Mode::X));
    attacker.send(to(&waiter.id(), forged));
    attacker.sync().await;

    assert_eq!(
        bounded(waiter.txn().lock_state(x.clone())).await.unwrap(),
        LockState::Waiting
    );
    assert!(!pending.is_finished());
    // The real grant still comes.
    holder.kill();
    pending.result().await.unwrap();
}

#[tokio::test]
async fn a_grant_with_a_token_no_node_can_have_issued_is_refused() {
    let (h, mut attacker) = node_and_attacker("b").await;
    // One key: no ancestor to be granted as well.
    let y = lock_id!["y"];
    let mut client = h.client().await;
    let ly = y.clone();
    let pending =
        client.call(move |t| async move { t.lock_on(ly, Mode::X, &[n("b")], Req::All).await });
    // The attacker is b: the request comes to it.
    let agent = client.id();
    attacker
        .expect(
            |m| matches!(m, Message::Server(ServerRequest::Lock { agent: a, .. }) if *a == agent),
        )
        .await;

    let huge = notice("b", &y, 1 << 62, EntryState::Granted(Mode::X));
    attacker.send(to(&agent, huge));
    attacker.sync().await;
    assert_eq!(
        bounded(client.txn().lock_state(y.clone())).await.unwrap(),
        LockState::Waiting
    );
    assert!(!pending.is_finished());

    // What b may say of its own lock, it still says.
    let grant = notice("b", &y, 5, EntryState::Granted(Mode::X));
    attacker.send(to(&agent, grant));
    let locked = pending.result().await.unwrap();
    assert_eq!(locked.version_on(&n("b")), Some(5));
}

/// A transaction on the node that holds `lock` there, with its agent running (so that
/// messages to it are acted on at once).
async fn holder_with_agent(h: &Harness, lock: &LockId) -> locks_agent::Transaction {
    let txn = bounded(begin_transaction(&h.node, Options::default()))
        .await
        .unwrap();
    let _events = txn.events();
    bounded(txn.lock(lock.clone(), Mode::X)).await.unwrap();
    txn
}

async fn still_holds(h: &Harness, txn: &locks_agent::Transaction, lock: &LockId) {
    let state = bounded(txn.lock_state(lock.clone())).await.unwrap();
    assert!(matches!(state, LockState::Held(_)), "{state:?}");
    h.wait_granted(txn.id(), lock).await;
}

#[tokio::test]
async fn a_rejection_forged_for_another_nodes_server_does_not_make_a_holder_release() {
    let (h, mut attacker) = node_and_attacker("c").await;
    let x = lock_id!["db", "x"];
    let txn = holder_with_agent(&h, &x).await;

    let forged = AgentMessage::Rejected {
        node: n("a"),
        lock: x.clone(),
        reason: Rejection::ModeNotInTable(Mode::X),
    };
    attacker.send(to(txn.id(), forged));
    attacker.sync().await;
    still_holds(&h, &txn, &x).await;
}

#[tokio::test]
async fn an_absent_notice_at_the_largest_version_does_not_revoke_a_lock() {
    let (h, mut attacker) = node_and_attacker("c").await;
    let x = lock_id!["db", "x"];
    let txn = holder_with_agent(&h, &x).await;

    // In the name of a's server, and in c's own name (c has no lock x: still refused for the
    // version).
    for server in ["a", "c"] {
        let forged = notice(server, &x, u64::MAX, EntryState::Absent);
        attacker.send(to(txn.id(), forged));
    }
    attacker.sync().await;
    still_holds(&h, &txn, &x).await;
}

/// A random well-formed message for `to` that names a sender other than `c`: a server of `a`
/// or `b`, an agent of theirs, or a probe passed on by one of them.
fn foreign_message(rng: &mut Rng, to: &AgentId, agents: &[AgentId], locks: &[LockId]) -> Message {
    let node = n(["a", "b"][rng.below(2)]);
    let lock = locks[rng.below(locks.len())].clone();
    let version = match rng.below(3) {
        0 => rng.below(1000) as u64,
        1 => plausible_version() + rng.below(1000) as u64,
        _ => u64::MAX - rng.below(1000) as u64,
    };
    let mode = Mode::ALL[rng.below(Mode::ALL.len())];
    let state = [
        EntryState::Granted(mode),
        EntryState::Waiting(mode),
        EntryState::Absent,
    ][rng.below(3)];
    let agent = agents[rng.below(agents.len())].clone();
    let view = Arc::new(LockView {
        version,
        group: Some(mode),
        granted: vec![QueueEntry {
            agent: agent.clone(),
            mode,
        }],
        converting: vec![],
        waiting: vec![QueueEntry {
            agent: to.clone(),
            mode,
        }],
    });
    let msg = match rng.below(6) {
        0 => notice(node.as_str(), &lock, version, state),
        1 => AgentMessage::Rejected {
            node,
            lock,
            reason: [
                Rejection::ModeNotInTable(mode),
                Rejection::NotHeld,
                Rejection::QueueTooLarge,
            ][rng.below(3)]
            .clone(),
        },
        2 => AgentMessage::Watched { node, lock, view },
        3 => AgentMessage::Forward {
            from: agent,
            node,
            lock,
            view,
        },
        4 => AgentMessage::Surrendered {
            by: agent,
            node,
            lock,
            version,
        },
        _ => {
            // A cycle through `to` and `agent`, passed on to `to` by `agent`, or refuted by
            // `agent` back to `to` as victim.
            let edge = |waiter: &AgentId, blocker: &AgentId| ProbeEdge {
                waiter: waiter.clone(),
                blocker: blocker.clone(),
                lock: lock.clone(),
                node: node.clone(),
                version,
            };
            let refuted = rng.chance(2);
            AgentMessage::Probe(Probe {
                edges: vec![edge(&agent, to), edge(to, &agent)],
                next: if refuted { 0 } else { 1 },
                epoch: rng.next(),
                refuted,
            })
        }
    };
    Message::Agent {
        to: to.clone(),
        msg,
    }
}

#[tokio::test]
async fn random_messages_in_other_senders_names_never_change_what_an_agent_holds() {
    let (h, mut attacker) = node_and_attacker("c").await;
    let (x, z) = (lock_id!["db", "x"], lock_id!["z"]);
    let holder = holder_with_agent(&h, &x).await;
    bounded(holder.lock(z.clone(), Mode::S)).await.unwrap();
    let mut waiter = h.client().await;
    let lx = x.clone();
    let pending = waiter.call(move |t| async move { t.lock(lx, Mode::X).await });
    h.wait_blocked(&waiter.id(), &x).await;

    let agents = [
        holder.id().clone(),
        waiter.id(),
        AgentId::new(n("a"), 1, 99),
        AgentId::new(n("b"), 1, 1),
    ];
    let locks = [x.clone(), z.clone(), lock_id!["db"]];
    for seed in seeds_from_env("FORGED_SEEDS", 4) {
        let mut rng = Rng::new(seed);
        for _ in 0..100 {
            let to = [holder.id().clone(), waiter.id()][rng.below(2)].clone();
            attacker.send(foreign_message(&mut rng, &to, &agents, &locks));
        }
    }
    attacker.sync().await;

    still_holds(&h, &holder, &x).await;
    still_holds(&h, &holder, &z).await;
    assert_eq!(
        bounded(waiter.txn().lock_state(x.clone())).await.unwrap(),
        LockState::Waiting
    );
    assert!(!pending.is_finished());
    h.wait_blocked(&waiter.id(), &x).await;
}
