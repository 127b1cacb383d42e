//! Turning what an operation changed on one lock into messages.
//!
//! The rules (which agent is told what) are the contract of the table's module documentation,
//! "Notices: who gets what"; [`emit`] implements rules 1 to 6 for one lock, from the [`Changes`]
//! its queue went through.

use super::agents::Agents;
use super::record::{Changes, LockRecord};
use locks_core::proto::{
    AgentMessage, Conversion, EntryState, LockNotice, LockView, Note, QueueEntry,
};
use locks_core::{AgentId, ModeTable, NodeId};
use smallvec::SmallVec;
use std::sync::Arc;

/// The messages produced by one operation, in the order they should be sent.
pub type Sends = Vec<(AgentId, AgentMessage)>;

/// What the notices of one lock need from the table.
pub(super) struct NotifyCtx<'a> {
    pub node: &'a NodeId,
    pub modes: &'a ModeTable,
    pub agents: &'a Agents,
}

/// Who is told about one lock beyond the rules' defaults.
#[derive(Default)]
pub(super) struct Audience<'a> {
    /// The agent that named the lock in its request (rule 2).
    pub respond: Option<u32>,
    /// An agent removed by this operation (rule 5).
    pub skip: Option<u32>,
    /// The note every notice of this lock carries.
    pub note: Option<&'a Note>,
    /// The requester of a quiet operation (`LockTable::lock_quiet`): told nothing, not even
    /// rule 2's answer (it is `respond` on the lock it named, like any requester).
    pub mute: Option<u32>,
}

/// The view of `rec` as agents see it: holders in grant order (grant version, then agent id).
pub(super) fn view(rec: &LockRecord, modes: &ModeTable, agents: &Agents) -> LockView {
    let mut granted: Vec<(u64, &AgentId, _)> = rec
        .entries()
        .iter()
        .filter_map(|e| Some((e.version, agents.id(e.agent)?, e.held?)))
        .collect();
    granted.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let converting = rec
        .converting()
        .filter_map(|a| {
            let e = rec.entry(a)?;
            Some(Conversion {
                agent: agents.id(a)?.clone(),
                held: e.held?,
                requested: e.want?,
            })
        })
        .collect();
    let waiting = rec
        .waiting()
        .filter_map(|a| {
            Some(QueueEntry {
                agent: agents.id(a)?.clone(),
                mode: rec.entry(a)?.want?,
            })
        })
        .collect();
    LockView {
        version: rec.version,
        group: rec.group(modes),
        granted: granted
            .into_iter()
            .map(|(_, agent, mode)| QueueEntry {
                agent: agent.clone(),
                mode,
            })
            .collect(),
        converting,
        waiting,
    }
}

/// Whether the rules name nobody but the muted requester or the removed agent: the usual
/// uncontended operation (one holder, no queue, no watcher). Decided without building the
/// lists `emit` would sort and then find empty, which cost the fast path a sixth of its time.
fn nobody_to_tell(rec: &LockRecord, ch: &Changes, aud: &Audience<'_>) -> bool {
    let silent = |a: u32| Some(a) == aud.skip || Some(a) == aud.mute;
    let queues = ch.holders || ch.conv_mark.is_some() || ch.wait_mark.is_some();
    ch.changed.iter().all(|&a| silent(a))
        && aud.respond.is_none_or(silent)
        && (!queues || rec.converting().chain(rec.waiting()).all(silent))
        && (!ch.touched() || rec.watchers().iter().all(|&w| silent(w)))
}

/// Whether a notice of `state` carries the lock's queue (rule 4): when its addressee converts
/// or waits, or holds the lock while others (`queued`) convert or wait on it. A holder's notice
/// carries it so that an agent whose own entry changed while a converter waited for it (it
/// converted up behind that converter and back down) keeps the view the waiter forwarded:
/// without it the waiter, told of nothing new, would never learn of its wait again, and a
/// cycle it closed later would stay unresolved.
pub(super) fn with_queue(state: &EntryState, queued: bool) -> bool {
    state.is_waiting() || (queued && !matches!(state, EntryState::Absent))
}

/// Whether the release of `ch` is quiet (rule 3's exception, the table's module doc): it
/// removed a gone agent's plain holder entry, no conversion is pending or was granted, and every
/// entry it granted holds a mode that no remaining waiter's mode is compatible with.
///
/// Why the waiters need not hear of it: each entry granted was pending ahead of every
/// remaining waiter (grants are FIFO) in a mode incompatible with the waiter's, so the waiter
/// already waited for it; a holder that stays blocks the same waiters as before (an entry
/// ahead that it blocked was not granted). So a waiter's last view still shows everyone it
/// waits for, and more only in the gone agent, which can confirm no wait of a deadlock probe
/// (`locks-agent`'s `probe.rs`): its analysis may see an edge that is gone, never miss one.
fn quiet_release(rec: &LockRecord, modes: &ModeTable, ch: &Changes, aud: &Audience<'_>) -> bool {
    if !ch.gone_holder || ch.conv_mark.is_some() || rec.converting().next().is_some() {
        return false;
    }
    ch.changed
        .iter()
        .filter(|&&a| Some(a) != aud.skip)
        .all(|&g| match rec.entry(g) {
            Some(e) if e.want.is_none() => e.held.is_some_and(|held| {
                rec.waiting().all(|w| {
                    rec.entry(w)
                        .and_then(|e| e.want)
                        .is_some_and(|want| !modes.compatible(held, want))
                })
            }),
            // Anything else changed (cannot happen in a removal): tell everyone, as ever.
            _ => false,
        })
}

/// Appends the messages about `rec` after an operation changed it as `ch` says. Returns whether
/// some pending entry may now have missed a release ahead of it (`Some(true)`: a quiet
/// release), or that every pending entry was told this version (`Some(false)`); `None` when
/// that did not change.
pub(super) fn emit(
    rec: &LockRecord,
    ctx: &NotifyCtx<'_>,
    ch: &Changes,
    aud: &Audience<'_>,
    out: &mut Sends,
) -> Option<bool> {
    // A lock some of whose waiters missed a quiet release takes the long way: telling even
    // the quiet requester alone tells them all.
    if !rec.stale_pending() && nobody_to_tell(rec, ch, aud) {
        return None;
    }
    let silent = |a: u32| Some(a) == aud.skip || Some(a) == aud.mute;
    let quiet = quiet_release(rec, ctx.modes, ch, aud);
    // Inline: most operations tell a handful of agents (often nobody), and these lists lived
    // only for this call, two allocations per lock and operation under the table's lock.
    let mut who: SmallVec<[u32; 8]> = SmallVec::from_slice(&ch.changed);
    who.extend(aud.respond);
    let conv_changed = ch.conv_mark.is_some();
    if !quiet && (ch.holders || conv_changed) {
        let from = if ch.holders {
            0
        } else {
            ch.conv_mark.unwrap_or(0)
        };
        who.extend(rec.converting().skip(from));
    }
    if quiet {
        // Rule 3's exception: every waiter already waited for whoever was granted.
    } else if ch.holders || conv_changed {
        who.extend(rec.waiting());
    } else if let Some(from) = ch.wait_mark {
        who.extend(rec.waiting().skip(from));
    }
    // After a quiet release, whoever pending is told next is told with all the others: an
    // agent that finds the holders changed between two of its views takes it that everyone
    // pending was sent the newer one (`locks-agent`'s knowledge, "shared" views). An entry
    // this operation created has no older view; a muted requester counts as told, so that
    // both shells send the same notices to the others.
    let mut fresh = !quiet && ch.holders;
    if !quiet && !fresh && rec.stale_pending() {
        let older = |a: u32| {
            Some(a) != aud.skip
                && Some(a) != ch.created
                && rec.entry(a).is_some_and(|e| e.want.is_some())
        };
        if who.iter().copied().any(older) {
            who.extend(rec.converting());
            who.extend(rec.waiting());
            fresh = true;
        }
    }
    who.sort_unstable();
    who.dedup();
    let staleness = if quiet {
        Some(true)
    } else if fresh {
        Some(false)
    } else {
        None
    };
    let mut recipients: SmallVec<[(&AgentId, u32); 8]> = who
        .into_iter()
        .filter(|&a| !silent(a))
        .filter_map(|a| Some((ctx.agents.id(a)?, a)))
        .collect();
    recipients.sort_unstable();

    let mut shared: Option<Arc<LockView>> = None;
    let mut view_once = || {
        shared
            .get_or_insert_with(|| Arc::new(view(rec, ctx.modes, ctx.agents)))
            .clone()
    };
    // Rule 4: a holder of a lock that others convert or wait on gets the queue too.
    let queued = rec.converting().next().is_some() || rec.waiting().next().is_some();
    for (id, a) in recipients {
        let state = rec.entry(a).map_or(EntryState::Absent, |e| e.state());
        let queue = with_queue(&state, queued).then(&mut view_once);
        out.push((
            id.clone(),
            AgentMessage::Notice(LockNotice {
                node: ctx.node.clone(),
                lock: rec.id.clone(),
                version: rec.version,
                state,
                queue,
                note: aud.note.cloned().map(Box::new),
            }),
        ));
    }
    if !ch.touched() {
        return staleness;
    }
    let mut watchers: SmallVec<[&AgentId; 4]> = rec
        .watchers()
        .iter()
        .filter(|&&w| Some(w) != aud.skip && Some(w) != aud.mute)
        .filter_map(|&w| ctx.agents.id(w))
        .collect();
    watchers.sort_unstable();
    for id in watchers {
        out.push((
            id.clone(),
            AgentMessage::Watched {
                node: ctx.node.clone(),
                lock: rec.id.clone(),
                view: view_once(),
            },
        ));
    }
    staleness
}
