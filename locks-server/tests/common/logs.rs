//! What the log-flood tests need: a tracing writer that keeps every line ([`Capture`]), and a
//! bad connection that is written to and then waited on until the node closes it.

use super::net::within;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing_subscriber::fmt::MakeWriter;

const BOUND: Duration = Duration::from_secs(20);

/// Everything the subscriber writes.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

impl Capture {
    /// A capture installed as the process's subscriber, at DEBUG, without colour codes.
    pub fn install() -> Capture {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(capture.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        capture
    }

    /// The lines written at `level` (`WARN`, `DEBUG`, ...).
    pub fn lines_at(&self, level: &str) -> Vec<String> {
        self.lines_where(level, |_| true)
    }

    /// The lines at `level` written by node `node`.
    pub fn lines(&self, level: &str, node: &str) -> Vec<String> {
        let (who, who_plain) = (format!("node=\"{node}\""), format!("node={node} "));
        self.lines_where(level, |l| l.contains(&who) || l.contains(&who_plain))
    }

    fn lines_where(&self, level: &str, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        let tag = format!(" {level} ");
        text.lines()
            .filter(|l| l.contains(&tag) && keep(l))
            .map(str::to_owned)
            .collect()
    }
}

/// Sends `bytes` and reads until the node closes the connection.
pub async fn send_and_wait_closed(addr: SocketAddr, bytes: &[u8]) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The node may close before reading everything: a failed write is part of the attack.
    let _ = stream.write_all(bytes).await;
    let mut sink = Vec::new();
    let _ = within(BOUND, "closed", stream.read_to_end(&mut sink)).await;
}
