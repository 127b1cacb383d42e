//! The node's `--metrics` endpoint: the Prometheus text format of everything the libraries
//! record (`locks_server::metrics`, `docs/metrics.md`), on `GET /metrics` over plain HTTP/1.1.
//!
//! The recorder is `metrics-exporter-prometheus`'s, installed as the process's global recorder
//! before the node starts (the node registers its handles with the recorder installed then).
//! The HTTP side is ours, a few lines on a tokio listener: the exporter's own listener binds
//! the address it is given and cannot say which port it got, and `--metrics 127.0.0.1:0` must
//! report the port it bound (the caller prints it). Each connection gets one response and is
//! closed; a request must arrive within [`REQUEST_TIMEOUT`] and fit in [`MAX_REQUEST`] bytes,
//! and at most [`MAX_CONNECTIONS`] are served at once: a newcomer beyond that closes the oldest
//! connection that has not sent its request yet (`Conns`), so idle sockets held open cannot
//! keep a scraper out, and a stuck or hostile client costs a bounded amount. A task runs the recorder's upkeep every
//! [`UPKEEP_INTERVAL`], which drains the histograms' buckets even when nobody scrapes.
//!
//! The exposition shows the link series (`peer` label) of the peers connected now only
//! ([`Connected`], [`only_connected`]): the `metrics` facade cannot remove a series, so the
//! recorder keeps one for every peer name it saw (at most
//! `locks_server::metrics::MAX_PEER_SERIES`, then `peer="other"`), and a stream of names that
//! connect and leave would otherwise stay in every scrape. A peer that comes back shows its
//! series again, with its counts since the process started. The `other` series is always shown.

use locks_server::Node;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// How long a client has to send its request (and to read the answer).
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

/// The node whose connected peers `/metrics` shows link series for; until it is set (the
/// endpoint starts before the node), no peer's. Cheap to clone.
#[derive(Clone, Default)]
pub struct Connected(Arc<OnceLock<Node>>);

impl Connected {
    /// From now on, the peers connected to `node` are those shown (the first node set stays).
    pub fn watch(&self, node: &Node) {
        let _ = self.0.set(node.clone());
    }

    /// The names of the peers connected now.
    fn names(&self) -> HashSet<String> {
        let Some(node) = self.0.get() else {
            return HashSet::new();
        };
        node.nodes()
            .into_iter()
            .filter(|n| n != node.id())
            .map(|n| n.as_str().to_owned())
            .collect()
    }
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Connected")
            .field(&self.0.get().is_some())
            .finish()
    }
}

/// `text` (the Prometheus text format) without the samples whose `peer` label names a peer
/// not in `connected`; `peer="other"` (the names beyond the exporter's bound) is kept, and so
/// is every other line (comments, samples without a `peer` label).
pub fn only_connected(text: &str, connected: &HashSet<String>) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let keep = match peer_of(line) {
            Some(peer) => peer == "other" || connected.contains(&peer),
            None => true,
        };
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The value of a sample line's `peer` label, unescaped; `None` for a comment, a sample
/// without one, or a line that does not parse.
fn peer_of(line: &str) -> Option<String> {
    if line.starts_with('#') {
        return None;
    }
    let open = line.find('{')?;
    let mut chars = line[open + 1..].chars();
    loop {
        let mut name = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            name.push(c);
        }
        if chars.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        if name.trim() == "peer" {
            return Some(value);
        }
        match chars.next()? {
            ',' => continue,
            _ => return None,
        }
    }
}

/// Binds `addr`, installs the Prometheus recorder as the global recorder and serves
/// `/metrics` on the current tokio runtime, with the link series of the peers `connected`
/// names ([`only_connected`]). Returns the address bound (with the real port for port 0).
/// Fails, saying why, if the address cannot be bound or a recorder is installed already. Call
/// it before starting nodes.
pub async fn serve(addr: SocketAddr, connected: Connected) -> Result<SocketAddr, String> {
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
    tokio::spawn(accept(listener, handle, connected));
    Ok(bound)
}

/// Parses a `--metrics` (or TOML `metrics`) address: `ip:port`.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|e| format!("bad metrics address {text:?} (want ip:port): {e}"))
}

async fn accept(listener: TcpListener, handle: PrometheusHandle, connected: Connected) {
    let conns = Arc::new(Mutex::new(Conns::default()));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // A failed accept (out of descriptors...) is not the endpoint's end; do not spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Some(id) = lock(&conns).admit() else {
            continue; // every slot is answering: closed at once
        };
        let (handle, task_conns) = (handle.clone(), conns.clone());
        let connected = connected.clone();
        let task = tokio::spawn(async move {
            let _done = Done(task_conns.clone(), id);
            let render = || only_connected(&handle.render(), &connected.names());
            let _ = tokio::time::timeout(
                REQUEST_TIMEOUT,
                respond(stream, render, || lock(&task_conns).answering(id)),
            )
            .await;
        });
        lock(&conns).started(id, task.abort_handle());
    }
}

fn lock(conns: &Mutex<Conns>) -> std::sync::MutexGuard<'_, Conns> {
    conns
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Forgets a connection when its task ends, however it ends.
struct Done(Arc<Mutex<Conns>>, u64);

impl Drop for Done {
    fn drop(&mut self) {
        lock(&self.0).done(self.1);
    }
}

/// The connections being served, oldest first, and whether each still waits for its request.
#[derive(Debug, Default)]
struct Conns {
    next: u64,
    live: VecDeque<Conn>,
}

#[derive(Debug)]
struct Conn {
    id: u64,
    task: Option<AbortHandle>,
    reading: bool,
}

impl Conns {
    /// A new connection's id, after closing the oldest one still waiting for its request if
    /// [`MAX_CONNECTIONS`] are served; `None` if all of those are answering already.
    fn admit(&mut self) -> Option<u64> {
        if self.live.len() >= MAX_CONNECTIONS {
            let oldest = self.live.iter().position(|c| c.reading)?;
            if let Some(task) = self.live.remove(oldest).and_then(|c| c.task) {
                task.abort();
            }
        }
        let id = self.next;
        self.next += 1;
        self.live.push_back(Conn {
            id,
            task: None,
            reading: true,
        });
        Some(id)
    }

    /// The task serving `id` runs.
    fn started(&mut self, id: u64, task: AbortHandle) {
        if let Some(c) = self.live.iter_mut().find(|c| c.id == id) {
            c.task = Some(task);
        }
    }

    /// `id` has its request: it is answered, not evicted.
    fn answering(&mut self, id: u64) {
        if let Some(c) = self.live.iter_mut().find(|c| c.id == id) {
            c.reading = false;
        }
    }

    /// `id` is closed.
    fn done(&mut self, id: u64) {
        self.live.retain(|c| c.id != id);
    }
}

/// Reads one request head and answers it: the metrics for `GET /metrics`, 404 for another
/// path, 405 for another method, 400 for something that is not a request.
async fn respond(
    mut stream: TcpStream,
    render: impl FnOnce() -> String,
    answering: impl FnOnce(),
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    answering();
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (status, body) = match (words.next(), words.next()) {
        (Some("GET"), Some("/metrics")) => ("200 OK", render()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_connected_peers_link_series_are_shown() {
        let text = "# HELP locks_link_messages_total Envelopes\n\
                    # TYPE locks_link_messages_total counter\n\
                    locks_link_messages_total{node=\"a\",peer=\"b\",direction=\"sent\"} 3\n\
                    locks_link_messages_total{node=\"a\",peer=\"gone\",direction=\"sent\"} 4\n\
                    locks_link_messages_total{node=\"a\",peer=\"other\",direction=\"sent\"} 5\n\
                    locks_link_rtt_seconds_bucket{node=\"a\",peer=\"gone\",le=\"0.1\"} 1\n\
                    locks_link_rtt_seconds_bucket{node=\"a\",peer=\"q\\\"x\",le=\"0.1\"} 1\n\
                    locks_peers_up{node=\"a\"} 1\n\
                    locks_x{node=\"peer=\\\"gone\\\"\",peers=\"gone\"} 1\n";
        let connected: HashSet<String> = ["b".to_owned(), "q\"x".to_owned()].into();
        let shown = only_connected(text, &connected);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 7, "{shown}");
        assert!(!shown.contains("peer=\"gone\""), "{shown}");
        assert!(shown.contains("peer=\"b\""));
        assert!(shown.contains("peer=\"other\""));
        assert!(shown.contains("peer=\"q\\\"x\""));
        // Neither a `peer=` inside another label's value nor another label named like it.
        assert!(shown.contains("locks_x{"));
        assert_eq!(peer_of("# TYPE x counter"), None);
        assert_eq!(peer_of("x 1"), None);
        assert_eq!(peer_of("x{peer=\"unterminated"), None);
    }

    #[test]
    fn a_newcomer_closes_the_oldest_connection_still_waiting_for_its_request() {
        let mut conns = Conns::default();
        let ids: Vec<u64> = (0..MAX_CONNECTIONS)
            .map(|_| conns.admit().unwrap())
            .collect();
        conns.answering(ids[0]);
        // Full: the oldest still reading (ids[1]) goes.
        let late = conns.admit().unwrap();
        assert!(conns.live.iter().all(|c| c.id != ids[1]));
        assert_eq!(conns.live.len(), MAX_CONNECTIONS);
        // When every one is answering, a newcomer is refused.
        for c in conns.live.iter_mut() {
            c.reading = false;
        }
        assert_eq!(conns.admit(), None);
        conns.done(late);
        assert!(conns.admit().is_some());
    }
}
