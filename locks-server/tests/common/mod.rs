//! Helpers shared by the lock table tests: agents named `T1`, `T2`, ... (StickyLocking's threads),
//! requests in one line, and a one-line picture of a lock's queue in the shape of StickyLocking's
//! diagrams. `net` holds those of the tests over TCP and through the router, `logs` those of the
//! log-flood tests.

#![allow(dead_code)]

pub mod logs;
pub mod net;

use locks_core::proto::{AgentMessage, EntryState, LockNotice, ServerRequest, Wait};
use locks_core::waits::blockers_of;
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId};
use locks_server::TableSnapshot;
use locks_server::state_machine::LockTable;
use locks_server::state_machine::{Sends, TableEffect};

pub fn node() -> NodeId {
    NodeId::new("n1").expect("valid node name")
}

/// Agent `Tn`.
pub fn t(n: u64) -> AgentId {
    AgentId::new(node(), 1, n)
}

pub fn table() -> LockTable {
    LockTable::new(node(), ModeTable::standard(), 0)
}

pub fn lock(table: &mut LockTable, n: u64, id: &LockId, mode: Mode) -> Sends {
    table.handle(ServerRequest::Lock {
        agent: t(n),
        lock: id.clone(),
        mode,
    })
}

pub fn convert(table: &mut LockTable, n: u64, id: &LockId, mode: Mode) -> Sends {
    table.handle(ServerRequest::Convert {
        agent: t(n),
        lock: id.clone(),
        mode,
    })
}

pub fn unlock(table: &mut LockTable, n: u64, id: &LockId) -> Sends {
    table.handle(ServerRequest::Unlock {
        agent: t(n),
        lock: id.clone(),
    })
}

pub fn remove(table: &mut LockTable, n: u64) -> Sends {
    table.handle(ServerRequest::RemoveAgent { agent: t(n) })
}

pub fn surrender(table: &mut LockTable, n: u64, id: &LockId, version: u64) -> Sends {
    table.handle(ServerRequest::Surrender {
        agent: t(n),
        lock: id.clone(),
        version,
        waits: vec![],
    })
}

fn name(a: &AgentId) -> String {
    format!("T{}", a.serial())
}

/// `"S [T1 S, T2 S] conv [T1 S>X] wait [T3 S]"`: group, holders in grant order, conversions
/// (held>requested) and waiters in FIFO order; `"-"` when the lock does not exist.
pub fn shape(table: &LockTable, id: &LockId) -> String {
    let Some(v) = table.view(id) else {
        return "-".to_owned();
    };
    let group = v.group.map_or("-".to_owned(), |g| g.to_string());
    let granted: Vec<String> = v
        .granted
        .iter()
        .map(|e| format!("{} {}", name(&e.agent), e.mode))
        .collect();
    let conv: Vec<String> = v
        .converting
        .iter()
        .map(|c| format!("{} {}>{}", name(&c.agent), c.held, c.requested))
        .collect();
    let wait: Vec<String> = v
        .waiting
        .iter()
        .map(|e| format!("{} {}", name(&e.agent), e.mode))
        .collect();
    format!(
        "{group} [{}] conv [{}] wait [{}]",
        granted.join(", "),
        conv.join(", "),
        wait.join(", ")
    )
}

/// The notices in `effects`, as `(agent, lock, state)`.
pub fn notices(effects: &Sends) -> Vec<(String, LockId, EntryState)> {
    effects
        .iter()
        .filter_map(|(a, m)| match m {
            AgentMessage::Notice(n) => Some((name(a), n.lock.clone(), n.state)),
            _ => None,
        })
        .collect()
}

/// The notice `effects` sends to `Tn` about `id`.
pub fn notice_to<'a>(effects: &'a Sends, n: u64, id: &LockId) -> Option<&'a LockNotice> {
    effects.iter().find_map(|(a, m)| match m {
        AgentMessage::Notice(x) if *a == t(n) && x.lock == *id => Some(x),
        _ => None,
    })
}

/// Whether `Tn` holds its direct lock on `id` in (at least) `mode`: its entry there and its
/// entries on every ancestor are granted in modes that cover `mode` and its intention mode.
pub fn holds(table: &LockTable, n: u64, id: &LockId, mode: Mode) -> bool {
    let modes = table.modes().clone();
    let covered = |lock: &LockId, m: Mode| {
        table
            .state(&t(n), lock)
            .held()
            .is_some_and(|h| modes.covers(h, m))
    };
    covered(id, mode) && id.ancestors().all(|a| covered(&a, modes.intention(mode)))
}

/// Whether `w` holds in the table as `snap` shows it (the rules the agents use).
/// The promise of a waiter's last view after quiet releases (the table's rule 3): it shows
/// everyone the waiter waits for now (`waits`), and beyond that only agents in `gone`. Both
/// lists as [`blockers_of`] gives them, with any renames undone by the caller.
pub fn view_covers_waits(
    then: &[AgentId],
    waits: &[AgentId],
    gone: &[AgentId],
) -> Result<(), String> {
    if let Some(b) = waits.iter().find(|b| !then.contains(b)) {
        return Err(format!("waits for {b:?}, its view shows only {then:?}"));
    }
    if let Some(b) = then
        .iter()
        .find(|b| !waits.contains(b) && !gone.contains(b))
    {
        return Err(format!(
            "its view shows {b:?}, it waits for {waits:?}, and of those only {gone:?} ended"
        ));
    }
    Ok(())
}

pub fn waits_now(snap: &TableSnapshot, modes: &ModeTable, w: &Wait) -> bool {
    snap.lock(&w.lock)
        .is_some_and(|l| blockers_of(modes, &l.view(), &w.waiter).contains(&&w.blocker))
}

/// Whether agent `Ta` holds its direct lock `lock` in `m`: its entry there and on every
/// ancestor is granted (or converting) in a mode that covers `m` (its intention on ancestors).
pub fn held_direct(
    snap: &TableSnapshot,
    modes: &ModeTable,
    a: u64,
    lock: &LockId,
    m: Mode,
) -> bool {
    let covers = |id: &LockId, want: Mode| {
        snap.state(&t(a), id)
            .held()
            .is_some_and(|h| modes.covers(h, want))
    };
    covers(lock, m) && lock.ancestors().all(|anc| covers(&anc, modes.intention(m)))
}

/// Applies `req` to `quiet` as the fast path does (`lock_quiet` for a `Lock`, `step_quiet`
/// otherwise) and checks it against `fx`, what `handle` answered on a table in the same state:
/// the same messages less the requester's own (a refusal excepted), and for a `Lock` the answer
/// `holds` gives afterwards.
pub fn step_quietly(quiet: &mut LockTable, req: &ServerRequest, fx: &Sends) -> Result<(), String> {
    let refused = matches!(&fx[..], [(_, AgentMessage::Rejected { .. })]);
    let got = match req {
        ServerRequest::Lock { agent, lock, mode } => {
            let (got, held) = quiet.lock_quiet(agent, lock, *mode);
            if !refused && held != quiet.holds(agent, lock) {
                return Err(format!("lock_quiet answered {held:?} on {req:?}"));
            }
            got
        }
        _ => quiet.step_quiet(req.clone()),
    };
    let expected: Vec<TableEffect> = fx
        .iter()
        .filter(|(to, m)| to != req.agent() || matches!(m, AgentMessage::Rejected { .. }))
        .map(|(to, msg)| TableEffect::Send {
            to: to.clone(),
            msg: msg.clone(),
        })
        .collect();
    if got != expected {
        return Err(format!(
            "quiet step differs on {req:?}: {got:?} against {expected:?}"
        ));
    }
    Ok(())
}
