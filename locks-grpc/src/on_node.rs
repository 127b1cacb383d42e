//! Plain (non-TLS) client connections served on the node's own thread.
//!
//! A session's transaction talks to the node's actors (its agent, the lock server, the links
//! to other nodes), which live on the node's thread. Served there, a client's request, the
//! transaction's messages and the answer all run on that one thread: a round trip through the
//! API wakes the node once (the socket), not twice more for the hops between a runtime of
//! clients and the node's thread. So this module accepts the connections and serves HTTP/2
//! itself (hyper, as tonic's own server does), with every task of a connection spawned on the
//! node's thread *inside its actix context*, where actors may be started in place: tonic's
//! server spawns its tasks with `tokio::spawn`, outside it.
//!
//! The port's bounds ([`crate::port`]) are carried out here: each accepted connection is asked
//! of the port's book, closed at once when refused, and closed later when the book evicts or
//! expires it (a tick checks the deadlines); each call is counted before the service sees it
//! (so before any of its body is read) and refused with `RESOURCE_EXHAUSTED` past a bound; a
//! call with the token proves its connection.
//!
//! Invariant: every task this module starts runs on the node's thread and ends when the
//! server stops (gracefully: open streams finish) or is dropped (at once), or the node stops;
//! every connection the book counts has a task, and leaves the book when its task ends.

use crate::limits::ReleaseHook;
use crate::port::{Accept, ConnId, PortBook, PortLimits};
use futures::FutureExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use locks_server::Node;
use locks_server::embed::{LogLimiter, Verdict};
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::service::interceptor::ResponseBody;
use tonic::transport::server::Connected;

/// How the server is told to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Stop accepting; open connections finish their streams.
    Graceful,
    /// Close every connection now.
    Now,
}

/// How long the server waits after a failed `accept` before it tries again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How often the port's deadlines (unproven, idle) are checked.
const TICK: Duration = Duration::from_millis(500);

/// How long a connection the port closes may take to finish its open calls (after a GOAWAY).
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The port's book and the tokens that close its connections. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Port {
    inner: Arc<Mutex<PortInner>>,
    /// Proves a connection: the node's client token, if it has one.
    token: Option<String>,
    log: LogLimiter,
    /// Told when a connection closes.
    on_release: Option<ReleaseHook>,
}

struct PortInner {
    book: PortBook,
    closers: HashMap<ConnId, CancellationToken>,
}

impl Port {
    pub(crate) fn new(
        limits: PortLimits,
        token: Option<String>,
        log: LogLimiter,
        on_release: Option<ReleaseHook>,
    ) -> Port {
        Port {
            inner: Arc::new(Mutex::new(PortInner {
                book: PortBook::new(limits),
                closers: HashMap::new(),
            })),
            token,
            log,
            on_release,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PortInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the book to admit a connection from `client`: its id and closing token, or `None`
    /// (closed at once). Connections evicted to make room are told to close.
    fn accept(&self, client: std::net::IpAddr) -> Option<(ConnId, CancellationToken)> {
        let mut inner = self.lock();
        let (opened, evict) = match inner.book.accept(client, Instant::now()) {
            Accept::Open { id, evict } => (Some(id), evict),
            Accept::Refused { why, evict } => {
                if let Verdict::Warn { suppressed } = self.log.event("grpc-connection-refused") {
                    tracing::warn!(suppressed, %client, "a client connection was refused: {why}");
                }
                (None, evict)
            }
        };
        for id in evict {
            if let Some(closer) = inner.closers.remove(&id) {
                closer.cancel();
            }
        }
        let id = opened?;
        let closer = CancellationToken::new();
        inner.closers.insert(id, closer.clone());
        Some((id, closer))
    }

    /// Closes the connections past their deadlines.
    fn tick(&self) {
        let mut inner = self.lock();
        for id in inner.book.expired(Instant::now()) {
            if let Some(closer) = inner.closers.remove(&id) {
                closer.cancel();
            }
        }
    }

    fn closed(&self, id: ConnId) {
        {
            let mut inner = self.lock();
            inner.closers.remove(&id);
            inner.book.closed(id);
        }
        if let Some(hook) = &self.on_release {
            hook.call();
        }
    }

    /// Whether a call's headers carry the token (any call does on a node without one).
    fn proves(&self, request: &Request<hyper::body::Incoming>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        crate::auth::bearer(request.headers().get("authorization"))
            .is_some_and(|given| crate::auth::same(given.as_bytes(), token.as_bytes()))
    }

    /// Counts a call of connection `id` (proving the connection first if the call does), or
    /// says which bound refuses it.
    fn call(&self, id: ConnId, proves: bool) -> Result<CallGuard, &'static str> {
        let mut inner = self.lock();
        if proves {
            inner.book.proven(id);
        }
        inner.book.call_opened(id)?;
        Ok(CallGuard {
            port: self.clone(),
            id,
        })
    }
}

/// One call counted by the port, until dropped (with its response's body, or its future).
struct CallGuard {
    port: Port,
    id: ConnId,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.port.lock().book.call_closed(self.id, Instant::now());
    }
}

/// A response body that keeps its call counted until it is done or dropped.
struct Counted<B> {
    body: Pin<Box<B>>,
    _call: CallGuard,
}

impl<B> http_body::Body for Counted<B>
where
    B: http_body::Body,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.body.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The API as served on a connection (the generated service behind its interceptor, made by
/// `server.rs`): a cloneable service from HTTP requests to tonic's responses that never fails.
/// Given as a value, so this module needs nothing of the server's.
pub(crate) trait Api:
    tonic::codegen::Service<
        Request<Body>,
        Response = Response<ResponseBody<Body>>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S> Api for S where
    S: tonic::codegen::Service<
            Request<Body>,
            Response = Response<ResponseBody<Body>>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// Spawns hyper's per-stream tasks on the node's thread, in its actix context.
#[derive(Clone, Copy)]
struct Local;

impl<F> hyper::rt::Executor<F> for Local
where
    F: Future<Output = ()> + 'static,
{
    fn execute(&self, future: F) {
        tokio::task::spawn_local(future);
    }
}

/// The service of one connection: the API, with the connection's addresses in each request
/// (what `Request::remote_addr` reads, as tonic's server puts them there), each call counted by
/// the port.
#[derive(Clone)]
struct Conn<S> {
    svc: S,
    info: tonic::transport::server::TcpConnectInfo,
    port: Port,
    id: ConnId,
}

impl<S: Api> hyper::service::Service<Request<hyper::body::Incoming>> for Conn<S> {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<hyper::body::Incoming>) -> Self::Future {
        let proves = self.port.proves(&request);
        let call = match self.port.call(self.id, proves) {
            Ok(call) => call,
            Err(why) => {
                let refused = tonic::Status::resource_exhausted(why).into_http::<Body>();
                return std::future::ready(Ok(refused)).boxed();
            }
        };
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(self.info.clone());
        // Always ready: the generated service and the interceptor have no back-pressure.
        let response = self.svc.clone().call(request);
        async move {
            let response = response.await?;
            Ok(response.map(|body: ResponseBody<Body>| {
                Body::new(Counted {
                    body: Box::pin(body),
                    _call: call,
                })
            }))
        }
        .boxed()
    }
}

/// Starts serving `listener` on the node's thread; `extra` runs beside the accept loop until the
/// server stops. The returned future resolves when the server has stopped.
pub(crate) fn serve(
    node: &Node,
    listener: std::net::TcpListener,
    svc: impl Api,
    keepalive: Duration,
    port: Port,
    stop: oneshot::Receiver<Stop>,
    extra: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let half = keepalive / 2;
    let (max_calls, max_header_bytes) = {
        let inner = port.lock();
        let limits = inner.book.limits();
        (limits.max_calls_per_connection, limits.max_header_bytes)
    };
    let run = async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("the gRPC server cannot use its socket: {e}");
                return;
            }
        };
        let mut http = hyper::server::conn::http2::Builder::new(Local);
        http.timer(TokioTimer::new())
            .keep_alive_interval(Some(half))
            .keep_alive_timeout(half)
            .max_concurrent_streams(max_calls)
            .max_header_list_size(max_header_bytes);
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (tell, told) = watch::channel(None::<Stop>);
        let mut stop = std::pin::pin!(stop);
        let mut extra = std::pin::pin!(extra.fuse());
        let how = loop {
            tokio::select! {
                how = &mut stop => break how.unwrap_or(Stop::Now),
                () = &mut extra => {}
                _ = tick.tick() => port.tick(),
                accepted = listener.accept() => {
                    let tcp = match accepted {
                        Ok((tcp, _)) => tcp,
                        Err(e) => {
                            // Out of descriptors, say: an error returned at once on every
                            // try would keep the node's thread busy.
                            tracing::debug!("accepting a client connection failed: {e}");
                            tokio::time::sleep(ACCEPT_BACKOFF).await;
                            continue;
                        }
                    };
                    let Some(client) = tcp.peer_addr().ok().map(|a| a.ip()) else {
                        continue;
                    };
                    let Some((id, closer)) = port.accept(client) else {
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    let info = tcp.connect_info();
                    let service = Conn { svc: svc.clone(), info, port: port.clone(), id };
                    let conn = http.serve_connection(TokioIo::new(tcp), service);
                    let port = port.clone();
                    let told = told.clone();
                    tokio::task::spawn_local(async move {
                        connection(conn, told, closer).await;
                        port.closed(id);
                    });
                }
            }
        };
        drop(listener);
        let _ = tell.send(Some(how));
        drop(told);
        // Every connection holds a receiver until it is closed.
        tell.closed().await;
    };
    let done = node.spawn(run);
    async move {
        let _ = done.await;
    }
}

/// Serves one connection until it closes, the server stops, or the port closes it (`closer`:
/// a GOAWAY, then at most [`CLOSE_GRACE`] for its open calls).
async fn connection<S: Api>(
    conn: hyper::server::conn::http2::Connection<TokioIo<tokio::net::TcpStream>, Conn<S>, Local>,
    mut told: watch::Receiver<Option<Stop>>,
    closer: CancellationToken,
) {
    let mut conn = std::pin::pin!(conn);
    loop {
        tokio::select! {
            result = &mut conn => {
                if let Err(e) = result {
                    tracing::debug!("a client connection failed: {e}");
                }
                return;
            }
            () = closer.cancelled() => {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(CLOSE_GRACE, &mut conn).await;
                return;
            }
            changed = told.changed() => match (changed, *told.borrow()) {
                (Ok(()), Some(Stop::Graceful)) => conn.as_mut().graceful_shutdown(),
                (Ok(()), None) => {}
                _ => return,
            },
        }
    }
}
