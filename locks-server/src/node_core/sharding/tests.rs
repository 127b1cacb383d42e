//! [`Sharding::deliver`]'s runs of notices: whatever the operations, an agent of another node
//! is told the same messages in the same order whether its notices go one by one, as runs, or
//! as runs that the carrier gives back; and a run is exactly the notices of one operation to
//! one agent of another node, next to each other in the table's effects.

use super::*;
use locks_core::proto::LockNotice;
use locks_core::{LockId, Mode, ModeTable};
use proptest::prelude::*;

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn agent(on: &str, serial: u64) -> AgentId {
    AgentId::new(node(on), 1, serial)
}

/// What reached the agents, one message after the other, and how the notices were carried.
#[derive(Default)]
struct Recorder {
    /// Every message, runs taken apart, in order.
    told: Vec<(AgentId, AgentMessage)>,
    /// The length of each run carried as one message.
    runs: Vec<usize>,
    /// How many runs went to an agent of this node (`n`).
    local_runs: usize,
    /// Whether runs are carried (or given back).
    carries_runs: bool,
    /// An agent whose every message comes back `Gone`.
    gone: Option<AgentId>,
}

impl Carrier for Recorder {
    fn send(&mut self, to: &AgentId, msg: AgentMessage) -> Delivery {
        if self.gone.as_ref() == Some(to) {
            return Delivery::Gone;
        }
        self.told.push((to.clone(), msg));
        Delivery::Sent
    }

    fn send_notices(
        &mut self,
        to: &AgentId,
        notices: Vec<LockNotice>,
    ) -> Result<(), Vec<LockNotice>> {
        if !self.carries_runs || self.gone.as_ref() == Some(to) {
            return Err(notices);
        }
        self.runs.push(notices.len());
        self.local_runs += usize::from(to.node() == &node("n"));
        let told = notices
            .into_iter()
            .map(|n| (to.clone(), AgentMessage::Notice(n)));
        self.told.extend(told);
        Ok(())
    }
}

/// One table of `shards` shards on node `n`.
fn tables(sharding: &Sharding) -> Vec<LockTable> {
    sharding.tables(|| LockTable::new(node("n"), ModeTable::standard(), 0))
}

/// A node `n` table's requests: agents of `n` (local), `a` and `b`; ids of up to three keys.
fn request() -> impl Strategy<Value = ServerRequest> {
    let agents = prop::sample::select(vec![
        agent("n", 1),
        agent("n", 2),
        agent("a", 1),
        agent("a", 2),
        agent("b", 1),
    ]);
    let id = prop::collection::vec(prop::sample::select(vec!["r", "s", "t"]), 1..=3)
        .prop_map(|keys| LockId::new(keys).unwrap());
    let mode = prop::sample::select(vec![Mode::IS, Mode::IX, Mode::S, Mode::SIX, Mode::X]);
    (agents, id, mode, 0..4u8).prop_map(|(agent, lock, mode, kind)| match kind {
        0 | 1 => ServerRequest::Lock { agent, lock, mode },
        2 => ServerRequest::Unlock { agent, lock },
        _ => ServerRequest::RemoveAgent { agent },
    })
}

/// Applies `requests` with `carrier`, and returns it.
fn run(requests: &[ServerRequest], mut carrier: Recorder) -> Recorder {
    let sharding = Sharding::new(4);
    let mut shards = tables(&sharding);
    for r in requests {
        sharding.apply(
            shards.as_mut_slice(),
            TableInput::Request(r.clone()),
            &mut carrier,
        );
    }
    carrier
}

#[test]
fn a_lock_and_its_ancestors_are_told_to_an_agent_of_another_node_as_one_run() {
    let lock = ServerRequest::Lock {
        agent: agent("a", 1),
        lock: LockId::new(["r", "s", "t"]).unwrap(),
        mode: Mode::X,
    };
    let unlock = ServerRequest::Unlock {
        agent: agent("a", 1),
        lock: LockId::new(["r", "s", "t"]).unwrap(),
    };
    let carried = run(
        &[lock, unlock],
        Recorder {
            carries_runs: true,
            ..Recorder::default()
        },
    );
    assert_eq!(carried.runs, vec![3, 3], "told: {:?}", carried.told);
    let locks: Vec<usize> = carried
        .told
        .iter()
        .map(|(_, msg)| match msg {
            AgentMessage::Notice(n) => n.lock.depth(),
            other => panic!("not a notice: {other:?}"),
        })
        .collect();
    assert_eq!(locks, vec![1, 2, 3, 1, 2, 3], "ancestors first, in both");
}

#[test]
fn a_local_agent_is_told_one_notice_at_a_time() {
    let lock = ServerRequest::Lock {
        agent: agent("n", 1),
        lock: LockId::new(["r", "s", "t"]).unwrap(),
        mode: Mode::X,
    };
    let carried = run(
        &[lock],
        Recorder {
            carries_runs: true,
            ..Recorder::default()
        },
    );
    assert!(carried.runs.is_empty());
    assert_eq!(carried.told.len(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// One by one, in runs, or in runs given back (and an agent found gone either way): the
    /// agents are told the same, in the same order, and the tables decide the same.
    #[test]
    fn runs_tell_the_same_messages_in_the_same_order(
        requests in prop::collection::vec(request(), 1..40),
        gone in prop::option::of(prop::sample::select(vec![agent("a", 2), agent("n", 2)])),
    ) {
        let one_by_one = run(&requests, Recorder { gone: gone.clone(), ..Recorder::default() });
        let carried = run(
            &requests,
            Recorder { carries_runs: true, gone: gone.clone(), ..Recorder::default() },
        );
        let given_back = run(&requests, Recorder { gone, ..Recorder::default() });
        prop_assert_eq!(&carried.told, &one_by_one.told);
        prop_assert_eq!(&given_back.told, &one_by_one.told);
        prop_assert!(carried.runs.iter().all(|&n| n >= 2));
        prop_assert_eq!(carried.local_runs, 0);
        prop_assert!(given_back.runs.is_empty());
    }
}
