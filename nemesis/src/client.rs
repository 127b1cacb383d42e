//! One client's loop as a pure state machine: take the lock, write, hold, write again, end,
//! think, again. The driver feeds it node lines and clock ticks and carries out its
//! [`Action`]s (commands to the node, writes to the fenced register).
//!
//! Invariant: a client has at most one transaction at a time, named `t<node>_<seq>` (unique in
//! a run); lines about older transactions of the client change nothing.

use crate::clock::{MS, Ns};
use crate::history::{NodeLine, Tokens};

/// What the driver must do for a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send `lock <txn> r/x X <all nodes> majority`.
    Lock(String),
    /// Write to the fenced register with these tokens.
    Write(String, Tokens),
    /// Send `end <txn>`.
    End(String),
}

/// Where a client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Between transactions; the next begins at the given time.
    Idle(Ns),
    /// The lock is requested.
    Waiting(String),
    /// The lock is held until the given time.
    Holding(String, Tokens, Ns),
    /// `end` was sent at the given time.
    Ending(String, Ns),
    /// The node's process is gone.
    Down,
}

/// Give up waiting for `ended` after this long (the node may be cut off mid-`end`).
const ENDING_LIMIT: Ns = 10_000 * MS;

/// One client.
#[derive(Debug, Clone)]
pub struct Client {
    /// Its node's index.
    pub node: usize,
    /// Where it is.
    pub state: State,
    /// Its process is stopped: no time passes for it.
    pub frozen: bool,
    /// Begin no new transaction (the scenario is ending).
    pub stopping: bool,
    seq: u32,
    rng: u64,
}

impl Client {
    /// A client of node `node`, beginning its first transaction at `now`.
    pub fn new(node: usize, now: Ns) -> Client {
        Client {
            node,
            state: State::Idle(now),
            frozen: false,
            stopping: false,
            seq: 0,
            rng: 0x9E37_79B9_7F4A_7C15 ^ (node as u64 + 1),
        }
    }

    /// A time in `[lo, hi)` ms; deterministic per client.
    fn pick(&mut self, lo: u64, hi: u64) -> Ns {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (lo + self.rng % (hi - lo)) * MS
    }

    /// The transaction holding the lock, if the client holds it and is not frozen.
    pub fn holder(&self) -> Option<&str> {
        match &self.state {
            State::Holding(txn, _, _) if !self.frozen => Some(txn),
            _ => None,
        }
    }

    /// The transaction in progress, if any.
    pub fn txn(&self) -> Option<&str> {
        match &self.state {
            State::Waiting(t) | State::Holding(t, _, _) | State::Ending(t, _) => Some(t),
            State::Idle(_) | State::Down => None,
        }
    }

    /// When [`Client::tick`] next has something to do.
    pub fn deadline(&self) -> Option<Ns> {
        if self.frozen {
            return None;
        }
        match &self.state {
            State::Idle(at) if !self.stopping => Some(*at),
            State::Holding(_, _, until) => Some(*until),
            State::Ending(_, since) => Some(since + ENDING_LIMIT),
            _ => None,
        }
    }

    /// Holds on at least until `until` (the driver keeps a holder busy through a fault).
    pub fn extend(&mut self, until: Ns) {
        if let State::Holding(_, _, u) = &mut self.state {
            *u = (*u).max(until);
        }
    }

    /// A line of the client's node, read at `now`.
    pub fn on_line(&mut self, now: Ns, line: &NodeLine) -> Vec<Action> {
        let current = self.txn().map(str::to_owned);
        let ours = |txn: &str| current.as_deref() == Some(txn);
        match (line, &mut self.state) {
            (NodeLine::Granted { txn, tokens }, State::Waiting(_)) if ours(txn) => {
                let hold = self.pick(20, 150);
                self.state = State::Holding(txn.clone(), tokens.clone(), now + hold);
                vec![Action::Write(txn.clone(), tokens.clone())]
            }
            (NodeLine::Granted { txn, tokens }, State::Holding(_, held, _)) if ours(txn) => {
                // A re-grant: later writes carry the new tokens.
                *held = tokens.clone();
                Vec::new()
            }
            (
                NodeLine::Lost { txn, .. } | NodeLine::Error { txn },
                State::Waiting(_) | State::Holding(..),
            ) if ours(txn) => {
                self.state = State::Ending(txn.clone(), now);
                vec![Action::End(txn.clone())]
            }
            (NodeLine::Ended { txn } | NodeLine::Error { txn }, State::Ending(..)) if ours(txn) => {
                let think = self.pick(5, 40);
                self.state = State::Idle(now + think);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Time passes: begin, end or give up what is due at `now`.
    pub fn tick(&mut self, now: Ns) -> Vec<Action> {
        if self.deadline().is_none_or(|d| now < d) {
            return Vec::new();
        }
        match &self.state {
            State::Idle(_) => {
                self.seq += 1;
                let txn = format!("t{}_{}", self.node + 1, self.seq);
                self.state = State::Waiting(txn.clone());
                vec![Action::Lock(txn)]
            }
            State::Holding(txn, tokens, _) => {
                let actions = vec![
                    Action::Write(txn.clone(), tokens.clone()),
                    Action::End(txn.clone()),
                ];
                self.state = State::Ending(txn.clone(), now);
                actions
            }
            State::Ending(..) => {
                self.state = State::Idle(now);
                Vec::new()
            }
            State::Waiting(_) | State::Down => Vec::new(),
        }
    }

    /// The process was continued at `now`: a holder finishes the write it was in the middle
    /// of, with the tokens it had, and ends.
    pub fn resume(&mut self, now: Ns) -> Vec<Action> {
        self.frozen = false;
        match &self.state {
            State::Holding(txn, tokens, _) => {
                let actions = vec![
                    Action::Write(txn.clone(), tokens.clone()),
                    Action::End(txn.clone()),
                ];
                self.state = State::Ending(txn.clone(), now);
                actions
            }
            _ => Vec::new(),
        }
    }

    /// The process was killed.
    pub fn killed(&mut self) {
        self.state = State::Down;
        self.frozen = false;
    }

    /// A new process of the node runs from `now`.
    pub fn restarted(&mut self, now: Ns) {
        self.state = State::Idle(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::NodeId;

    fn tokens() -> Tokens {
        vec![(NodeId::new("n1").unwrap(), 7)]
    }

    #[test]
    fn a_round_locks_writes_holds_writes_and_ends() {
        let mut c = Client::new(0, 0);
        assert_eq!(c.tick(0), vec![Action::Lock("t1_1".into())]);
        let granted = NodeLine::Granted {
            txn: "t1_1".into(),
            tokens: tokens(),
        };
        assert_eq!(
            c.on_line(10, &granted),
            vec![Action::Write("t1_1".into(), tokens())]
        );
        assert_eq!(c.holder(), Some("t1_1"));
        let until = c.deadline().unwrap();
        assert!(c.tick(until - 1).is_empty());
        assert_eq!(
            c.tick(until),
            vec![
                Action::Write("t1_1".into(), tokens()),
                Action::End("t1_1".into())
            ]
        );
        // An old transaction's line changes nothing.
        assert!(
            c.on_line(until, &NodeLine::Ended { txn: "t1_0".into() })
                .is_empty()
        );
        assert!(matches!(c.state, State::Ending(..)));
        c.on_line(until, &NodeLine::Ended { txn: "t1_1".into() });
        let next = c.deadline().unwrap();
        assert_eq!(c.tick(next), vec![Action::Lock("t1_2".into())]);
    }

    #[test]
    fn a_lost_lock_ends_the_transaction_and_a_frozen_client_waits() {
        let mut c = Client::new(1, 0);
        c.tick(0);
        c.on_line(
            1,
            &NodeLine::Granted {
                txn: "t2_1".into(),
                tokens: tokens(),
            },
        );
        c.frozen = true;
        assert_eq!(c.deadline(), None);
        assert_eq!(c.holder(), None);
        assert_eq!(
            c.resume(50),
            vec![
                Action::Write("t2_1".into(), tokens()),
                Action::End("t2_1".into())
            ]
        );
        let mut d = Client::new(2, 0);
        d.tick(0);
        d.on_line(
            1,
            &NodeLine::Granted {
                txn: "t3_1".into(),
                tokens: tokens(),
            },
        );
        let lost = NodeLine::Lost {
            txn: "t3_1".into(),
            cause: "node-down".into(),
        };
        assert_eq!(d.on_line(2, &lost), vec![Action::End("t3_1".into())]);
    }
}
