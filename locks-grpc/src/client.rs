//! A Rust client of the `locks.v1` API: [`Client::connect`] to a node, [`Client::session`] for
//! a transaction, and on it [`Session::lock`], [`Session::unlock`] (or
//! [`Session::send_unlock`], which does not wait for the answer), [`Session::status`],
//! [`Session::convert`], [`Session::end`] and the pushed events ([`Session::next_event`]);
//! [`Client::campaign`], [`Client::observe`] and [`Client::proclaim`] for leader election;
//! [`Client::table`] and [`Client::graph`] to look at the cluster's locks.
//!
//! A session reads its stream on the caller's task: a call waits for the answer with its request
//! id, keeping the pushed events (grants, losses, deadlocks, status changes) it reads meanwhile
//! for [`Session::next_event`]; when the stream ends, or the connection is gone (the client
//! pings the node and gives up after its keepalive bound), a waiting call fails with
//! [`ClientError::Closed`] and `next_event` returns the end.

mod session;

pub use session::{LockSpec, Session, SessionOptions};

use crate::pb;
use crate::pb::session_event::Kind;
use futures::channel::mpsc;
use std::time::Duration;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node could not be reached.
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    /// The call failed (bad token, too many sessions, the node stopping...).
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// The node refused the request (an `Error` event: bad input, a limit, a wait bound).
    #[error("{code:?}: {message}")]
    Refused {
        /// The gRPC code of the refusal.
        code: tonic::Code,
        /// What was wrong.
        message: String,
    },
    /// The token is not valid in a header.
    #[error("the token cannot be sent as a header")]
    BadToken,
    /// The session ended (or its connection is gone) before the answer came.
    #[error("the session has ended")]
    Closed,
    /// The node answered with an event of another kind than the request's.
    #[error("unexpected answer: {0:?}")]
    Unexpected(Box<pb::SessionEvent>),
}

/// How a client connects.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The node's client token, if it has one.
    pub token: Option<String>,
    /// How long the node may stay silent before the connection counts as gone (the client pings
    /// every half of it).
    pub keepalive: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// TLS to the node; `None` speaks plain HTTP/2.
    pub tls: Option<ClientTls>,
}

/// The client's TLS settings, PEM-encoded.
#[derive(Clone)]
pub struct ClientTls {
    /// The CA the node's certificate must chain to.
    pub ca: Vec<u8>,
    /// The name the node's certificate must carry.
    pub server_name: String,
    /// The client's certificate chain and key, for a node that asks for client certificates.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .field("identity", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            token: None,
            keepalive: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            tls: None,
        }
    }
}

/// Adds the bearer token to every call.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        Ok(request)
    }
}

type Inner = pb::locks_client::LocksClient<InterceptedService<Channel, Bearer>>;

/// A connection to one node.
#[derive(Clone)]
pub struct Client {
    inner: Inner,
}

impl Client {
    /// Connects to the node serving `addr` (`host:port`, or a `http://` URI).
    pub async fn connect(addr: &str, options: ClientOptions) -> Result<Client, ClientError> {
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let uri = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("{scheme}://{addr}")
        };
        let half = options.keepalive / 2;
        let mut endpoint = Endpoint::from_shared(uri)?;
        if let Some(tls) = &options.tls {
            use tonic::transport::{Certificate, ClientTlsConfig, Identity};
            let mut settings = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&tls.ca))
                .domain_name(tls.server_name.clone());
            if let Some((cert, key)) = &tls.identity {
                settings = settings.identity(Identity::from_pem(cert, key));
            }
            endpoint = endpoint.tls_config(settings)?;
        }
        let channel = endpoint
            .connect_timeout(options.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(half)
            .keep_alive_timeout(half)
            .keep_alive_while_idle(true)
            .connect()
            .await?;
        let token = match options.token {
            Some(t) => Some(
                MetadataValue::try_from(format!("Bearer {t}"))
                    .map_err(|_| ClientError::BadToken)?,
            ),
            None => None,
        };
        Ok(Client {
            inner: pb::locks_client::LocksClient::with_interceptor(channel, Bearer(token)),
        })
    }

    /// The node's name and the nodes it reaches.
    pub async fn info(&mut self) -> Result<pb::InfoReply, ClientError> {
        Ok(self.inner.info(pb::InfoRequest {}).await?.into_inner())
    }

    /// Campaigns for the leadership of `group` (over `nodes`, or the nodes its members learn
    /// of): every change of leader, the first saying who leads now. Dropping the stream
    /// resigns.
    pub async fn campaign(
        &mut self,
        group: &str,
        nodes: &[String],
    ) -> Result<tonic::Streaming<pb::LeaderEvent>, ClientError> {
        self.campaign_with_value(group, nodes, Vec::new()).await
    }

    /// [`Client::campaign`] with the value the campaign announces when it leads (every
    /// member's stream carries the leader's value).
    pub async fn campaign_with_value(
        &mut self,
        group: &str,
        nodes: &[String],
        value: Vec<u8>,
    ) -> Result<tonic::Streaming<pb::LeaderEvent>, ClientError> {
        let mut request = election_request(group, nodes);
        request.value = value;
        Ok(self.inner.campaign(request).await?.into_inner())
    }

    /// The campaign that leads `group` (on this node; `leading` is the [`pb::LeaderEvent`]
    /// of its own stream that says it leads, which carries its secret) changes its value
    /// without a new election; returns once a majority of the group's nodes have it.
    pub async fn proclaim(
        &mut self,
        group: &str,
        leading: &pb::LeaderEvent,
        value: Vec<u8>,
    ) -> Result<(), ClientError> {
        let request = pb::ProclaimRequest {
            group: group.to_owned(),
            leader: leading.leader.clone(),
            term: leading.term,
            value,
            campaign_secret: leading.campaign_secret.clone(),
        };
        self.inner.proclaim(request).await?;
        Ok(())
    }

    /// The lock tables of the node and of the nodes it reaches (see [`pb::TableRequest`] for
    /// the bounds; zeros take the defaults).
    pub async fn table(
        &mut self,
        request: pb::TableRequest,
    ) -> Result<pb::TableReply, ClientError> {
        Ok(self.inner.table(request).await?.into_inner())
    }

    /// The cluster's wait-for graph.
    pub async fn graph(
        &mut self,
        request: pb::GraphRequest,
    ) -> Result<pb::GraphReply, ClientError> {
        Ok(self.inner.graph(request).await?.into_inner())
    }

    /// Observes the leader of `group` without competing: every change of leader.
    pub async fn observe(
        &mut self,
        group: &str,
        nodes: &[String],
    ) -> Result<tonic::Streaming<pb::LeaderEvent>, ClientError> {
        Ok(self
            .inner
            .observe(election_request(group, nodes))
            .await?
            .into_inner())
    }

    /// Opens a session: a transaction on the node, until [`Session::end`] or the session is
    /// dropped.
    pub async fn session(&mut self) -> Result<Session, ClientError> {
        self.session_with(SessionOptions::default()).await
    }

    /// Opens a session with `options`.
    pub async fn session_with(&mut self, options: SessionOptions) -> Result<Session, ClientError> {
        let (tx, rx) = mpsc::channel::<pb::SessionRequest>(64);
        let mut request = tonic::Request::new(rx);
        if options.abort_on_deadlock {
            request.metadata_mut().insert(
                crate::server::ABORT_ON_DEADLOCK,
                MetadataValue::from_static("true"),
            );
        }
        let mut stream = self.inner.session(request).await?.into_inner();
        let started = match stream.message().await? {
            Some(pb::SessionEvent {
                kind: Some(Kind::Started(s)),
                ..
            }) => s,
            Some(other) => return Err(ClientError::Unexpected(Box::new(other))),
            None => return Err(ClientError::Closed),
        };
        Ok(Session::opened(tx, stream, started))
    }
}

fn election_request(group: &str, nodes: &[String]) -> pb::ElectionRequest {
    pb::ElectionRequest {
        group: group.to_owned(),
        nodes: nodes.to_vec(),
        value: Vec::new(),
    }
}

/// `a@1,b@2`: the tokens of a grant, as `locksctl` hands them to its command.
pub fn tokens_text(grant: &pb::Grant) -> String {
    grant
        .tokens
        .iter()
        .map(|t| format!("{}@{}", t.node, t.version))
        .collect::<Vec<_>>()
        .join(",")
}
