//! The faults, the scenarios built from them, and the profiles that choose how many.
//!
//! A lock scenario runs one kind of fault against a fresh three-node cluster, `injections` times,
//! each time against the node of the client that holds the lock at that moment (or, for
//! [`Fault::IsolateOther`], against another node), then heals and waits for every client to be
//! served again. With three nodes a majority/minority split is one node cut off from two:
//! [`Fault::Isolate`] puts the holder in the minority, [`Fault::IsolateOther`] in the majority.
//! A leader scenario does the same against the node whose gdict replica believes it leads
//! ([`Fault::LEADER`]).

use crate::clock::{MS, Ns};

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The holder's packets are dropped (blackhole routes) while it still hears the others.
    OneWay,
    /// The holder's node is cut off the bridge both ways (it is the minority).
    Isolate,
    /// Another node is cut off both ways (the holder stays in the majority).
    IsolateOther,
    /// The holder's link goes down and up several times, each time shorter than the heartbeat
    /// timeout.
    Flap,
    /// The holder's process is stopped (SIGSTOP), then continued (SIGCONT); its client then
    /// finishes the write it was in the middle of, with its old tokens.
    Pause,
    /// The holder's process is killed (SIGKILL), then started again.
    Kill,
    /// The holder's process is killed (SIGKILL), then started again with its wall clock an
    /// hour behind (libfaketime): its fencing versions must still grow.
    ClockBack,
    /// Every process is killed (SIGKILL) and started again with its wall clock an hour behind;
    /// one of them is killed again while it writes its data directory (at once after its
    /// start) and started once more. Tokens (and leader terms) must still grow.
    RestartAll,
}

impl Fault {
    /// Every kind, in the order a profile runs them.
    pub const ALL: [Fault; 8] = [
        Fault::OneWay,
        Fault::Isolate,
        Fault::IsolateOther,
        Fault::Flap,
        Fault::Pause,
        Fault::Kill,
        Fault::ClockBack,
        Fault::RestartAll,
    ];

    /// The kinds run against the leader of gdict replicas (a leader scenario).
    pub const LEADER: [Fault; 5] = [
        Fault::Isolate,
        Fault::OneWay,
        Fault::Pause,
        Fault::Kill,
        Fault::RestartAll,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::OneWay => "oneway",
            Fault::Isolate => "isolate",
            Fault::IsolateOther => "isolate-other",
            Fault::Flap => "flap",
            Fault::Pause => "pause",
            Fault::Kill => "kill",
            Fault::ClockBack => "clock-back",
            Fault::RestartAll => "restart-all",
        }
    }

    /// Whether it keeps the holder from the others for longer than the detection delays, so
    /// that the lock must move to another client within them. (Not a whole-cluster restart:
    /// nobody is left to take the lock over.)
    pub fn removes_holder(self) -> bool {
        matches!(
            self,
            Fault::OneWay | Fault::Isolate | Fault::Pause | Fault::Kill | Fault::ClockBack
        )
    }
}

/// How long and how hard a run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Its name (`short`, `long`).
    pub name: &'static str,
    /// The nodes' heartbeat timeout.
    pub heartbeat_timeout: Ns,
    /// The nodes' lock delay (`--lock-delay-ms`; the lease is the node's default, three
    /// quarters of the heartbeat timeout, and the start delay the lock delay).
    pub lock_delay: Ns,
    /// What the checker allows on top of heartbeat timeout + lock delay before the lock must
    /// have moved (the node processes are debug builds on a shared machine).
    pub slack: Ns,
    /// Injections of each fault kind.
    pub injections: usize,
    /// How long a fault lasts.
    pub fault: Ns,
    /// How long the cluster runs after a heal before the next fault.
    pub recover: Ns,
    /// Link downs per flap injection, and how long each down and up lasts.
    pub flaps: (usize, Ns),
}

impl Profile {
    /// The profile named by `NEMESIS_PROFILE` (`short` when unset).
    pub fn from_env(value: Option<&str>) -> Result<Profile, String> {
        let short = Profile {
            name: "short",
            heartbeat_timeout: 1_000 * MS,
            lock_delay: 1_000 * MS,
            slack: 2_000 * MS,
            injections: 1,
            fault: 3_000 * MS,
            recover: 1_500 * MS,
            flaps: (4, 300 * MS),
        };
        match value {
            None | Some("short") => Ok(short),
            Some("long") => Ok(Profile {
                name: "long",
                injections: 25,
                ..short
            }),
            Some(other) => Err(format!(
                "NEMESIS_PROFILE={other}: expected `short` or `long`"
            )),
        }
    }

    /// The fault injections a run makes (flaps count each link down), lock and leader
    /// scenarios together.
    pub fn total_injections(&self) -> usize {
        let locks: usize = Fault::ALL
            .iter()
            .map(|f| match f {
                Fault::Flap => self.injections * self.flaps.0,
                _ => self.injections,
            })
            .sum();
        locks + Fault::LEADER.len() * self.injections
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles() {
        assert_eq!(Profile::from_env(None).unwrap().name, "short");
        let long = Profile::from_env(Some("long")).unwrap();
        assert!(
            long.total_injections() >= 200,
            "{}",
            long.total_injections()
        );
        assert!(Profile::from_env(Some("huge")).is_err());
    }
}
