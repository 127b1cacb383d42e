//! The node's `--metrics` endpoint: the Prometheus text format of everything the libraries
//! record (`locks_server::metrics`, `docs/metrics.md`), on `GET /metrics` over plain HTTP/1.1.
//!
//! The recorder is `metrics-exporter-prometheus`'s, installed as the process's global recorder
//! before the node starts (the node registers its handles with the recorder installed then).
//! The HTTP side is ours, a few lines on a tokio listener: the exporter's own listener binds
//! the address it is given and cannot say which port it got, and `--metrics 127.0.0.1:0` must
//! report the port it bound (the caller prints it). Each connection gets one response and is
//! closed; a request must arrive within [`REQUEST_TIMEOUT`] and fit in [`MAX_REQUEST`] bytes,
//! and at most [`MAX_CONNECTIONS`] are served at once (the rest are closed at once), so a
//! stuck or hostile client costs a bounded amount. A task runs the recorder's upkeep every
//! [`UPKEEP_INTERVAL`], which drains the histograms' buckets even when nobody scrapes.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How long a client has to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head read.
pub const MAX_REQUEST: usize = 8 * 1024;
/// How many connections are served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// The buckets of every histogram (all are in seconds: lock waits and link round trips, from
/// tens of microseconds to seconds). Buckets rather than the exporter's default summaries, so
/// that the histograms of several nodes can be added up.
pub const BUCKETS: [f64; 14] = [
    0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
    5.0,
];

/// How often the recorder's upkeep runs.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Binds `addr`, installs the Prometheus recorder as the global recorder and serves
/// `/metrics` on the current tokio runtime. Returns the address bound (with the real port for
/// port 0). Fails, saying why, if the address cannot be bound or a recorder is installed
/// already. Call it before starting nodes.
pub async fn serve(addr: SocketAddr) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("metrics listener on {addr}: {e}"))?;
    let handle = PrometheusBuilder::new()
        .set_buckets(&BUCKETS)
        .map_err(|e| format!("metrics buckets: {e}"))?
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(accept(listener, handle));
    Ok(bound)
}

/// Parses a `--metrics` (or TOML `metrics`) address: `ip:port`.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|e| format!("bad metrics address {text:?} (want ip:port): {e}"))
}

async fn accept(listener: TcpListener, handle: PrometheusHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // A failed accept (out of descriptors...) is not the endpoint's end; do not spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue; // dropped: closed at once
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, respond(stream, &handle)).await;
            drop(slot);
        });
    }
}

/// Reads one request head and answers it: the metrics for `GET /metrics`, 404 for another
/// path, 405 for another method, 400 for something that is not a request.
async fn respond(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (status, body) = match (words.next(), words.next()) {
        (Some("GET"), Some("/metrics")) => ("200 OK", handle.render()),
        (Some("GET"), Some(_)) => ("404 Not Found", "try /metrics\n".to_owned()),
        (Some(_), Some(_)) => ("405 Method Not Allowed", "GET only\n".to_owned()),
        _ => ("400 Bad Request", "not an HTTP request\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
