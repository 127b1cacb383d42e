//! Dropped calls in the simulation: a client that asks for its locks as blocking `lock` calls
//! (`AgentCore::lock_and_wait`) and drops some of them before, while or after they are
//! answered, as a `tokio::time::timeout` or a lost `select!` branch drops a call's future.
//!
//! With [`Sim::drops`] on, every request of a client's script that reaches its core is a `lock`
//! call with a call id (one the fast path queued is taken over with
//! `AgentCore::lock_and_wait_queued`, naming the mode its entry held before); the calls of the
//! current phase stay droppable until the phase ends, answered or not. One step in eight offers
//! a choice that drops one of them, picked at random, with `AgentCore::withdraw`: the request goes back to
//! what it was before the call, on every node, at whatever point of its life the call is (not
//! sent yet, queued, granted and not settled, answered). A phase whose requests were all
//! withdrawn is complete. The oracles hold throughout, every transaction still finishes, and
//! the agreement oracle checks that the tables keep nothing of a withdrawn request.

use super::Sim;
use locks_agent::state_machine::CallId;
use locks_core::{AgentId, LockId, Mode, NodeId};

impl Sim {
    /// A new call id (unique in the run).
    fn new_call(&mut self) -> CallId {
        self.next_call += 1;
        CallId(self.next_call)
    }

    /// `id`'s request as a `lock` call (with [`Sim::drops`] on), recorded as droppable.
    pub(super) fn lock_call(
        &mut self,
        id: &AgentId,
        ask: super::Ask,
    ) -> Result<(), locks_agent::RequestError> {
        let call = self.new_call();
        let client = self.clients.get_mut(id).expect("a client");
        let effects = client
            .core
            .lock_and_wait(call, ask.lock, ask.mode, &ask.nodes, ask.req)?;
        client.calls.push(call);
        self.world.unsettled.insert(id.clone());
        self.route(id, effects);
        Ok(())
    }

    /// The fast path queued `lock` for idle client `id`, whose entry there held `held` before:
    /// its core, just started, takes the call over.
    pub(super) fn queued_call(
        &mut self,
        id: &AgentId,
        lock: &LockId,
        mode: Mode,
        node: &NodeId,
        held: Option<Mode>,
    ) {
        let call = self.new_call();
        let client = self.clients.get_mut(id).expect("a client");
        let effects = client
            .core
            .lock_and_wait_queued(call, lock.clone(), mode, std::slice::from_ref(node), held)
            .expect("the adopted request is accepted again");
        client.calls.push(call);
        self.world.unsettled.insert(id.clone());
        self.route(id, effects);
    }

    /// The clients with a call that may be dropped, in order.
    pub(super) fn droppable(&self) -> Vec<AgentId> {
        if !self.drops {
            return Vec::new();
        }
        self.clients
            .iter()
            .filter(|(_, c)| !c.done && c.core.is_running() && !c.calls.is_empty())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Drops one of `id`'s calls, at random.
    pub(super) fn drop_call(&mut self, id: &AgentId) {
        let i = {
            let n = self.clients[id].calls.len();
            self.world.rng.below(n)
        };
        let call = self.clients.get_mut(id).expect("a client").calls.remove(i);
        self.stats.drops += 1;
        self.world.trace.push(format!("{id} drops {call:?}"));
        self.with_core(id, |c| c.withdraw(call).1);
    }
}
