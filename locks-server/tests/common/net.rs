//! Helpers shared by the tests that run transports, nodes and routers: tracing to the test's
//! output, a bound on every wait, node names, the loopback address, and a remote link that
//! records what it is sent, and an agent that passes what it is delivered to a channel.

use futures::{SinkExt, StreamExt};
use locks_core::NodeId;
use locks_core::proto::Envelope;
use locks_server::RouteError;
use locks_server::embed::RemoteLink;
use locks_server::transport::net::frame::{decode_frame, encode_frame, length_codec};
use locks_server::transport::net::session::Tagger;
use locks_server::transport::net::{Cookie, Handshake, HandshakeOutcome, PeerFrame, Role};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Instant;
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// The largest frame the hand-run handshake sends or reads.
pub const MAX_FRAME: usize = 1 << 16;

/// Logs `locks_server` at debug level to the test's output (once per test binary).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("locks_server=debug")
        .try_init();
}

/// The bounded wait of every suite here (not every suite that includes this module waits).
#[allow(unused_imports)]
pub use locks_testing::wait::within;

/// The node named `name`.
pub fn id(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// 127.0.0.1 with an ephemeral port.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A peer that runs the handshake by hand (the pure machine over a raw framed stream, frames
/// up to `MAX_FRAME`), so that the test controls every frame after it; panics unless the
/// handshake is established.
pub async fn raw_handshake(
    stream: TcpStream,
    role: Role,
    name: &str,
    cookie: &str,
    nonce: [u8; 32],
    deadline: Instant,
) -> RawLink {
    let mut framed = Framed::new(stream, length_codec(MAX_FRAME));
    let (mut hs, mut step) = Handshake::new(role, id(name), Cookie::from(cookie), nonce, deadline);
    loop {
        for frame in &step.send {
            framed
                .send(encode_frame(frame, MAX_FRAME).unwrap())
                .await
                .unwrap();
        }
        if let Some(outcome) = step.outcome {
            assert!(
                matches!(outcome, HandshakeOutcome::Established { .. }),
                "{outcome:?}"
            );
            let session = hs.session().expect("established").clone();
            return RawLink {
                framed,
                sealer: session.sealer(role),
                opener: session.opener(role),
            };
        }
        let bytes = framed.next().await.unwrap().unwrap();
        step = hs.on_frame(decode_frame(&bytes, MAX_FRAME).unwrap(), |_: &NodeId| false);
    }
}

/// The connection of [`raw_handshake`], tagging what it sends and checking what it reads as
/// the session of its handshake requires.
pub struct RawLink {
    /// The framed stream (frames written here directly are untagged).
    pub framed: Framed<TcpStream, LengthDelimitedCodec>,
    sealer: Tagger,
    opener: Tagger,
}

#[allow(dead_code)]
impl RawLink {
    /// Sends `frame`, tagged.
    pub async fn send(&mut self, frame: &PeerFrame) -> std::io::Result<()> {
        let bytes = encode_frame(frame, MAX_FRAME).unwrap();
        self.framed.send(self.sealer.seal(bytes)).await
    }

    /// The next frame, its tag checked; `None` once the connection ends.
    pub async fn next(&mut self) -> Option<PeerFrame> {
        let bytes = self.framed.next().await?.ok()?;
        let frame = self.opener.open(&bytes).expect("a tagged frame");
        Some(decode_frame(frame, MAX_FRAME).unwrap())
    }

    /// The stream.
    pub fn into_inner(self) -> TcpStream {
        self.framed.into_inner()
    }
}

/// A remote link that keeps every envelope it is sent, in order.
#[derive(Default)]
pub struct Captured(pub Mutex<Vec<Envelope>>);

impl RemoteLink for Captured {
    fn send(&self, envelope: Envelope) -> Result<(), RouteError> {
        self.0.lock().unwrap().push(envelope);
        Ok(())
    }
}

/// A bare agent actor: every message it is delivered goes to the channel, in order.
pub struct ChannelAgent(pub tokio::sync::mpsc::UnboundedSender<locks_core::proto::AgentMessage>);

impl actix::Actor for ChannelAgent {
    type Context = actix::Context<Self>;
}

impl actix::Handler<locks_server::embed::Deliver> for ChannelAgent {
    type Result = ();

    fn handle(&mut self, msg: locks_server::embed::Deliver, _ctx: &mut Self::Context) {
        if let locks_server::embed::Deliver::Message(m) = msg {
            let _ = self.0.send(m);
        }
    }
}

/// Waits (within 20 s) until `events` reports `event`, skipping the others.
#[allow(dead_code)]
pub async fn expect_event(events: &mut locks_server::NodeEvents, event: locks_server::NodeEvent) {
    within(std::time::Duration::from_secs(20), "a node event", async {
        while events.recv().await != Some(event.clone()) {}
    })
    .await;
}
