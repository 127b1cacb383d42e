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
pub type Effects = Vec<(AgentId, AgentMessage)>;

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
    /// The requester of a quiet operation (`LockTable::lock_quiet`): told nothing.
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

/// Appends the messages about `rec` after an operation changed it as `ch` says.
/// Whether a notice of `state` carries the lock's queue (rule 4): when its addressee converts
/// or waits, or holds the lock while others (`queued`) convert or wait on it. A holder's
/// notice used to carry none; then an agent whose own entry changed while a converter waited
/// for it (it converted up behind that converter and back down) dropped the view the waiter
/// had forwarded, and, the waiter being told of nothing new, never learnt of its wait again:
/// the cycle it closed later stayed unresolved.
pub(super) fn with_queue(state: &EntryState, queued: bool) -> bool {
    state.is_waiting() || (queued && !matches!(state, EntryState::Absent))
}

pub(super) fn emit(
    rec: &LockRecord,
    ctx: &NotifyCtx<'_>,
    ch: &Changes,
    aud: &Audience<'_>,
    out: &mut Effects,
) {
    if nobody_to_tell(rec, ch, aud) {
        return;
    }
    // Inline: most operations tell a handful of agents (often nobody), and these lists lived
    // only for this call, two allocations per lock and operation under the table's lock.
    let mut who: SmallVec<[u32; 8]> = SmallVec::from_slice(&ch.changed);
    who.extend(aud.respond);
    let conv_changed = ch.conv_mark.is_some();
    if ch.holders || conv_changed {
        let from = if ch.holders {
            0
        } else {
            ch.conv_mark.unwrap_or(0)
        };
        who.extend(rec.converting().skip(from));
    }
    if ch.holders || conv_changed {
        who.extend(rec.waiting());
    } else if let Some(from) = ch.wait_mark {
        who.extend(rec.waiting().skip(from));
    }
    who.sort_unstable();
    who.dedup();
    let mut recipients: SmallVec<[(&AgentId, u32); 8]> = who
        .into_iter()
        .filter(|&a| Some(a) != aud.skip && Some(a) != aud.mute)
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
        return;
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
}
