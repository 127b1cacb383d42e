//! A peer that speaks the wire protocol by hand: it runs the handshake's pure machine over a
//! raw TCP stream, then sends whatever envelopes the test makes, as a misbehaving member of
//! the cluster (one that knows the cookie) could. [`RawPeer::sync`] waits until the node has
//! routed everything sent before it: the node answers an introspection question in the order
//! the link delivers envelopes, so its answer comes after every earlier envelope was handed to
//! its recipient (the lock server or an agent). A recipient may not have handled it yet: a test
//! that needs the effect waits for the effect itself.
//! (A node answers a peer's questions in bursts of 8, then one per 100 ms: a test syncs a few
//! times, not in a tight loop.)

use crate::wait::within;
use futures::{SinkExt, StreamExt};
use locks_core::NodeId;
use locks_core::proto::{Envelope, IntrospectRequest, Message};
use locks_server::transport::net::frame::{decode_frame, encode_frame, length_codec};
use locks_server::transport::net::session::Tagger;
use locks_server::transport::net::{Cookie, Handshake, HandshakeOutcome, PeerFrame, Role};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// The largest frame the peer sends or reads.
pub const MAX_FRAME: usize = 1 << 20;

/// An authenticated connection to a node, driven by the test. A task of its own answers the
/// node's pings (so the link stays up while the test does other things) and passes on the
/// envelopes the node sends; it ends with the connection, or when the peer is dropped.
pub struct RawPeer {
    out: mpsc::UnboundedSender<PeerFrame>,
    incoming: mpsc::UnboundedReceiver<Envelope>,
    task: tokio::task::JoinHandle<()>,
    bound: Duration,
    next_question: u64,
    /// Envelopes the node sent, in order, kept while waiting for something else.
    pub received: Vec<Envelope>,
}

impl Drop for RawPeer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawPeer {
    /// Dials `addr` and completes the handshake as node `name` with `cookie`; panics unless
    /// it is established. Every wait of the peer is bounded by `bound`.
    pub async fn connect(addr: SocketAddr, name: &str, cookie: &str, bound: Duration) -> RawPeer {
        let stream = within(bound, "dial", TcpStream::connect(addr))
            .await
            .expect("the node accepts");
        let mut framed = Framed::new(stream, length_codec(MAX_FRAME));
        let node = NodeId::new(name).expect("a node name");
        let (mut hs, mut step) = Handshake::new(
            Role::Initiator,
            node,
            Cookie::from(cookie),
            [0x5a; 32],
            Instant::now() + bound,
        );
        loop {
            for frame in &step.send {
                framed
                    .send(encode_frame(frame, MAX_FRAME).expect("a frame"))
                    .await
                    .expect("the node reads");
            }
            if let Some(outcome) = step.outcome {
                assert!(
                    matches!(outcome, HandshakeOutcome::Established { .. }),
                    "{outcome:?}"
                );
                break;
            }
            let bytes = within(bound, "the node's handshake frame", framed.next())
                .await
                .expect("the node answers")
                .expect("a frame");
            let frame = decode_frame(&bytes, MAX_FRAME).expect("a frame");
            step = hs.on_frame(frame, |_: &NodeId| false);
        }
        let session = hs.session().expect("established").clone();
        let tags = (
            session.sealer(Role::Initiator),
            session.opener(Role::Initiator),
        );
        let (out, out_rx) = mpsc::unbounded_channel();
        let (in_tx, incoming) = mpsc::unbounded_channel();
        let task = tokio::spawn(drive(framed, tags, out_rx, in_tx));
        RawPeer {
            out,
            incoming,
            task,
            bound,
            next_question: 1 << 40,
            received: Vec::new(),
        }
    }

    /// Sends one message to the node.
    pub fn send(&self, message: Message) {
        self.out
            .send(PeerFrame::Payload(Envelope::new(message)))
            .expect("the connection stands");
    }

    /// Waits until the node has routed everything sent before (see the module documentation),
    /// keeping what else it sends in [`RawPeer::received`].
    pub async fn sync(&mut self) {
        let id = self.next_question;
        self.next_question += 1;
        self.send(Message::Introspect(IntrospectRequest {
            id,
            max_locks: 0,
            max_bytes: MAX_FRAME as u32,
        }));
        self.expect(|m| matches!(m, Message::TableReport(r) if r.id == id))
            .await;
    }

    /// Waits for the first envelope (kept or new) whose message `wanted` picks, and takes it.
    pub async fn expect(&mut self, wanted: impl Fn(&Message) -> bool) -> Message {
        loop {
            if let Some(i) = self.received.iter().position(|e| wanted(&e.message)) {
                return self.received.remove(i).message;
            }
            let envelope = within(self.bound, "a message from the node", self.incoming.recv())
                .await
                .expect("the connection stands");
            self.received.push(envelope);
        }
    }
}

/// Carries frames both ways until the connection ends or the peer is dropped.
async fn drive(
    mut framed: Framed<TcpStream, LengthDelimitedCodec>,
    (mut sealer, mut opener): (Tagger, Tagger),
    mut out: mpsc::UnboundedReceiver<PeerFrame>,
    incoming: mpsc::UnboundedSender<Envelope>,
) {
    loop {
        let frame = tokio::select! {
            frame = out.recv() => match frame {
                Some(frame) => frame,
                None => return,
            },
            bytes = framed.next() => match bytes.map(|b| b.map(|b| {
                opener.open(&b).map(|frame| decode_frame(frame, MAX_FRAME))
            })) {
                Some(Ok(Some(Ok(PeerFrame::Ping { seq })))) => PeerFrame::Pong { seq },
                Some(Ok(Some(Ok(PeerFrame::Payload(envelope))))) => {
                    let _ = incoming.send(envelope);
                    continue;
                }
                Some(Ok(Some(Ok(_)))) => continue,
                _ => return,
            },
        };
        let bytes = encode_frame(&frame, MAX_FRAME).expect("a frame");
        if framed.send(sealer.seal(bytes)).await.is_err() {
            return;
        }
    }
}
