//! The simulated clients: scripts of phases, each a set of requests issued at once (like
//! `lock_nowait`) and of conversions down; the next phase starts when the transaction has all
//! its locks (like a blocking `lock`), and a client whose script is done ends its transaction.
//! A conversion is made with the phase's requests or, chosen at random, at a later step of the
//! phase (before the next phase starts): so it reaches the server while the entry it converts
//! is granted, waiting, or converting up for a request of the same phase.

use super::Sim;
use locks_agent::state_machine::AgentCore;
use locks_agent::{LockResult, Options, Req, TransactionStatus};
use locks_core::{AgentId, LockId, Mode, NodeId};
use std::collections::VecDeque;

/// One lock request of a client script.
#[derive(Clone, Debug)]
pub struct Ask {
    /// The lock.
    pub lock: LockId,
    /// The mode.
    pub mode: Mode,
    /// The nodes asked.
    pub nodes: Vec<NodeId>,
    /// How many of them must grant it.
    pub req: Req,
}

impl Ask {
    /// `lock` in `mode` on `node` alone.
    pub fn on(node: &NodeId, lock: LockId, mode: Mode) -> Ask {
        Ask {
            lock,
            mode,
            nodes: vec![node.clone()],
            req: Req::All,
        }
    }
}

/// One step of a client's phase.
#[derive(Clone, Debug)]
pub enum Act {
    /// A lock request.
    Lock(Ask),
    /// Convert the request on the lock down to the mode (it must be weaker then).
    Convert(LockId, Mode),
}

/// A transaction and the client that drives it.
pub struct Client {
    /// The agent.
    pub core: AgentCore,
    /// Phases not started yet.
    pub script: VecDeque<Vec<Act>>,
    /// Conversions of the current phase not made yet, in order.
    pub deferred: VecDeque<(LockId, Mode)>,
    /// The result of each completed phase.
    pub results: Vec<LockResult>,
    /// Whether a phase was started and is not complete yet.
    pub in_phase: bool,
    /// Set when the transaction ended (after its last phase, killed, or aborted).
    pub done: bool,
    /// Set when the agent aborted on a deadlock.
    pub aborted: Option<(LockId, NodeId)>,
    /// Every status the agent reported, in order.
    pub statuses: Vec<TransactionStatus>,
    /// Set while the client has no agent running (`fast.rs`).
    pub idle: Option<super::fast::Idle>,
    /// An idle client that has all it asked for holds it for a while, as a real client does
    /// its work, before its next phase or its end: a step of the simulation's own choosing
    /// resumes it (`Sim::paused`). Meanwhile others queue behind it and send it notices,
    /// forwards and probes, which reach a transaction that has no agent.
    pub paused: bool,
    /// The current phase has had its pause (or was chosen to go on at once).
    pub held_once: bool,
    /// The `lock` calls of the current phase that may still be dropped (`drops.rs`).
    pub calls: Vec<locks_agent::state_machine::CallId>,
}

impl Sim {
    /// A client whose phases only request locks.
    pub fn add_client(&mut self, id: AgentId, options: Options, script: Vec<Vec<Ask>>) {
        let script = script
            .into_iter()
            .map(|phase| phase.into_iter().map(Act::Lock).collect())
            .collect();
        self.add_client_acts(id, options, script);
    }

    /// A client whose phases may convert requests down too.
    pub fn add_client_acts(&mut self, id: AgentId, options: Options, script: Vec<Vec<Act>>) {
        let core = AgentCore::new(id.clone(), self.modes.clone(), options);
        let idle = self.starts_idle(&id).then(super::fast::Idle::default);
        self.clients.insert(
            id,
            Client {
                core,
                script: script.into(),
                deferred: VecDeque::new(),
                results: Vec::new(),
                in_phase: false,
                done: false,
                aborted: None,
                statuses: Vec::new(),
                idle,
                paused: false,
                held_once: false,
                calls: Vec::new(),
            },
        );
    }

    /// The client `id`.
    pub fn client(&self, id: &AgentId) -> &Client {
        &self.clients[id]
    }

    /// The status of `id`'s transaction.
    pub fn status(&self, id: &AgentId) -> TransactionStatus {
        if self.is_idle(id) {
            return self.idle_status(id);
        }
        self.clients[id].core.status()
    }

    /// Starts the next phase of `id`'s script now, whatever its status.
    pub fn start_phase(&mut self, id: &AgentId) {
        let Some(client) = self.clients.get_mut(id) else {
            return;
        };
        let Some(phase) = client.script.pop_front() else {
            return;
        };
        client.in_phase = true;
        client.held_once = false;
        for act in phase {
            match act {
                Act::Lock(ask) => self.ask(id, ask).expect("the request is accepted"),
                Act::Convert(lock, mode) => {
                    let later = self.world.rng.chance(2);
                    let client = self.clients.get_mut(id).expect("a client");
                    if later || !client.deferred.is_empty() {
                        client.deferred.push_back((lock, mode));
                    } else {
                        self.convert(id, &lock, mode);
                    }
                }
            }
        }
    }

    /// Converts `id`'s request on `lock` down to `mode`, now (the script makes sure it is
    /// weaker).
    pub fn convert(&mut self, id: &AgentId, lock: &LockId, mode: Mode) {
        self.adopt(id, None);
        let drops = self.drops;
        self.with_core(id, |c| match c.convert(lock, mode) {
            Ok(effects) => effects,
            // A dropped call withdrew the request, or lowered it below what the script meant.
            Err(_) if drops => Vec::new(),
            Err(e) => panic!("{id}: convert {lock} to {mode}: {e}"),
        });
    }

    /// Makes the next deferred conversion of `id`, if its transaction still runs.
    pub(super) fn convert_deferred(&mut self, id: &AgentId) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        let next = c.deferred.pop_front();
        if !c.core.is_running() {
            c.deferred.clear();
            return;
        }
        if let Some((lock, mode)) = next {
            self.world
                .trace
                .push(format!("{id} converts {lock} to {mode}"));
            self.convert(id, &lock, mode);
        }
    }

    /// The idle clients holding what they asked for until a step resumes them, in order.
    pub(super) fn paused(&self) -> Vec<AgentId> {
        self.clients
            .iter()
            .filter(|(_, c)| c.paused)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The clients with a conversion deferred to a later step, in order.
    pub(super) fn converting(&self) -> Vec<AgentId> {
        self.clients
            .iter()
            .filter(|(_, c)| !c.deferred.is_empty())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// One request, now.
    pub fn ask(&mut self, id: &AgentId, ask: Ask) -> Result<(), locks_agent::RequestError> {
        if self.fast_ask(id, &ask.lock, ask.mode, &ask.nodes, ask.req) {
            return Ok(());
        }
        self.adopt(id, None);
        if self.drops {
            return self.lock_call(id, ask);
        }
        let client = self.clients.get_mut(id).expect("a client");
        let effects = client
            .core
            .request(ask.lock, ask.mode, &ask.nodes, ask.req)?;
        self.world.unsettled.insert(id.clone());
        self.route(id, effects);
        Ok(())
    }

    /// Ends a client's transaction now (its client "is killed").
    pub fn kill(&mut self, id: &AgentId) {
        if self.is_idle(id) {
            self.end_idle(id);
            return;
        }
        self.with_core(id, AgentCore::end);
        if let Some(c) = self.clients.get_mut(id) {
            c.done = true;
        }
    }

    /// Starts next phases and ends finished transactions, until none is ready (a phase that
    /// asks only for what is held is complete at once).
    pub(super) fn drive_clients(&mut self) {
        loop {
            let ready: Vec<AgentId> = self
                .clients
                .iter()
                .filter(|(id, c)| {
                    let have_all = match &c.idle {
                        // Every request of an idle client was granted at once.
                        Some(_) => c.in_phase || self.idle_status(id).have_all_locks(),
                        // With drops, a phase whose requests were all withdrawn is complete.
                        None => {
                            c.core.is_running()
                                && (c.core.status().have_all_locks()
                                    || (self.drops
                                        && c.core.status() == TransactionStatus::NoLocks))
                        }
                    };
                    !c.done
                        && !c.paused
                        && have_all
                        && (c.in_phase || !c.script.is_empty() || self.auto_end)
                })
                .map(|(id, _)| id.clone())
                .collect();
            if ready.is_empty() {
                return;
            }
            for id in ready {
                // An idle holder pauses (every other time) before it goes on: see `paused`.
                if self.is_idle(&id) && !self.clients[&id].held_once {
                    let pause = self.world.rng.chance(2);
                    let c = self.clients.get_mut(&id).expect("a client");
                    c.held_once = true;
                    if pause {
                        self.world.trace.push(format!("{id} holds, idle"));
                        c.paused = true;
                        continue;
                    }
                }
                // The phase's conversions are made before it counts as complete.
                while !self.clients[&id].deferred.is_empty() {
                    self.convert_deferred(&id);
                }
                let idle_result = self.is_idle(&id).then(|| self.idle_result(&id));
                let c = self.clients.get_mut(&id).expect("a client");
                c.calls.clear();
                if c.in_phase {
                    c.in_phase = false;
                    if let Some(r) = idle_result.or_else(|| c.core.lock_result()) {
                        c.results.push(r);
                    }
                }
                if !c.script.is_empty() {
                    self.start_phase(&id);
                } else if self.auto_end {
                    self.finished.push(id.clone());
                    self.kill(&id);
                }
            }
        }
    }

    /// Clients that have not finished their scripts.
    pub fn unfinished(&self) -> Vec<AgentId> {
        self.clients
            .iter()
            .filter(|(_, c)| !c.done)
            .map(|(id, _)| id.clone())
            .collect()
    }
}
