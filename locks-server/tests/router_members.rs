//! Routing between members of leader-election groups: a member on another node is reached
//! through the peer's link, a member of this node through its mailbox (in order), and a message
//! for a member that does not run here fails without touching any lock server.

mod common;

use actix::prelude::*;
use common::net::{Captured, id};
use locks_core::MemberId;
use locks_core::proto::{Envelope, Message as WireMessage};
use locks_server::RouteError;
use locks_server::embed::{MemberDelivery, Router};
use std::sync::{Arc, Mutex};

fn member(node: &str, serial: u64) -> MemberId {
    MemberId::new(id(node), 1, serial)
}

/// What a sink got: the sender and the payload of each message, in order.
type Got = Arc<Mutex<Vec<(MemberId, Vec<u8>)>>>;

/// Collects what it is sent; says so once it has `want` messages.
struct Sink {
    got: Got,
    want: usize,
    done: Option<futures::channel::oneshot::Sender<()>>,
}

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<MemberDelivery> for Sink {
    type Result = ();

    fn handle(&mut self, msg: MemberDelivery, _ctx: &mut Self::Context) {
        let mut got = self.got.lock().unwrap();
        got.push((msg.from, msg.payload));
        if got.len() == self.want
            && let Some(done) = self.done.take()
        {
            let _ = done.send(());
        }
    }
}

#[test]
fn a_remote_member_is_reached_through_the_peer_link() {
    let router = Router::new(id("a"));
    let link = Arc::new(Captured::default());
    router.add_remote(id("b"), link.clone());
    router
        .send_member(&member("b", 2), member("a", 1), vec![7, 8])
        .unwrap();
    let sent = link.0.lock().unwrap().clone();
    assert_eq!(
        sent,
        [Envelope::new(WireMessage::Member {
            to: member("b", 2),
            from: member("a", 1),
            payload: vec![7, 8],
        })]
    );
    assert_eq!(
        router.send_member(&member("c", 2), member("a", 1), vec![]),
        Err(RouteError::NotConnected(id("c")))
    );
}

#[test]
fn a_message_for_an_unknown_member_fails_and_asks_no_server_for_anything() {
    let router = Router::new(id("b"));
    let link = Arc::new(Captured::default());
    router.add_remote(id("a"), link.clone());
    let incoming = Envelope::new(WireMessage::Member {
        to: member("b", 9),
        from: member("a", 1),
        payload: vec![1],
    });
    assert_eq!(
        router.deliver_from(&id("a"), incoming),
        Err(RouteError::UnknownMember(member("b", 9)))
    );
    let misrouted = Envelope::new(WireMessage::Member {
        to: member("c", 9),
        from: member("a", 1),
        payload: vec![1],
    });
    assert_eq!(
        router.deliver_incoming(misrouted),
        Err(RouteError::UnknownMember(member("c", 9)))
    );
    assert!(link.0.lock().unwrap().is_empty());
}

#[test]
fn a_local_member_gets_its_messages_in_order_until_unregistered() {
    let got = Arc::new(Mutex::new(Vec::new()));
    let sys = System::new();
    let router = Arc::new(Router::new(id("a")));
    let (r, g) = (router.clone(), got.clone());
    sys.block_on(async move {
        let (done, all_in) = futures::channel::oneshot::channel();
        let addr = Sink {
            got: g,
            want: 4,
            done: Some(done),
        }
        .start();
        r.register_member(member("a", 2), addr.recipient());
        assert!(r.has_member(&member("a", 2)));
        for i in 0..3u8 {
            r.send_member(&member("a", 2), member("b", 1), vec![i])
                .unwrap();
        }
        let incoming = Envelope::new(WireMessage::Member {
            to: member("a", 2),
            from: member("b", 1),
            payload: vec![3],
        });
        r.deliver_incoming(incoming).unwrap();
        actix::clock::timeout(std::time::Duration::from_secs(10), all_in)
            .await
            .expect("the sink gets its four messages")
            .unwrap();
        r.unregister_member(&member("a", 2));
        assert_eq!(
            r.send_member(&member("a", 2), member("b", 1), vec![4]),
            Err(RouteError::UnknownMember(member("a", 2)))
        );
    });
    let got = got.lock().unwrap().clone();
    let payloads: Vec<u8> = got.iter().map(|(_, p)| p[0]).collect();
    assert_eq!(payloads, [0, 1, 2, 3]);
    assert!(got.iter().all(|(from, _)| from == &member("b", 1)));
}
