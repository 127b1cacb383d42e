//! The floors of this machine, measured in the same run as the workloads.
//!
//! Every floor is a sequential round trip, timed one by one:
//! - `actix same thread`: `addr.send(Ping(x)).await` from a future on the actor's own arbiter
//!   to a handler that returns `x + 1` (what a client on the node's runtime pays per hop);
//! - `actix other thread`: the same, the actor on a second arbiter (another OS thread);
//! - `actix from tokio mt`: the same request sent by a task of a multi-thread tokio runtime
//!   (2 workers) to an actor on an actix thread: what a client on a foreign runtime pays per
//!   call at the least (W1 `foreign-rt`);
//! - `tokio mpsc+oneshot`: a client task sends `(x, oneshot::Sender)` on a bounded mpsc to a
//!   server task that answers `x + 1`; both tasks on one current-thread runtime;
//! - `tcp loopback`: a 36-byte frame (4-byte big-endian length, 32 bytes of payload) written
//!   to a 127.0.0.1 connection and echoed back by a server thread of this process (its own
//!   current-thread runtime, ephemeral port); TCP_NODELAY on both ends. The client runs on
//!   another current-thread runtime. Loopback only.
//!
//! Each round runs in threads and runtimes of its own, so a floor never shares a thread with
//! anything else of the harness.

use super::stats::Sample;
use actix::prelude::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// A floor: one kind of round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Floor {
    /// actix `send().await`, client and actor on one arbiter.
    ActixSame,
    /// actix `send().await`, client and actor on two arbiters (threads).
    ActixOther,
    /// actix `send().await` from a task of a multi-thread tokio runtime to an actix thread.
    ActixFromTokio,
    /// tokio mpsc + oneshot between two tasks of one current-thread runtime.
    TokioChannel,
    /// A 36-byte frame over a 127.0.0.1 TCP connection and back.
    Tcp,
}

impl Floor {
    /// Every floor, in the order they are measured and printed.
    pub const ALL: [Floor; 5] = [
        Floor::ActixSame,
        Floor::ActixOther,
        Floor::ActixFromTokio,
        Floor::TokioChannel,
        Floor::Tcp,
    ];

    /// The name printed in the table (and used as the workload name in JSON).
    pub fn label(self) -> &'static str {
        match self {
            Floor::ActixSame => "floor actix same thread",
            Floor::ActixOther => "floor actix other thread",
            Floor::ActixFromTokio => "floor actix from tokio mt",
            Floor::TokioChannel => "floor tokio mpsc+oneshot",
            Floor::Tcp => "floor tcp loopback",
        }
    }

    /// A short name for the ratio column.
    pub fn short(self) -> &'static str {
        match self {
            Floor::ActixSame => "actix-same",
            Floor::ActixOther => "actix-other",
            Floor::ActixFromTokio => "actix-from-mt",
            Floor::TokioChannel => "tokio-chan",
            Floor::Tcp => "tcp",
        }
    }

    /// Round trips per round: (full run, quick run).
    pub fn round_trips(self) -> (u64, u64) {
        match self {
            Floor::ActixSame | Floor::TokioChannel => (100_000, 10_000),
            Floor::ActixOther | Floor::ActixFromTokio | Floor::Tcp => (5_000, 500),
        }
    }

    /// Measures one round of `n` round trips.
    pub fn measure(self, n: u64) -> Result<Sample, String> {
        match self {
            Floor::ActixSame => actix_round(n, false),
            Floor::ActixOther => actix_round(n, true),
            Floor::ActixFromTokio => actix_from_tokio_round(n),
            Floor::TokioChannel => tokio_round(n),
            Floor::Tcp => tcp_round(n),
        }
    }
}

struct Echo;

impl Actor for Echo {
    type Context = Context<Self>;
}

struct Ping(u64);

impl Message for Ping {
    type Result = u64;
}

impl Handler<Ping> for Echo {
    type Result = u64;

    fn handle(&mut self, msg: Ping, _ctx: &mut Context<Self>) -> u64 {
        msg.0.wrapping_add(1)
    }
}

/// Times `n` sequential calls of `call`, returning the sample.
async fn time_calls<F, Fut>(n: u64, mut call: F) -> Result<Sample, String>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<u64, String>>,
{
    let mut latencies = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let answer = call(i).await?;
        latencies.push(t.elapsed().as_nanos() as u64);
        if answer != i.wrapping_add(1) {
            return Err(format!("wrong answer {answer} to {i}"));
        }
    }
    Ok(Sample::new(n, start.elapsed(), latencies))
}

fn actix_round(n: u64, other_thread: bool) -> Result<Sample, String> {
    let thread = std::thread::Builder::new()
        .name("bench-actix-floor".into())
        .spawn(move || {
            let system = System::new();
            system.block_on(async move {
                let arbiter = other_thread.then(Arbiter::new);
                let addr = match &arbiter {
                    Some(arbiter) => Echo::start_in_arbiter(&arbiter.handle(), |_| Echo),
                    None => Echo.start(),
                };
                let sample = time_calls(n, |i| {
                    let request = addr.send(Ping(i));
                    async move { request.await.map_err(|e| e.to_string()) }
                })
                .await;
                if let Some(arbiter) = arbiter {
                    arbiter.stop();
                    let _ = arbiter.join();
                }
                sample
            })
        })
        .map_err(|e| e.to_string())?;
    thread
        .join()
        .map_err(|_| "actix floor thread panicked".to_string())?
}

fn actix_from_tokio_round(n: u64) -> Result<Sample, String> {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let actor = std::thread::Builder::new()
        .name("bench-actix-floor".into())
        .spawn(move || {
            System::new().block_on(async move {
                let _ = addr_tx.send(Echo.start());
                let _ = stop_rx.await;
            });
        })
        .map_err(|e| e.to_string())?;
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "actix floor thread did not start".to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let client = rt.spawn(async move {
        time_calls(n, |i| {
            let request = addr.send(Ping(i));
            async move { request.await.map_err(|e| e.to_string()) }
        })
        .await
    });
    let sample = rt.block_on(client).map_err(|e| e.to_string())?;
    let _ = stop_tx.send(());
    actor
        .join()
        .map_err(|_| "actix floor thread panicked".to_string())?;
    sample
}

fn current_thread() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

fn tokio_round(n: u64) -> Result<Sample, String> {
    let rt = current_thread()?;
    rt.block_on(async move {
        let (tx, mut rx) = mpsc::channel::<(u64, oneshot::Sender<u64>)>(1024);
        let server = tokio::spawn(async move {
            while let Some((x, reply)) = rx.recv().await {
                let _ = reply.send(x.wrapping_add(1));
            }
        });
        // The client is a spawned task too, as a client on a node's runtime would be.
        let client = tokio::spawn(async move {
            time_calls(n, |i| {
                let tx = tx.clone();
                async move {
                    let (reply, answer) = oneshot::channel();
                    tx.send((i, reply)).await.map_err(|e| e.to_string())?;
                    answer.await.map_err(|e| e.to_string())
                }
            })
            .await
        });
        let sample = client.await.map_err(|e| e.to_string())?;
        server.await.map_err(|e| e.to_string())?;
        sample
    })
}

/// Length prefix plus payload: the size of a small lock request on the wire.
const FRAME: usize = 36;

fn tcp_round(n: u64) -> Result<Sample, String> {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<Result<SocketAddr, String>>();
    let server = std::thread::Builder::new()
        .name("bench-tcp-floor".into())
        .spawn(move || -> Result<(), String> {
            let rt = current_thread()?;
            rt.block_on(async move {
                let listener = match TcpListener::bind("127.0.0.1:0").await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e.to_string()));
                        return Err(e.to_string());
                    }
                };
                let local = listener.local_addr().map_err(|e| e.to_string())?;
                let _ = addr_tx.send(Ok(local));
                let (mut stream, _) =
                    tokio::time::timeout(Duration::from_secs(10), listener.accept())
                        .await
                        .map_err(|_| "no client connected".to_string())?
                        .map_err(|e| e.to_string())?;
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                let mut frame = [0u8; FRAME];
                // Echo frames until the client closes the connection.
                loop {
                    match stream.read_exact(&mut frame).await {
                        Ok(_) => stream.write_all(&frame).await.map_err(|e| e.to_string())?,
                        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                        Err(e) => return Err(e.to_string()),
                    }
                }
            })
        })
        .map_err(|e| e.to_string())?;
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "tcp floor server did not start".to_string())??;
    let rt = current_thread()?;
    let sample = rt.block_on(async move {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut frame = [0u8; FRAME];
        frame[..4].copy_from_slice(&((FRAME - 4) as u32).to_be_bytes());
        let mut back = [0u8; FRAME];
        let mut latencies = Vec::with_capacity(n as usize);
        let start = Instant::now();
        for i in 0..n {
            frame[4..12].copy_from_slice(&i.to_le_bytes());
            let t = Instant::now();
            stream.write_all(&frame).await.map_err(|e| e.to_string())?;
            stream
                .read_exact(&mut back)
                .await
                .map_err(|e| e.to_string())?;
            latencies.push(t.elapsed().as_nanos() as u64);
            if back != frame {
                return Err(format!("frame {i} came back changed"));
            }
        }
        let sample = Ok::<_, String>(Sample::new(n, start.elapsed(), latencies));
        drop(stream);
        sample
    });
    server
        .join()
        .map_err(|_| "tcp floor server panicked".to_string())??;
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every floor runs and counts what it was asked to (no timing is checked).
    #[test]
    fn every_floor_completes_a_short_round() {
        for floor in Floor::ALL {
            let sample = floor.measure(50).unwrap();
            assert_eq!(sample.ops, 50, "{}", floor.label());
            assert_eq!(sample.latencies.len(), 50);
        }
    }
}
