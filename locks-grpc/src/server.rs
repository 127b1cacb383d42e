//! The `locks.v1.Locks` service on a node: [`serve`] binds the address (and serves plain
//! connections on the node's thread, `on_node.rs`), checks each call's
//! bearer token (`auth.rs`), counts sessions (and campaigns, and table and graph reads while they run) per
//! client, and runs each session (`session.rs`) in the task that sends its events, and each
//! campaign (`election.rs`) as a task of the runtime it is called on; `Table` and `Graph` are
//! answered by `introspect.rs`.

use crate::auth::Auth;
use crate::election::{self, Campaigns, LeaderStream};
use crate::introspect;
use crate::limits::{GrpcConfig, PortLimits, SessionPermit, Sessions};
use crate::on_node::{self, Stop};
use crate::pb;
use crate::pb::locks_server::{Locks, LocksServer};
use crate::session::{self, Known, Shared};
use futures::Stream;
use locks_agent::Options;
use locks_leader::Role;
use locks_server::Node;
use locks_server::embed::{LogLimiter, Verdict};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

/// How many events a session buffers for a client that reads slowly; past it the session waits
/// for the client (and reads no further requests meanwhile).
const EVENT_BUFFER: usize = 64;

/// A running gRPC server. It stops when dropped (closing its connections at once), or with
/// [`GrpcServer::stop`].
pub struct GrpcServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<Stop>>,
    running: Running,
}

/// Where the server runs.
enum Running {
    /// On the node's thread (`on_node.rs`): done when this resolves.
    OnNode(Option<Pin<Box<dyn Future<Output = ()> + Send>>>),
    /// Over TLS, as a task of the runtime `serve` was called on.
    Task(Option<tokio::task::JoinHandle<()>>),
}

impl std::fmt::Debug for GrpcServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl GrpcServer {
    /// The address it listens on (with the port picked, when configured as 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting calls and waits until the open connections are closed.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Stop::Graceful);
        }
        match &mut self.running {
            Running::OnNode(done) => {
                if let Some(done) = done.take() {
                    done.await;
                }
            }
            Running::Task(task) => {
                if let Some(task) = task.take() {
                    let _ = task.await;
                }
            }
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Stop::Now);
        }
        if let Running::Task(Some(task)) = &self.running {
            task.abort();
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The TLS settings were refused.
    #[error("bad TLS settings for the client API: {0}")]
    Tls(String),
    /// The address could not be bound.
    #[error("cannot listen for clients on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Serves the `locks.v1.Locks` API of `node` on `config.listen`: plain HTTP/2 on the node's own
/// thread (`on_node.rs`), so that a request and the transaction's work for it run on one
/// thread; with TLS, on the current tokio runtime.
///
/// ```
/// use locks_grpc::{GrpcConfig, serve};
/// use locks_server::{Node, NodeConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
/// let server = serve(&node, GrpcConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
/// assert_ne!(server.local_addr().port(), 0);
/// server.stop().await;
/// # }
/// ```
pub fn serve(node: &Node, config: GrpcConfig) -> Result<GrpcServer, ServeError> {
    let bind = |source| ServeError::Bind {
        addr: config.listen,
        source,
    };
    let known = Known::default();
    for n in node.nodes() {
        known.add(n);
    }
    let mut node_events = node.subscribe_nodes();
    let learn = known.clone();
    // Learns the nodes requests may name; runs beside the server until it stops.
    let learning = async move {
        while let Some(event) = node_events.recv().await {
            if let locks_server::NodeEvent::Up(n) = event {
                learn.add(n);
            }
        }
        std::future::pending::<()>().await;
    };
    let service = Service {
        shared: Shared {
            node: node.clone(),
            known,
            limits: config.limits.clone(),
            log: LogLimiter::default(),
            keepalive: config.keepalive,
        },
        sessions: Sessions::new(config.on_release.clone()),
        campaigns: Campaigns::default(),
    };
    // Messages up to the frame limit are read, so that a session request over
    // `max_message_bytes` is refused alone and its session goes on.
    let max = config
        .limits
        .max_frame_bytes
        .max(config.limits.max_message_bytes);
    let auth = Auth::new(config.token.clone(), service.shared.log.clone());
    let service_log = service.shared.log.clone();
    let svc = LocksServer::new(service).max_decoding_message_size(max);
    let svc = tonic::service::interceptor::InterceptedService::new(svc, auth);
    let (stop_tx, stop_rx) = oneshot::channel::<Stop>();
    let Some(tls) = &config.tls else {
        let listener = std::net::TcpListener::bind(config.listen).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        let port = on_node::Port::new(
            port_limits(&config.port),
            config.token.clone(),
            service_log.clone(),
            config.on_release.clone(),
        );
        let done = on_node::serve(
            node,
            listener,
            svc,
            config.keepalive,
            port,
            stop_rx,
            learning,
        );
        return Ok(GrpcServer {
            addr,
            stop: Some(stop_tx),
            running: Running::OnNode(Some(Box::pin(done))),
        });
    };
    let incoming = TcpIncoming::bind(config.listen)
        .map_err(bind)?
        .with_nodelay(Some(true));
    let addr = incoming.local_addr().map_err(bind)?;
    let half = config.keepalive / 2;
    let port = port_limits(&config.port);
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let mut settings = ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert, &tls.key));
    if let Some(ca) = &tls.client_ca {
        settings = settings.client_ca_root(Certificate::from_pem(ca));
    }
    let builder = tonic::transport::Server::builder()
        .tls_config(settings)
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    let task = tokio::spawn(async move {
        let server = builder
            .http2_keepalive_interval(Some(half))
            .http2_keepalive_timeout(Some(half))
            .max_concurrent_streams(Some(port.max_calls_per_connection))
            .http2_max_header_list_size(Some(port.max_header_bytes))
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stop_rx.await;
            });
        tokio::select! {
            result = server => {
                if let Err(e) = result {
                    tracing::warn!("the gRPC server stopped: {e}");
                }
            }
            () = learning => {}
        }
    });
    Ok(GrpcServer {
        addr,
        stop: Some(stop_tx),
        running: Running::Task(Some(task)),
    })
}

/// File descriptors kept out of the client port's connection bound, at least: for the peer
/// port's links and handshakes, the data directory, the metrics port and the listeners.
const FD_RESERVE: usize = 256;

/// The port's limits, with `max_connections` lowered to fit the process's file-descriptor limit
/// less a reserve (the larger of [`FD_RESERVE`] and a quarter of the limit), so that a flood of
/// client connections never leaves the peer port unable to accept.
fn port_limits(configured: &PortLimits) -> PortLimits {
    fit_to_fds(configured, open_file_limit())
}

/// `configured`, with `max_connections` fitted to a limit of `fds` open files.
fn fit_to_fds(configured: &PortLimits, fds: Option<usize>) -> PortLimits {
    let mut limits = configured.clone();
    if let Some(fds) = fds {
        let reserve = FD_RESERVE.max(fds / 4);
        limits.max_connections = limits
            .max_connections
            .min(fds.saturating_sub(reserve).max(1));
    }
    limits
}

/// The soft limit on open files of this process, where the system says it
/// (`/proc/self/limits`); `None` elsewhere, or when it is unlimited.
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The metadata that asks a session to abort its transaction when it is a deadlock's victim.
pub(crate) const ABORT_ON_DEADLOCK: &str = "locks-abort-on-deadlock";

/// The transaction options a `Session` call asks for in its metadata.
fn session_options(metadata: &tonic::metadata::MetadataMap) -> Result<Options, Status> {
    let mut options = Options::default();
    if let Some(value) = metadata.get(ABORT_ON_DEADLOCK) {
        options.abort_on_deadlock = match value.to_str().map(str::to_ascii_lowercase).as_deref() {
            Ok("true" | "1" | "yes") => true,
            Ok("false" | "0" | "no") => false,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "{ABORT_ON_DEADLOCK} is `true` or `false`"
                )));
            }
        };
    }
    Ok(options)
}

/// The `locks.v1.Locks` service.
pub(crate) struct Service {
    shared: Shared,
    sessions: Sessions,
    /// The campaigns running here, for `Proclaim`.
    campaigns: Campaigns,
}

impl Service {
    /// Counts one more session (or campaign) of the request's client, within the limits.
    fn permit<T>(&self, request: &Request<T>) -> Result<SessionPermit, Status> {
        let client = request
            .remote_addr()
            .map(|a| a.ip())
            .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
        self.sessions
            .open(client, &self.shared.limits)
            .map_err(|why| {
                if let Verdict::Warn { suppressed } = self.shared.log.event("grpc-session-limit") {
                    tracing::warn!(suppressed, %client, "a session was refused: {why}");
                }
                Status::resource_exhausted(why)
            })
    }

    /// Runs a member of the request's group in `role` for the client (`Campaign` and
    /// `Observe`): its stream of leader changes.
    async fn election(
        &self,
        request: &Request<pb::ElectionRequest>,
        role: Role,
    ) -> Result<Response<LeaderStream>, Status> {
        let permit = self.permit(request)?;
        let stream = election::run(
            &self.shared.node,
            request.get_ref(),
            role,
            permit,
            &self.campaigns,
        )
        .await?;
        Ok(Response::new(stream))
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::SessionEvent, Status>> + Send>>;

/// A session's events, with the session itself run in the stream's polls: the task that sends
/// the events to the client (the HTTP/2 stream's) runs the session, so an answer goes out
/// without a hop through another task. The session stops with the stream: when the client is
/// gone the server drops the stream, and with it the session and its transaction, which
/// releases its locks. A client that stops reading its events stops its session once the
/// stream's flow-control window and [`EVENT_BUFFER`] are full, as a session of its own task
/// would.
struct Driven {
    session: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    events: crate::outbox::Outlet<Result<pb::SessionEvent, Status>>,
}

impl Stream for Driven {
    type Item = Result<pb::SessionEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(session) = &mut self.session
            && session.as_mut().poll(cx).is_ready()
        {
            // The events end after those queued.
            self.session = None;
        }
        // What the session queued in this poll, or before it. Nothing wakes this task for it
        // (`outbox.rs`): the session only runs here, and its inputs wake the task.
        match self.events.take() {
            Some(event) => Poll::Ready(Some(event)),
            None if self.session.is_none() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

#[tonic::async_trait]
impl Locks for Service {
    type SessionStream = EventStream;

    async fn session(
        &self,
        request: Request<Streaming<pb::SessionRequest>>,
    ) -> Result<Response<EventStream>, Status> {
        let options = session_options(request.metadata())?;
        let permit = self.permit(&request)?;
        let (tx, rx) = crate::outbox::outbox(EVENT_BUFFER);
        let session = session::run(
            self.shared.clone(),
            request.into_inner(),
            tx,
            permit,
            options,
        );
        Ok(Response::new(Box::pin(Driven {
            session: Some(Box::pin(session)),
            events: rx,
        })))
    }

    type CampaignStream = LeaderStream;
    type ObserveStream = LeaderStream;

    async fn campaign(
        &self,
        request: Request<pb::ElectionRequest>,
    ) -> Result<Response<LeaderStream>, Status> {
        self.election(&request, Role::Candidate).await
    }

    async fn observe(
        &self,
        request: Request<pb::ElectionRequest>,
    ) -> Result<Response<LeaderStream>, Status> {
        self.election(&request, Role::Worker).await
    }

    async fn proclaim(
        &self,
        request: Request<pb::ProclaimRequest>,
    ) -> Result<Response<pb::ProclaimReply>, Status> {
        election::proclaim(&self.campaigns, request.into_inner()).await?;
        Ok(Response::new(pb::ProclaimReply {}))
    }

    async fn table(
        &self,
        request: Request<pb::TableRequest>,
    ) -> Result<Response<pb::TableReply>, Status> {
        // Counted as a session while it runs: a client cannot ask without bound at once.
        let _permit = self.permit(&request)?;
        let reply = introspect::table(&self.shared.node, request.get_ref()).await?;
        Ok(Response::new(reply))
    }

    async fn graph(
        &self,
        request: Request<pb::GraphRequest>,
    ) -> Result<Response<pb::GraphReply>, Status> {
        let _permit = self.permit(&request)?;
        let reply = introspect::graph(&self.shared.node, request.get_ref()).await?;
        Ok(Response::new(reply))
    }

    async fn info(
        &self,
        _request: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::InfoReply>, Status> {
        let node = &self.shared.node;
        Ok(Response::new(pb::InfoReply {
            node: node.id().to_string(),
            nodes: node.nodes().iter().map(|n| n.to_string()).collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn client_connections_leave_a_reserve_of_file_descriptors_for_the_peer_port() {
        use super::{PortLimits, fit_to_fds};
        let limits = PortLimits::default();
        assert_eq!(fit_to_fds(&limits, Some(1024)).max_connections, 768);
        assert_eq!(fit_to_fds(&limits, Some(100)).max_connections, 1);
        assert_eq!(fit_to_fds(&limits, Some(1 << 20)).max_connections, 4096);
        assert_eq!(fit_to_fds(&limits, None).max_connections, 4096);
        assert!(super::open_file_limit().is_none_or(|n| n > 0));
    }
}
