//! The callbacks' returns on one node: `init` refusing to start, a deferred reply with
//! `Ctx::reply`, `ReplyBroadcast` reaching followers first, `broadcast` from the handle (leader
//! only), `handle_info`, and `Stop` stopping the member with its callers answered. Every wait is
//! bounded.

mod common;

use common::bounded;
use locks_leader::{
    CallError, CallReturn, Callbacks, Caller, Ctx, Elected, Error, Handled, MemberId, Role, start,
};
use locks_server::{Node, NodeConfig};
use std::sync::{Arc, Mutex};

/// Leader calls: `Park` is answered later, by the next `Release` cast; `Add(n)` adds and
/// broadcasts; `Quit` stops the member. Local calls read the total.
#[derive(Default)]
struct Counter {
    total: i64,
    parked: Vec<Caller>,
    refuse: bool,
    infos: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Req {
    Park,
    Add(i64),
    Total,
    Quit,
}

impl Callbacks for Counter {
    type Call = Req;
    type Reply = i64;
    type Cast = ();
    type Broadcast = i64;
    type Info = String;

    fn init(&mut self, _ctx: &mut Ctx<'_, Self>) -> Result<(), String> {
        if self.refuse {
            Err("refused".into())
        } else {
            Ok(())
        }
    }

    fn elected(&mut self, _new: Option<&MemberId>, _ctx: &mut Ctx<'_, Self>) -> Elected<i64> {
        Elected::Broadcast(self.total)
    }

    fn surrendered(&mut self, total: i64, _ctx: &mut Ctx<'_, Self>) -> Handled<i64> {
        self.total = total;
        Handled::Ok
    }

    fn from_leader(&mut self, total: i64, _ctx: &mut Ctx<'_, Self>) -> Handled<i64> {
        self.total = total;
        Handled::Ok
    }

    fn handle_leader_call(
        &mut self,
        req: Req,
        from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<i64, i64> {
        match req {
            Req::Park => {
                self.parked.push(from);
                CallReturn::NoReply
            }
            Req::Add(n) => {
                self.total += n;
                CallReturn::ReplyBroadcast(self.total, self.total)
            }
            Req::Total => CallReturn::Reply(self.total),
            Req::Quit => CallReturn::Stop {
                reason: "asked to".into(),
                reply: Some(-1),
            },
        }
    }

    fn handle_leader_cast(&mut self, _msg: (), ctx: &mut Ctx<'_, Self>) -> Handled<i64> {
        for caller in self.parked.drain(..) {
            ctx.reply(&caller, 99);
        }
        Handled::Ok
    }

    fn handle_call(
        &mut self,
        _req: Req,
        _from: Caller,
        _ctx: &mut Ctx<'_, Self>,
    ) -> CallReturn<i64, i64> {
        CallReturn::Reply(self.total)
    }

    fn handle_info(&mut self, msg: String, _ctx: &mut Ctx<'_, Self>) -> Handled<i64> {
        self.infos.lock().unwrap().push(msg);
        Handled::Ok
    }
}

#[tokio::test]
async fn init_can_refuse_to_start() {
    let node = Node::start(NodeConfig::new("init")).await.unwrap();
    let refusing = Counter {
        refuse: true,
        ..Counter::default()
    };
    let r = bounded(start(&node, "g", refusing, Role::Candidate)).await;
    assert_eq!(r.err(), Some(Error::Init("refused".into())));
    node.shutdown().await;
}

#[tokio::test]
async fn deferred_replies_broadcasts_infos_and_stop() {
    let node = Node::start(NodeConfig::new("returns")).await.unwrap();
    let leader = bounded(start(&node, "g", Counter::default(), Role::Candidate))
        .await
        .unwrap();
    bounded(leader.wait_for_leader()).await.unwrap();
    let infos = Arc::new(Mutex::new(Vec::new()));
    let follower = bounded(start(
        &node,
        "g",
        Counter {
            infos: infos.clone(),
            ..Counter::default()
        },
        Role::Candidate,
    ))
    .await
    .unwrap();
    bounded(follower.wait_for_leader()).await.unwrap();

    // A parked call is answered when the leader is cast to: the call is made at once, so the
    // cast made after it reaches the leader after it.
    let parked = follower.leader_call(Req::Park);
    assert_eq!(follower.leader_call(Req::Total).await, Ok(0));
    follower.leader_cast(());
    assert_eq!(bounded(parked).await, Ok(99));

    // The broadcast reaches the follower before its caller sees the reply.
    assert_eq!(follower.leader_call(Req::Add(5)).await, Ok(5));
    assert_eq!(follower.call(Req::Total).await, Ok(5));

    // Only the leader may broadcast.
    assert_eq!(follower.broadcast(1).await, Err(CallError::NotLeader));
    assert_eq!(leader.broadcast(42).await, Ok(()));
    follower.info_msg("hello".into());
    bounded(async {
        while follower.call(Req::Total).await != Ok(42) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(*infos.lock().unwrap(), vec!["hello".to_string()]);

    // Stop: the caller gets its reply, the member stops, the follower elects itself.
    assert_eq!(follower.leader_call(Req::Quit).await, Ok(-1));
    let mut rx = follower.changes();
    bounded(rx.wait_for(|t| t.as_ref().is_some_and(|t| &t.leader == follower.id())))
        .await
        .unwrap();
    assert!(matches!(
        leader.call(Req::Total).await,
        Err(CallError::Stopped(_))
    ));
    node.shutdown().await;
}
