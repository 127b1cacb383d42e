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
//! Invariant: every task this module starts runs on the node's thread and ends when the
//! server stops (gracefully: open streams finish) or is dropped (at once), or the node stops.

use futures::FutureExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use locks_server::Node;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
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
/// (what `Request::remote_addr` reads, as tonic's server puts them there).
#[derive(Clone)]
struct Conn<S> {
    svc: S,
    info: tonic::transport::server::TcpConnectInfo,
}

impl<S: Api> hyper::service::Service<Request<hyper::body::Incoming>> for Conn<S> {
    type Response = Response<ResponseBody<Body>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<hyper::body::Incoming>) -> Self::Future {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(self.info.clone());
        // Always ready: the generated service and the interceptor have no back-pressure.
        self.svc.clone().call(request).boxed()
    }
}

/// Starts serving `listener` on the node's thread; `extra` runs beside the accept loop until the
/// server stops. The returned future resolves when the server has stopped.
pub(crate) fn serve(
    node: &Node,
    listener: std::net::TcpListener,
    svc: impl Api,
    keepalive: Duration,
    stop: oneshot::Receiver<Stop>,
    extra: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let half = keepalive / 2;
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
            // As tonic's server: sessions are bounded per client by `Limits` instead.
            .max_concurrent_streams(None);
        let (tell, told) = watch::channel(None::<Stop>);
        let mut stop = std::pin::pin!(stop);
        let mut extra = std::pin::pin!(extra.fuse());
        let how = loop {
            tokio::select! {
                how = &mut stop => break how.unwrap_or(Stop::Now),
                () = &mut extra => {}
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
                    let _ = tcp.set_nodelay(true);
                    let info = tcp.connect_info();
                    let conn = http.serve_connection(TokioIo::new(tcp), Conn { svc: svc.clone(), info });
                    tokio::task::spawn_local(connection(conn, told.clone()));
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

/// Serves one connection until it closes, or the server stops.
async fn connection<S: Api>(
    conn: hyper::server::conn::http2::Connection<TokioIo<tokio::net::TcpStream>, Conn<S>, Local>,
    mut told: watch::Receiver<Option<Stop>>,
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
            changed = told.changed() => match (changed, *told.borrow()) {
                (Ok(()), Some(Stop::Graceful)) => conn.as_mut().graceful_shutdown(),
                (Ok(()), None) => {}
                _ => return,
            },
        }
    }
}
