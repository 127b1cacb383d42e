//! `gdict`: a replicated dictionary on `locks-leader` (after the Erlang original's
//! `examples/gdict`).
//!
//! Every member of a dictionary group holds a full replica. Writes ([`Gdict::store`],
//! [`Gdict::erase`]) are leader calls: the leader applies them, broadcasts them to its members,
//! then replies, so a member that forwarded a write has applied it before its caller sees the
//! answer. In majority mode the reply waits until replicas on a majority of the group's nodes
//! applied the write (`CallReturn::ReplyBroadcast`), so a confirmed store survives the crash of
//! any one node, the leader's included. Reads ([`Gdict::fetch`], [`Gdict::keys`],
//! [`Gdict::to_list`]) are local calls on the member's own replica.
//!
//! Every entry carries the [`Stamp`] of the write that made it (the leader's term epoch, then
//! the leader's count of writes), and an erase leaves the key as erased rather than removing
//! it. Wherever two copies of a key meet, the newer stamp wins.
//!
//! Elections: a new leader sends its whole map with its announcement (`elected` returns
//! `Broadcast(Sync(map))`, or `Reply(Sync(map))` for one new member). A member that accepts a
//! leader takes the leader's newer entries, and casts to the leader the entries it has newer
//! (or that the leader lacks); the leader takes those and broadcasts them. That is how a write
//! that reached a majority, but not the new leader, survives, and why an older copy of a key
//! (a replica that was cut off while the key was overwritten or erased) cannot bring back what
//! it had.
//!
//! Partitions: [`Gdict::new`] starts the member in the library's default, majority mode: only
//! the side of a netsplit with a majority of the group's nodes has a leader and takes writes
//! (the other side's writes fail with `NoMajority`), so no confirmed write is lost at the heal.
//! [`Gdict::with_options`] with `GroupOptions::islands()` gives the original's behaviour: every
//! island takes writes, and when the netsplit heals the writes of both islands are merged key
//! by key; on a key written on both sides the write of the leader with the larger term epoch
//! wins, so a confirmed write of the other island is lost (the original merges whole maps,
//! with the same caveat).

use locks_leader::{
    CallError, CallReturn, Callbacks, Caller, Ctx, Elected, GroupOptions, Handled, Member, Payload,
    Role, start_with,
};
use locks_server::Node;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The timeout of a write (Erlang's gdict uses 2 s).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// A request to a dictionary member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Req<V> {
    /// Set `key` to the value (leader call).
    Store(String, V),
    /// Remove `key` (leader call).
    Erase(String),
    /// The value of `key` (local).
    Fetch(String),
    /// Every key (local).
    Keys,
    /// Every entry (local).
    ToList,
}

/// An answer from a dictionary member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rep<V> {
    /// Done.
    Ok,
    /// A value, or none.
    Value(Option<V>),
    /// Keys, in order.
    Keys(Vec<String>),
    /// Entries, in key order.
    List(Vec<(String, V)>),
}

/// When a write was made: the epoch of the leader's term, then the leader's count of writes.
/// In majority mode every new term's epoch exceeds every term a majority accepted, so a
/// later confirmed write always has the larger stamp.
pub type Stamp = (u64, u64);

/// A replica's entry for a key: the value (`None`: erased) and the stamp of the write that
/// made it. Erased keys are kept as such, so that an older copy of the key cannot bring it
/// back; they are never collected (this example keeps every key it ever saw).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry<V> {
    /// The write that made it.
    pub stamp: Stamp,
    /// The value; `None` once erased.
    pub value: Option<V>,
}

/// What members cast to their leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cast<V> {
    /// Entries a member has that are newer than its new leader's (or that it lacks).
    Merge(BTreeMap<String, Entry<V>>),
}

/// What the leader sends its members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Update<V> {
    /// The leader's whole map (with an announcement).
    Sync(BTreeMap<String, Entry<V>>),
    /// A store or an erase.
    Write(String, Entry<V>),
    /// Entries merged in from members.
    Merged(BTreeMap<String, Entry<V>>),
}

/// The callbacks: one replica.
#[derive(Debug)]
pub struct Dict<V> {
    map: BTreeMap<String, Entry<V>>,
    /// The writes this member made as leader (the second part of its stamps).
    writes: u64,
}

impl<V> Default for Dict<V> {
    fn default() -> Self {
        Dict {
            map: BTreeMap::new(),
            writes: 0,
        }
    }
}

/// Takes into `mine` every entry of `theirs` with a newer stamp (or a key `mine` lacks);
/// returns the entries taken.
fn merge_newer<V: Clone>(
    mine: &mut BTreeMap<String, Entry<V>>,
    theirs: BTreeMap<String, Entry<V>>,
) -> BTreeMap<String, Entry<V>> {
    let mut taken = BTreeMap::new();
    for (k, e) in theirs {
        if mine.get(&k).is_none_or(|m| m.stamp < e.stamp) {
            mine.insert(k.clone(), e.clone());
            taken.insert(k, e);
        }
    }
    taken
}

/// The entries of `mine` newer than `theirs` has them (or that it lacks).
fn newer_than<V: Clone>(
    mine: &BTreeMap<String, Entry<V>>,
    theirs: &BTreeMap<String, Entry<V>>,
) -> BTreeMap<String, Entry<V>> {
    mine.iter()
        .filter(|(k, e)| theirs.get(*k).is_none_or(|t| t.stamp < e.stamp))
        .map(|(k, e)| (k.clone(), e.clone()))
        .collect()
}

impl<V: Payload> Dict<V> {
    /// Applies what the leader sent; for its whole map, also casts back the entries this
    /// replica has newer (a write that reached a majority but not the new leader).
    fn apply(&mut self, update: Update<V>, ctx: &mut Ctx<'_, Self>) {
        match update {
            Update::Sync(leaders) => {
                let extra = newer_than(&self.map, &leaders);
                merge_newer(&mut self.map, leaders);
                if !extra.is_empty() {
                    ctx.leader_cast(Cast::Merge(extra));
                }
            }
            Update::Write(k, e) => {
                merge_newer(&mut self.map, BTreeMap::from([(k, e)]));
            }
            Update::Merged(m) => {
                merge_newer(&mut self.map, m);
            }
        }
    }

    /// The values, erased keys left out.
    fn values(&self) -> impl Iterator<Item = (&String, &V)> {
        self.map
            .iter()
            .filter_map(|(k, e)| e.value.as_ref().map(|v| (k, v)))
    }

    fn read(&self, req: Req<V>) -> Rep<V> {
        match req {
            Req::Fetch(k) => Rep::Value(self.map.get(&k).and_then(|e| e.value.clone())),
            Req::Keys => Rep::Keys(self.values().map(|(k, _)| k.clone()).collect()),
            Req::ToList => Rep::List(self.values().map(|(k, v)| (k.clone(), v.clone())).collect()),
            Req::Store(..) | Req::Erase(_) => Rep::Ok,
        }
    }
}

impl<V: Payload> Callbacks for Dict<V> {
    type Call = Req<V>;
    type Reply = Rep<V>;
    type Cast = Cast<V>;
    type Broadcast = Update<V>;
    type Info = ();

    fn elected(
        &mut self,
        new: Option<&locks_leader::MemberId>,
        _ctx: &mut Ctx<'_, Self>,
    ) -> Elected<Update<V>> {
        let sync = Update::Sync(self.map.clone());
        match new {
            None => Elected::Broadcast(sync),
            Some(_) => Elected::Reply(sync),
        }
    }

    fn surrendered(&mut self, msg: Update<V>, ctx: &mut Ctx<'_, Self>) -> Handled<Update<V>> {
        self.apply(msg, ctx);
        Handled::Ok
    }

    fn from_leader(&mut self, msg: Update<V>, ctx: &mut Ctx<'_, Self>) -> Handled<Update<V>> {
        self.apply(msg, ctx);
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        req: Req<V>,
        _from: Caller,
        ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<Rep<V>, Update<V>> {
        let (key, value) = match req {
            Req::Store(k, v) => (k, Some(v)),
            Req::Erase(k) => (k, None),
            read => return CallReturn::Reply(self.read(read)),
        };
        self.writes += 1;
        let epoch = ctx.term().map_or(0, |t| t.epoch);
        let entry = Entry {
            stamp: (epoch, self.writes),
            value,
        };
        self.map.insert(key.clone(), entry.clone());
        CallReturn::ReplyBroadcast(Rep::Ok, Update::Write(key, entry))
    }

    fn handle_leader_cast(&mut self, msg: Cast<V>, _ctx: &mut Ctx<'_, Self>) -> Handled<Update<V>> {
        let Cast::Merge(entries) = msg;
        let taken = merge_newer(&mut self.map, entries);
        if taken.is_empty() {
            return Handled::Ok;
        }
        Handled::Broadcast(Update::Merged(taken))
    }

    fn handle_call(
        &mut self,
        req: Req<V>,
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<Rep<V>, Update<V>> {
        CallReturn::Reply(self.read(req))
    }
}

/// Why a dictionary operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GdictError {
    /// The call to the leader or the local replica failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The member could not start.
    #[error(transparent)]
    Start(#[from] locks_leader::Error),
    /// The member answered something unexpected (a bug).
    #[error("unexpected answer")]
    Unexpected,
}

/// A handle on one replica of the dictionary `name`.
#[derive(Clone, Debug)]
pub struct Gdict<V: Payload> {
    member: Member<Dict<V>>,
}

impl<V: Payload> Gdict<V> {
    /// Starts a replica of the dictionary `name` on `node`, as a candidate for its leader, in
    /// majority mode (see the module documentation).
    pub async fn new(node: &Node, name: &str) -> Result<Gdict<V>, GdictError> {
        Self::with_options(node, name, GroupOptions::default()).await
    }

    /// Starts a replica as [`Gdict::new`] does, with the group's `options` (majority or islands
    /// mode, the configured nodes). Every replica of a dictionary must use the same mode.
    pub async fn with_options(
        node: &Node,
        name: &str,
        options: GroupOptions,
    ) -> Result<Gdict<V>, GdictError> {
        let member = start_with(node, name, Dict::default(), Role::Candidate, options).await?;
        Ok(Gdict { member })
    }

    /// The member behind this replica (its leader, term, candidates...).
    pub fn member(&self) -> &Member<Dict<V>> {
        &self.member
    }

    /// Sets `key` to `value` through the leader; once it returns, this replica has it.
    pub async fn store(&self, key: impl Into<String>, value: V) -> Result<(), GdictError> {
        self.write(Req::Store(key.into(), value)).await
    }

    /// Removes `key` through the leader; once it returns, this replica lacks it.
    pub async fn erase(&self, key: impl Into<String>) -> Result<(), GdictError> {
        self.write(Req::Erase(key.into())).await
    }

    async fn write(&self, req: Req<V>) -> Result<(), GdictError> {
        match self.member.leader_call_timeout(req, WRITE_TIMEOUT).await? {
            Rep::Ok => Ok(()),
            _ => Err(GdictError::Unexpected),
        }
    }

    /// The value of `key` in this replica.
    pub async fn fetch(&self, key: impl Into<String>) -> Result<Option<V>, GdictError> {
        match self.member.call(Req::Fetch(key.into())).await? {
            Rep::Value(v) => Ok(v),
            _ => Err(GdictError::Unexpected),
        }
    }

    /// The keys of this replica, in order.
    pub async fn keys(&self) -> Result<Vec<String>, GdictError> {
        match self.member.call(Req::Keys).await? {
            Rep::Keys(k) => Ok(k),
            _ => Err(GdictError::Unexpected),
        }
    }

    /// The entries of this replica, in key order.
    pub async fn to_list(&self) -> Result<Vec<(String, V)>, GdictError> {
        match self.member.call(Req::ToList).await? {
            Rep::List(l) => Ok(l),
            _ => Err(GdictError::Unexpected),
        }
    }

    /// Stops this replica (the others go on).
    pub async fn stop(&self) {
        self.member.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, merge_newer, newer_than};
    use std::collections::BTreeMap;

    fn e(epoch: u64, n: u64, value: Option<i64>) -> Entry<i64> {
        Entry {
            stamp: (epoch, n),
            value,
        }
    }

    #[test]
    fn the_newer_stamp_wins_and_an_erase_is_a_write_like_any_other() {
        let mut mine = BTreeMap::from([
            ("old".to_string(), e(1, 5, Some(1))),
            ("erased".to_string(), e(2, 1, None)),
            ("same".to_string(), e(2, 2, Some(7))),
            ("only-mine".to_string(), e(1, 1, Some(3))),
        ]);
        let theirs = BTreeMap::from([
            ("old".to_string(), e(2, 1, Some(2))),
            ("erased".to_string(), e(1, 9, Some(9))),
            ("same".to_string(), e(2, 2, Some(8))),
            ("only-theirs".to_string(), e(1, 2, Some(4))),
        ]);
        let back = newer_than(&mine, &theirs);
        assert_eq!(
            back.keys().collect::<Vec<_>>(),
            ["erased", "only-mine"],
            "what the leader is sent back"
        );
        let taken = merge_newer(&mut mine, theirs);
        assert_eq!(taken.keys().collect::<Vec<_>>(), ["old", "only-theirs"]);
        assert_eq!(mine["old"], e(2, 1, Some(2)));
        assert_eq!(
            mine["erased"],
            e(2, 1, None),
            "an older copy does not bring it back"
        );
        assert_eq!(mine["same"], e(2, 2, Some(7)), "equal stamps: kept");
    }
}
