//! A replicated dictionary on the leader callbacks (the test vehicle, like gdict): writes are
//! leader calls that the leader applies and broadcasts; reads are local calls. A member that
//! accepts a new leader takes the leader's map, keeps the entries the leader lacks and casts
//! them to the leader, which adds and broadcasts them: after a netsplit heals, both islands'
//! stores survive (a cast lost to another split is sent again at the next election, which every
//! heal causes).

use locks_leader::{CallReturn, Callbacks, Caller, Ctx, Elected, Handled, MemberId, Term};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub type Map = BTreeMap<String, i64>;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Req {
    Store(String, i64),
    Find(String),
    Dump,
    /// How many times `stepped_down` ran on this member (a local call).
    SteppedDown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rep {
    Ok,
    Value(Option<i64>),
    Map(Map),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cast {
    Merge(Map),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bc {
    Sync(Map),
    Store(String, i64),
    Merged(Map),
}

/// The dictionary and a record of the callbacks it saw.
#[derive(Debug, Default)]
pub struct Dict {
    pub map: Map,
    /// The terms this member was elected with, in order.
    pub elected: Vec<Term>,
    /// How many times `elected` ran for a new member.
    pub announced: usize,
    pub surrendered: usize,
    /// How many times `stepped_down` ran.
    pub stepped_down: usize,
    pub downs: Vec<MemberId>,
}

impl Callbacks for Dict {
    type Call = Req;
    type Reply = Rep;
    type Cast = Cast;
    type Broadcast = Bc;
    type Info = ();

    fn elected(&mut self, new: Option<&MemberId>, ctx: &mut Ctx<'_, Self>) -> Elected<Bc> {
        match new {
            None => {
                if let Some(t) = ctx.term() {
                    self.elected.push(t.clone());
                }
                Elected::Broadcast(Bc::Sync(self.map.clone()))
            }
            Some(_) => {
                self.announced += 1;
                Elected::Reply(Bc::Sync(self.map.clone()))
            }
        }
    }

    fn stepped_down(&mut self, _ctx: &mut Ctx<'_, Self>) -> Handled<Bc> {
        self.stepped_down += 1;
        Handled::Ok
    }

    fn surrendered(&mut self, msg: Bc, ctx: &mut Ctx<'_, Self>) -> Handled<Bc> {
        self.surrendered += 1;
        if let Bc::Sync(map) = msg {
            let extra: Map = self
                .map
                .iter()
                .filter(|(k, _)| !map.contains_key(*k))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            self.map = map;
            self.map.extend(extra.clone());
            if !extra.is_empty() {
                ctx.leader_cast(Cast::Merge(extra));
            }
        }
        Handled::Ok
    }

    fn from_leader(&mut self, msg: Bc, _ctx: &mut Ctx<'_, Self>) -> Handled<Bc> {
        match msg {
            Bc::Sync(map) => self.map = map,
            Bc::Store(k, v) => {
                self.map.insert(k, v);
            }
            Bc::Merged(m) => self.map.extend(m),
        }
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        req: Req,
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<Rep, Bc> {
        match req {
            Req::Store(k, v) => {
                self.map.insert(k.clone(), v);
                CallReturn::ReplyBroadcast(Rep::Ok, Bc::Store(k, v))
            }
            Req::Find(k) => CallReturn::Reply(Rep::Value(self.map.get(&k).copied())),
            Req::Dump => CallReturn::Reply(Rep::Map(self.map.clone())),
            Req::SteppedDown => CallReturn::Reply(Rep::Value(Some(self.stepped_down as i64))),
        }
    }

    fn handle_leader_cast(&mut self, msg: Cast, _ctx: &mut Ctx<'_, Self>) -> Handled<Bc> {
        let Cast::Merge(m) = msg;
        let added: Map = m
            .into_iter()
            .filter(|(k, _)| !self.map.contains_key(k))
            .collect();
        if added.is_empty() {
            return Handled::Ok;
        }
        self.map.extend(added.clone());
        Handled::Broadcast(Bc::Merged(added))
    }

    fn handle_down(&mut self, member: &MemberId, _ctx: &mut Ctx<'_, Self>) -> Handled<Bc> {
        self.downs.push(member.clone());
        Handled::Ok
    }

    fn handle_call(
        &mut self,
        req: Req,
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<Rep, Bc> {
        match req {
            Req::Find(k) => CallReturn::Reply(Rep::Value(self.map.get(&k).copied())),
            Req::Dump => CallReturn::Reply(Rep::Map(self.map.clone())),
            Req::SteppedDown => CallReturn::Reply(Rep::Value(Some(self.stepped_down as i64))),
            Req::Store(..) => CallReturn::Reply(Rep::Ok),
        }
    }
}
