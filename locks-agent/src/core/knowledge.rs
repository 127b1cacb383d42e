//! What an agent knows about lock copies: its own entry on each `(lock, node)`, the newest view
//! of each queue, and the deadlocks it has heard of.
//!
//! Invariants:
//! - Versions per `(lock, node)` only grow. An entry state is replaced only by a server notice
//!   with a larger version than any seen for that copy; a view only by a larger version (or by
//!   the same one as received, in place of one edited by `withdrawn.rs`), and never by one
//!   older than the agent's own newest notice of that copy that shows it there (such a notice
//!   without a queue says the agent holds the lock and nobody waits, so older views are
//!   outdated). A notice that its entry is gone outdates only its own place in older views
//!   (`withdrawn.rs`).
//! - Only views with pending entries are kept (as received): the others cause no wait-for
//!   edge.
//! - After the agent surrenders a copy at version `v`, that copy is *suspended* — its entry does
//!   not count as held — until the server's answer to the surrender arrives (a notice with the
//!   agent's [`Note::Surrendered`] at `v`, or [`Note::NotSurrendered`]), or a notice that its
//!   entry is gone (the server ignores, without an answer, a surrender of a lock the agent has
//!   no entry on). A notice newer than `v` is no answer: the server applies a surrender decided
//!   on an older version when its waits are a whole cycle now, so a grant may come in between.
//!   Its entries on the lock's descendants on that node are suspended too, until their first
//!   notice at or after the operation that applied the surrender, or until the server shows it
//!   was not applied. So a request that lost its grant is pending again at once, never "held"
//!   on the strength of a grant the server took back.
//!
//! - Who has a stored view's version is known exactly for the agents this one sent it to or got
//!   it from ([`Knowledge::was_sent`]); that record belongs to the stored view and goes with it,
//!   so it never outgrows the views an agent keeps, however many agents it ever met.
//! - After the agent sends a conversion down of a copy to mode `m`, and until the server's answer
//!   to it (the notice with [`Note::Converted`], or a refusal) arrives, the copy's entry counts
//!   only for modes `m` covers. The conversion lowers what the server holds, and the notices
//!   still on their way from before it was applied say nothing about what is held after it: a
//!   grant of `S` followed by a conversion to `IS` and a new request for `S` must wait for the
//!   server, not ride on the old grant. (Up to `m` the old entry is right: a conversion down
//!   never takes from a holder a mode it still asks for.) Likewise after the agent sends an
//!   `Unlock` of a copy: until the answer ([`Note::Unlocked`], or a refusal) arrives, no grant of
//!   the copy counts.
//! - Who else was sent a stored view, where the agent can tell, so that it forwards the view
//!   only to agents that may lack it ([`Knowledge::already_sent`]). Both rules below rely on
//!   another agent `F` having forwarded the view; they are used only when `F` lives on this
//!   agent's own node, because `F` skips agents on nodes *it* sees as down, and only agents of
//!   one node share one view of which nodes are up (and `F` forwards again when a node comes
//!   back). `F` forwards whenever it is pending in a view, even while its requests are all
//!   met (an `Any` request granted elsewhere and still queued here):
//!   - a view is *shared* when the server's notice contract (`locks-server`'s table, "Notices:
//!     who gets what", rule 3) shows that every agent pending in it was sent that version: the
//!     agent was pending both in the view it held before and in this one, and the holders
//!     differ. While it stays pending it is told of every change ahead of it, and the notices
//!     of one server arrive in order, so nothing changed the holders between the two views but
//!     the operation of this notice, and a change of holders is told to every converter and
//!     waiter. (The one change of holders a waiter is not told of, the server's quiet release
//!     of a gone local holder, marks the lock, and the next notice to anyone pending there that
//!     had a view before goes to all of them.) A holder of a shared view (a holder is sent a view only with a change of its own
//!     entry) gets it from the first
//!     agent pending in it that the holder blocks: that agent was sent it too and forwards it
//!     to every agent it waits for, or a newer version comes, to which the same applies;
//!   - a view forwarded by agent `F` was sent by `F`, in the same settling, to every agent `F`
//!     waits for in it that is not pending there (or `F` knew they had it, by these same
//!     rules), and also to those pending there when someone waits for `F` in it (an agent
//!     nobody is known to wait for leaves those out: see `agent/resolve.rs`).
//!
//! Cost: lock ids order by their keys, so a lock's descendants follow it and its subtree is a
//! range of the maps; the views (only those with waiters) and the outstanding surrenders are
//! kept apart, so nothing the agent does per message walks every lock it holds.

use super::status::Deadlock;
use key::KeyRef;
use locks_core::proto::{EntryState, LockNotice, LockView, Note};
use locks_core::{AgentId, Key, LockId, Mode, NodeId};
use smallvec::SmallVec;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// Why an entry does not count for now.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Suspension {
    /// This agent surrendered this very copy at `version`.
    Surrendered { version: u64 },
    /// This agent surrendered the ancestor `lock` (same node) at `version`; `applied_at` is the
    /// version the server applied it at, once its answer came.
    Under {
        lock: LockId,
        version: u64,
        applied_at: Option<u64>,
    },
}

/// One `(lock, node)` as this agent knows it: kept small, there is one per lock held. Notices
/// at or below `entry_version` are ignored, and below the version of a surrender of this copy
/// (a suspension, kept apart: they are rare).
#[derive(Clone, Debug, Default)]
struct Copy {
    /// The agent's own entry, from the newest server notice.
    entry: Option<EntryState>,
    /// The version of that notice.
    entry_version: u64,
    /// Views below this version are outdated.
    view_min: u64,
}

/// A view as stored.
#[derive(Clone, Debug)]
struct StoredView {
    view: Arc<LockView>,
    source: Source,
    /// The agents known to have this very version: sent it by this agent, or its sender.
    sent: SmallVec<[AgentId; 2]>,
    /// The view as received, when `view` is it without this agent's own entries
    /// (`withdrawn.rs`).
    raw: Option<Arc<LockView>>,
}

/// Who else the agent can tell was sent a stored view (module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    /// Nothing is known.
    Unknown,
    /// The server sent it to every agent pending in it.
    Shared,
    /// This agent forwarded it to every agent it waits for in it.
    ForwardedBy(AgentId),
}

/// What a server notice changed ([`Knowledge::take_notice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum News {
    /// Nothing: an old or repeated notice.
    Nothing,
    /// The queue only: the agent's entry and everything that decides whether its requests are
    /// held are as they were.
    Queue,
    /// The agent's entry, or what it counts for (an answer, a surrender's outcome).
    Entry,
}

/// Whether `agent` converts or waits in `view`.
pub fn is_pending_in(view: &LockView, agent: &AgentId) -> bool {
    view.converting.iter().any(|c| c.agent == *agent)
        || view.waiting.iter().any(|w| w.agent == *agent)
}

/// The waiters excused from a copy, as of a version (`Knowledge::excuse`).
type Excused = (u64, SmallVec<[AgentId; 2]>);

/// The caps on one copy: per descendant whose conversion down or unlock is unanswered, the
/// most the copy may hold once it is applied (`None`: nothing).
type Caps = Vec<(LockId, Option<Mode>)>;

/// The agent's knowledge of lock copies and of deadlocks.
///
/// The views are kept apart from the copies, so that what the deadlock analysis reads costs
/// what the waiting part of the agent's world holds, not what it holds in all.
#[derive(Clone, Debug, Default)]
pub struct Knowledge {
    copies: BTreeMap<(LockId, NodeId), Copy>,
    /// The newest view with pending entries of each copy that has one, from a notice or a
    /// forward.
    ///
    /// Boxed: a map's first node holds room for eleven values, and a new agent's first view
    /// allocated that node at eleven times a view's size.
    views: BTreeMap<(LockId, NodeId), Box<StoredView>>,
    /// The copies this agent surrendered whose answer has not come yet.
    surrenders: BTreeSet<(LockId, NodeId)>,
    /// The suspended copies (module documentation).
    suspended: BTreeMap<(LockId, NodeId), Suspension>,
    /// The conversions down this agent sent to a copy and whose answer has not come, oldest
    /// first: the modes converted to (module documentation).
    lowering: BTreeMap<(LockId, NodeId), VecDeque<Mode>>,
    deadlocks: Vec<Deadlock>,
    /// Waiters that said they do not wait on a copy, as of a version: their edges from views
    /// of that copy up to that version are left out of the graph.
    excused: BTreeMap<(LockId, NodeId), Excused>,
    /// The copies this agent unlocked, with how many of its unlocks the server has not
    /// answered yet: until it has, no grant of the copy counts (one sent before the unlock may
    /// still be on its way).
    unlocking: BTreeMap<(LockId, NodeId), u32>,
    /// Ancestors' copies capped until the answer to a conversion down or an unlock of one of
    /// their descendants: per copy, the descendant and the most the copy may hold once that
    /// request is applied (`None`: nothing) (`answers.rs`).
    capped: BTreeMap<(LockId, NodeId), Caps>,
    /// The copies this agent withdrew from whose `Unlock` the server has not answered yet
    /// (`withdrawn.rs`).
    withdrawn: BTreeSet<(LockId, NodeId)>,
    /// Per node that went down, the newest version the agent had seen of it: forwards at or
    /// below it are from before ([`Knowledge::forget_node`]).
    floors: BTreeMap<NodeId, u64>,
    /// Surrenders the server ignored (stale), not yet taken for the node's metrics.
    pub(crate) ignored_surrenders: u64,
}

impl Knowledge {
    /// Takes in a server notice addressed to `me`. Returns whether anything changed.
    pub fn on_notice(&mut self, me: &AgentId, n: LockNotice) -> bool {
        self.take_notice(me, n) != News::Nothing
    }

    /// Takes in a server notice addressed to `me`, and says what it changed.
    pub(crate) fn take_notice(&mut self, me: &AgentId, n: LockNotice) -> News {
        let mut changed = false;
        if let Some(Note::Unlocked) = n.note.as_deref() {
            changed |= self.unlock_answered(&n.lock, &n.node);
        }
        if let Some(Note::Surrendered { agent, .. }) = n.note.as_deref() {
            changed |= self.record_deadlock(Deadlock {
                victim: agent.clone(),
                lock: n.lock.clone(),
                node: n.node.clone(),
            });
        }
        let key = (n.lock, n.node);
        // Before the version test: a conversion that changed nothing is answered at the
        // version the agent has already seen.
        if matches!(n.note.as_deref(), Some(Note::Converted)) {
            changed |= self.conversion_answered(&key.0, &key.1);
        }
        if let Some(Note::NotSurrendered { version }) = n.note.as_deref()
            && self.suspended.get(&key) == Some(&Suspension::Surrendered { version: *version })
        {
            changed |= self.surrender_refused(me, &key, *version, n.queue.clone());
        }
        let absent = n.state == EntryState::Absent;
        let copy = Self::copy_mut(&mut self.copies, &key);
        let suspension = if self.suspended.is_empty() {
            None
        } else {
            self.suspended.get(&key)
        };
        let floor = match suspension {
            Some(Suspension::Surrendered { version }) => copy.entry_version.max(*version),
            _ => copy.entry_version,
        };
        // A notice that the entry is gone at the very version surrendered ends the surrender:
        // the victim decided on another agent's view of the version its own unlock made, and
        // the server ignores a surrender of a copy it has no entry of, without an answer.
        let gone_at_surrender = absent
            && n.version > copy.entry_version
            && matches!(suspension, Some(Suspension::Surrendered { version }) if *version == n.version);
        if n.version <= floor && !gone_at_surrender {
            // Only the answers above changed anything, and each may change what is held.
            return if changed { News::Entry } else { News::Nothing };
        }
        // A surrender is over with its answer, or with the agent's entry (the server ignores,
        // without an answer, a surrender of a lock the agent has no entry on); an entry under
        // a surrendered lock is known again from the notice of the operation that applied it.
        let lifted = match suspension {
            None => false,
            Some(Suspension::Surrendered { version }) => {
                absent
                    || matches!(n.note.as_deref(), Some(Note::Surrendered { agent, version: v })
                        if agent == me && v == version)
            }
            Some(Suspension::Under { applied_at, .. }) => {
                absent || applied_at.is_some_and(|at| n.version >= at)
            }
        };
        let was = if lifted {
            self.suspended.remove(&key)
        } else {
            None
        };
        // A notice that finds the entry as it was (a waiter told of a change ahead of it) and
        // answers nothing changes no request's held state: only the queue is news.
        let entry_news = changed || was.is_some() || copy.entry != Some(n.state);
        copy.entry = Some(n.state);
        copy.entry_version = n.version;
        let gone_at = if !self.withdrawn.is_empty() && self.withdrawn.contains(&key) {
            Some(withdrawn::UNANSWERED)
        } else {
            absent.then_some(n.version)
        };
        // A notice that the entry is gone outdates only this agent's own place in older views
        // (`withdrawn.rs`); any other notice without a queue says nobody waits behind it.
        if !absent {
            copy.view_min = copy.view_min.max(n.version);
        }
        let mut restrip = false;
        // No view stored and none sent: nothing to keep or outdate (most notices of an
        // uncontended lock), without a search and a key clone.
        let no_view = n.queue.is_none() && self.views.is_empty();
        match (!no_view).then(|| self.views.entry(key.clone())) {
            None => {}
            Some(Entry::Occupied(stored)) => {
                let before = &stored.get().view;
                let edited = stored.get().raw.is_some();
                let replaces = |q: &&Arc<LockView>| {
                    q.version > before.version || (q.version == before.version && edited)
                };
                let newer = n.queue.as_ref().filter(replaces);
                if let Some(q) = newer {
                    let shared = before.granted != q.granted
                        && is_pending_in(before, me)
                        && is_pending_in(q, me);
                    let (q, raw) = withdrawn::seen(q.clone(), me, gone_at);
                    let source = if shared && raw.is_none() {
                        Source::Shared
                    } else {
                        Source::Unknown
                    };
                    Self::keep_view(copy, Entry::Occupied(stored), q, source, raw);
                } else if before.version < n.version && !absent {
                    // Outdated: the agent's own place in the queue has changed since.
                    stored.remove();
                } else {
                    // Whether the agent is gone from the copy may have changed.
                    restrip = absent || edited;
                }
            }
            Some(vacant) => {
                if let Some(q) = &n.queue {
                    let (q, raw) = withdrawn::seen(q.clone(), me, gone_at);
                    Self::keep_view(copy, vacant, q, Source::Unknown, raw);
                }
            }
        }
        if restrip {
            self.restrip(me, &key);
        }
        // The answer to a surrender tells whether it was applied: if it was, the server
        // re-queued the descendants in the same operation and says so in their own notices of
        // it, which follow; if not, they were not touched and count again.
        if let Some(Suspension::Surrendered { version }) = was {
            self.surrenders.remove(&key);
            let applied = matches!(n.note.as_deref(), Some(Note::Surrendered { agent, version: v })
                if agent == me && *v == version);
            if applied {
                self.applied_under(&key.0, &key.1, n.version);
            } else {
                self.ignored_surrenders += 1;
                self.lift_under(&key.0, &key.1, version);
            }
        }
        if !self.excused.is_empty() {
            self.trim_excused();
        }
        if entry_news { News::Entry } else { News::Queue }
    }

    /// The copy of `key`, created if need be.
    fn copy_mut<'a>(
        copies: &'a mut BTreeMap<(LockId, NodeId), Copy>,
        key: &(LockId, NodeId),
    ) -> &'a mut Copy {
        copies.entry(key.clone()).or_default()
    }

    /// Stores `view` (as received: `raw`, if it is edited) in `slot` if it is not outdated and
    /// has waiters (otherwise only raises `view_min`). The caller checked that it is newer than
    /// the stored one.
    fn keep_view(
        copy: &mut Copy,
        slot: Entry<'_, (LockId, NodeId), Box<StoredView>>,
        view: Arc<LockView>,
        source: Source,
        raw: Option<Arc<LockView>>,
    ) -> bool {
        if view.version < copy.view_min {
            return false;
        }
        if raw.as_ref().unwrap_or(&view).has_waiters() {
            let stored = StoredView {
                view,
                source,
                sent: SmallVec::new(),
                raw,
            };
            match slot {
                Entry::Occupied(mut o) => {
                    **o.get_mut() = stored;
                }
                Entry::Vacant(v) => {
                    v.insert(Box::new(stored));
                }
            }
        } else {
            copy.view_min = copy.view_min.max(view.version);
            if let Entry::Occupied(o) = slot {
                o.remove();
            }
        }
        true
    }

    /// Takes in a view, addressed to `me`: the queue part of a notice or a forward from another
    /// agent. Returns whether it was news.
    pub fn on_view(
        &mut self,
        me: &AgentId,
        lock: &LockId,
        node: &NodeId,
        view: Arc<LockView>,
    ) -> bool {
        self.take_view(me, lock, node, view, Source::Unknown, true)
    }

    fn take_view(
        &mut self,
        me: &AgentId,
        lock: &LockId,
        node: &NodeId,
        view: Arc<LockView>,
        source: Source,
        asked: bool,
    ) -> bool {
        let key = (lock.clone(), node.clone());
        let (view, raw) = withdrawn::seen(view, me, self.gone_at_if(&key, asked));
        let source = if raw.is_some() {
            Source::Unknown
        } else {
            source
        };
        let copy = Self::copy_mut(&mut self.copies, &key);
        let slot = self.views.entry(key);
        if let Entry::Occupied(o) = &slot {
            let stored = o.get();
            let older = view.version < stored.view.version;
            // The same version replaces only one this agent took its own entries out of.
            let edited = raw.is_some() || stored.raw.is_none();
            if older || (view.version == stored.view.version && edited) {
                return false;
            }
        }
        let kept = Self::keep_view(copy, slot, view, source, raw);
        if !self.excused.is_empty() {
            self.trim_excused();
        }
        kept
    }

    /// Records that this agent surrendered `(lock, node)` at `version`: suspends that entry and
    /// the entries on the lock's descendants on that node, and forgets the view (it will change).
    /// A descendant's entry already gone is suspended only if the agent asks for that copy
    /// (`asked`: a grant sent before the server applies the surrender may be on its way):
    /// otherwise there is nothing to suspend, and a suspension would keep the copy from being
    /// forgotten (`withdrawn.rs`) for good when the surrender is applied or ignored.
    pub fn surrendered(
        &mut self,
        lock: &LockId,
        node: &NodeId,
        version: u64,
        asked: impl Fn(&LockId, &NodeId) -> bool,
    ) {
        let key = (lock.clone(), node.clone());
        let copy = self.copies.entry(key.clone()).or_default();
        copy.view_min = copy.view_min.max(version + 1);
        let floor = match self.suspended.get(&key) {
            Some(Suspension::Surrendered { version: v }) => (*v).max(version),
            _ => version,
        };
        self.suspended
            .insert(key.clone(), Suspension::Surrendered { version: floor });
        self.views.remove(&key);
        self.surrenders.insert(key.clone());
        let under: Vec<(LockId, NodeId)> = Self::under(&self.copies, key)
            .filter(|((l, n), c)| {
                n == node
                    && match c.entry {
                        None => false,
                        Some(EntryState::Absent) => asked(l, n),
                        Some(_) => true,
                    }
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in under {
            self.suspended
                .entry(k)
                .or_insert_with(|| Suspension::Under {
                    lock: lock.clone(),
                    version,
                    applied_at: None,
                });
        }
    }

    /// The server did not carry out this agent's surrender of `key` at `version`: nothing of its
    /// moved, so the entries it suspended count again, and the queue the refusal shows (at a
    /// version the surrender had put out of reach) is the copy's view. Returns true.
    fn surrender_refused(
        &mut self,
        me: &AgentId,
        key: &(LockId, NodeId),
        version: u64,
        queue: Option<Arc<LockView>>,
    ) -> bool {
        self.suspended.remove(key);
        self.surrenders.remove(key);
        self.lift_under(&key.0, &key.1, version);
        let copy = Self::copy_mut(&mut self.copies, key);
        copy.view_min = copy.view_min.min(version);
        if let Some(q) = queue {
            self.take_view(me, &key.0, &key.1, q, Source::Unknown, true);
        }
        true
    }

    /// The copies of the proper descendants of `key.0` (on any node; descendants of a lock
    /// follow it in lock id order).
    fn under(
        copies: &BTreeMap<(LockId, NodeId), Copy>,
        key: (LockId, NodeId),
    ) -> impl Iterator<Item = (&(LockId, NodeId), &Copy)> {
        let depth = key.0.depth();
        let lock = key.0.clone();
        copies
            .range((Bound::Excluded(key), Bound::Unbounded))
            .take_while(move |((l, _), _)| *l == lock || lock.is_ancestor_of(l))
            .filter(move |((l, _), _)| l.depth() > depth)
    }

    fn lift_under(&mut self, lock: &LockId, node: &NodeId, version: u64) {
        self.suspended.retain(|(_, n), s| {
            !(n == node
                && matches!(s, Suspension::Under { lock: l, version: v, .. }
                    if l == lock && *v == version))
        });
    }

    /// The surrender of `lock` on `node` was applied at version `at`: each entry it suspended
    /// is known again from its first notice at or after `at`.
    fn applied_under(&mut self, lock: &LockId, node: &NodeId, at: u64) {
        for ((_, n), s) in self.suspended.iter_mut() {
            if let Suspension::Under {
                lock: l,
                applied_at,
                ..
            } = s
                && n == node
                && l == lock
            {
                *applied_at = Some(at);
            }
        }
    }

    /// Whether a surrender of this agent is still waiting for the server's answer.
    pub fn surrender_outstanding(&self) -> bool {
        !self.surrenders.is_empty()
    }

    /// The mode the agent holds on `(lock, node)`, if the server said so and nothing since
    /// casts doubt on it.
    pub fn held(&self, lock: &LockId, node: &NodeId) -> Option<Mode> {
        self.held_at(lock.keys(), node)
    }

    /// [`Knowledge::held`] of the lock whose keys are `keys` (an ancestor's are a prefix of its
    /// descendant's: no id is built to ask about it).
    pub fn held_at(&self, keys: &[Key], node: &NodeId) -> Option<Mode> {
        let key = KeyRef(keys, node);
        let c = self.copies.get(key.as_dyn())?;
        if !self.suspended.is_empty() && self.suspended.contains_key(key.as_dyn()) {
            return None;
        }
        if !self.unlocking.is_empty() && self.unlocking.contains_key(key.as_dyn()) {
            return None;
        }
        c.entry.and_then(EntryState::held)
    }

    /// Whether the agent's newest notice of `(lock, node)` says it waits there, holding
    /// nothing of the lock (a plain wait, not a conversion).
    pub fn waits_plainly(&self, lock: &LockId, node: &NodeId) -> bool {
        self.copies
            .get(KeyRef::of(lock, node).as_dyn())
            .is_some_and(|c| matches!(c.entry, Some(EntryState::Waiting(_))))
    }

    /// The version of the newest notice of `(lock, node)`: the fencing version of a grant.
    pub fn entry_version(&self, lock: &LockId, node: &NodeId) -> Option<u64> {
        self.copies
            .get(KeyRef::of(lock, node).as_dyn())
            .filter(|c| c.entry.is_some())
            .map(|c| c.entry_version)
    }

    /// The stored view of `(lock, node)`, if any.
    pub fn view(&self, lock: &LockId, node: &NodeId) -> Option<&Arc<LockView>> {
        self.views
            .get(KeyRef::of(lock, node).as_dyn())
            .map(|s| &s.view)
    }

    /// Takes in a view forwarded by agent `from` to `me`, which `asked` for that copy or not (a
    /// request of its own on the lock or a descendant names the node: otherwise the view counts
    /// without `me`'s own entries, `withdrawn.rs`). Returns whether it was news.
    pub fn on_forward(
        &mut self,
        me: &AgentId,
        lock: &LockId,
        node: &NodeId,
        from: &AgentId,
        view: Arc<LockView>,
        asked: bool,
    ) -> bool {
        let version = view.version;
        if self.floors.get(node).is_some_and(|floor| version <= *floor) {
            return false;
        }
        // A waiter that passes on a view it waits in needs that copy (again): it is excused no
        // longer, and the graph changes even if the view is not news.
        let mut unexcused = false;
        if is_pending_in(&view, from)
            && let Some((_, who)) = self.excused.get_mut(KeyRef::of(lock, node).as_dyn())
            && who.contains(from)
        {
            who.retain(|a| a != from);
            unexcused = true;
        }
        let source = Source::ForwardedBy(from.clone());
        let news = self.take_view(me, lock, node, view, source, asked) || unexcused;
        if let Some(stored) = self.views.get_mut(KeyRef::of(lock, node).as_dyn())
            && stored.view.version == version
            && !stored.sent.contains(from)
        {
            stored.sent.push(from.clone());
        }
        news
    }

    /// Forgets everything learnt from `node` (its server went down; a restarted server may
    /// count versions anew, and its own notices are taken whatever their version).
    ///
    /// Other agents' forwards of that server's queues from before may still arrive, after the
    /// node is back: they are refused up to the newest version the agent had seen of the node.
    /// (The table counts on from above its versions of before when it restarts, as a node that
    /// was only cut off does; a forward from before, taken for the view "before" the first
    /// notice of the new server, would make the agent think the server had told every waiter
    /// of that notice, and a wait could go unforwarded.)
    pub fn forget_node(&mut self, node: &NodeId) {
        let seen = self
            .copies
            .iter()
            .filter(|((_, n), _)| n == node)
            .map(|(_, c)| c.entry_version.max(c.view_min))
            .chain(
                self.views
                    .iter()
                    .filter(|((_, n), _)| n == node)
                    .map(|(_, s)| s.raw.as_ref().unwrap_or(&s.view).version),
            )
            .max();
        if let Some(seen) = seen {
            let floor = self.floors.entry(node.clone()).or_default();
            *floor = (*floor).max(seen);
        }
        self.copies.retain(|(_, n), _| n != node);
        self.views.retain(|(_, n), _| n != node);
        self.surrenders.retain(|(_, n)| n != node);
        self.suspended.retain(|(_, n), _| n != node);
        self.excused.retain(|(_, n), _| n != node);
        self.unlocking.retain(|(_, n), _| n != node);
        self.lowering.retain(|(_, n), _| n != node);
        self.capped.retain(|(_, n), _| n != node);
        self.withdrawn.retain(|(_, n)| n != node);
    }

    /// Every stored view, in `(lock, node)` order.
    pub fn views(&self) -> impl Iterator<Item = (&LockId, &NodeId, &Arc<LockView>)> {
        self.views.iter().map(|((l, n), s)| (l, n, &s.view))
    }

    /// Whether `me` converts or waits in some stored view: it takes part in the forwarding
    /// even while its requests are all met (module documentation).
    pub fn pending_somewhere(&self, me: &AgentId) -> bool {
        self.views.values().any(|s| is_pending_in(&s.view, me))
    }

    /// Whether the copy `(lock, node)` is suspended by a surrender of this agent.
    pub fn is_suspended(&self, lock: &LockId, node: &NodeId) -> bool {
        !self.suspended.is_empty() && self.suspended.contains_key(KeyRef::of(lock, node).as_dyn())
    }

    /// How many views are stored.
    pub fn view_count(&self) -> usize {
        self.views.len()
    }

    /// How many copies the agent knows of: what it holds, waits for, or left and still has
    /// something outstanding or kept of (`withdrawn.rs`).
    pub fn copy_count(&self) -> usize {
        self.copies.len()
    }

    /// Records a deadlock (once). A surrender touches the surrendered lock and its descendants,
    /// and every touched lock's notice carries the note: an entry for a descendant of a lock
    /// already recorded with the same victim and node is the same deadlock, and an ancestor
    /// replaces its recorded descendants. Returns whether the list changed.
    pub fn record_deadlock(&mut self, d: Deadlock) -> bool {
        let same = |x: &Deadlock| x.victim == d.victim && x.node == d.node;
        if self
            .deadlocks
            .iter()
            .any(|x| same(x) && (x.lock == d.lock || x.lock.is_ancestor_of(&d.lock)))
        {
            return false;
        }
        if let Some(pos) = self
            .deadlocks
            .iter()
            .position(|x| same(x) && d.lock.is_ancestor_of(&x.lock))
        {
            self.deadlocks[pos] = d.clone();
            self.deadlocks.retain(|x| {
                !(x.victim == d.victim && x.node == d.node && d.lock.is_ancestor_of(&x.lock))
            });
        } else {
            self.deadlocks.push(d);
        }
        true
    }

    /// Every deadlock recorded, oldest first.
    pub fn deadlocks(&self) -> &[Deadlock] {
        &self.deadlocks
    }
}

mod answers;
mod excuses;
pub(crate) mod key;
mod sent;
#[cfg(test)]
mod tests;
mod withdrawn;
