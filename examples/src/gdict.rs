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
//! Elections: a new leader sends its whole map with its announcement (`elected` returns
//! `Broadcast(Sync(map))`, or `Reply(Sync(map))` for one new member). A member that accepts a
//! leader takes the leader's map, keeps the entries the leader lacks, and casts them to the
//! leader, which adds them and broadcasts them: that is how a store that reached a majority,
//! but not the new leader, survives. The merge knows keys, not the order of writes: a key the
//! new leader has keeps the new leader's value, and an erase the new leader missed is undone.
//! Store each key once (or version the values) where that matters.
//!
//! Partitions: [`Gdict::new`] starts the member in the library's default, majority mode: only
//! the side of a netsplit with a majority of the group's nodes has a leader and takes writes
//! (the other side's writes fail with `NoMajority`), so no confirmed write is lost at the heal.
//! [`Gdict::with_options`] with `GroupOptions::islands()` gives the original's behaviour: every
//! island takes writes, and when the netsplit heals the stores of both islands survive, except
//! that on a key written on both sides the winner's value wins (a confirmed write lost), and an
//! erase made in one island can be undone by the other island's copy (the original merges whole
//! maps with the same caveat).

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

/// What members cast to their leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cast<V> {
    /// Entries a member has that its new leader's map lacks.
    Merge(BTreeMap<String, V>),
}

/// What the leader sends its members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Update<V> {
    /// The leader's whole map (with an announcement).
    Sync(BTreeMap<String, V>),
    /// A store.
    Store(String, V),
    /// An erase.
    Erase(String),
    /// Entries merged in from members.
    Merged(BTreeMap<String, V>),
}

/// The callbacks: one replica.
#[derive(Debug)]
pub struct Dict<V> {
    map: BTreeMap<String, V>,
}

impl<V> Default for Dict<V> {
    fn default() -> Self {
        Dict {
            map: BTreeMap::new(),
        }
    }
}

impl<V: Payload> Dict<V> {
    fn apply(&mut self, update: Update<V>) {
        match update {
            Update::Sync(map) => self.map = map,
            Update::Store(k, v) => {
                self.map.insert(k, v);
            }
            Update::Erase(k) => {
                self.map.remove(&k);
            }
            Update::Merged(m) => self.map.extend(m),
        }
    }

    fn read(&self, req: Req<V>) -> Rep<V> {
        match req {
            Req::Fetch(k) => Rep::Value(self.map.get(&k).cloned()),
            Req::Keys => Rep::Keys(self.map.keys().cloned().collect()),
            Req::ToList => Rep::List(
                self.map
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
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
        if let Update::Sync(leaders) = msg {
            let extra: BTreeMap<String, V> = self
                .map
                .iter()
                .filter(|(k, _)| !leaders.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            self.map = leaders;
            self.map.extend(extra.clone());
            if !extra.is_empty() {
                ctx.leader_cast(Cast::Merge(extra));
            }
        } else {
            self.apply(msg);
        }
        Handled::Ok
    }

    fn from_leader(&mut self, msg: Update<V>, _ctx: &mut Ctx<'_, Self>) -> Handled<Update<V>> {
        self.apply(msg);
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        req: Req<V>,
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<Rep<V>, Update<V>> {
        let update = match req {
            Req::Store(k, v) => Update::Store(k, v),
            Req::Erase(k) => Update::Erase(k),
            read => return CallReturn::Reply(self.read(read)),
        };
        self.apply(update.clone());
        CallReturn::ReplyBroadcast(Rep::Ok, update)
    }

    fn handle_leader_cast(&mut self, msg: Cast<V>, _ctx: &mut Ctx<'_, Self>) -> Handled<Update<V>> {
        let Cast::Merge(entries) = msg;
        let added: BTreeMap<String, V> = entries
            .into_iter()
            .filter(|(k, _)| !self.map.contains_key(k))
            .collect();
        if added.is_empty() {
            return Handled::Ok;
        }
        self.map.extend(added.clone());
        Handled::Broadcast(Update::Merged(added))
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
