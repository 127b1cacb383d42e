//! The alternative a user would pick: the common Redis mutex recipe, against a Redis server the user
//! started (`--redis ADDR`). The harness contacts that address and nothing else.
//!
//! One lock cycle is `SET key token NX` (must answer `OK`), then the compare-and-delete
//! [`RELEASE`] script with a literal `EVAL` (must answer `1`).
//! - `R-SEQ`: one client, sequential cycles on one key; cycles/s and the p50/p99 of a cycle.
//! - `R-HOT`: 8 clients, each with its own connection, on ONE key for a fixed time; a failed
//!   `SET NX` is retried at once, a success is released at once. Successful cycles/s, and the
//!   p50/p99 of the wait from a client's first attempt to its success.
//! - `R-C redis N clients lock cycle` (the CLIENT workload's anchor, N of 1, 16, 64, 256): N
//!   clients at once (a `fleet`), each with its own connection and its own keys; a cycle is
//!   `SET key token NX PX 30000` (the recipe's expiry), then the release script, each reply
//!   waited for. Cycles/s over all of them, and the p50/p99 of a cycle.
//!
//! Clients run on a current-thread tokio runtime (the faster of the two runtimes measured for
//! Redis on this machine, so the comparison favours Redis). The RESP client is the minimum
//! these commands need: requests are arrays of bulk strings; replies may be simple strings,
//! errors, integers or bulk strings.

use super::stats::Sample;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The release script of the Redis mutex recipe: delete the key only if it still holds our token.
pub const RELEASE: &str = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then \
                           return redis.call(\"del\",KEYS[1]) else return 0 end";

/// Clients of `R-HOT`.
pub const HOT_CLIENTS: usize = 8;

/// A RESP reply (the kinds these commands produce).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:1`
    Int(i64),
    /// `$3 abc`, or `$-1` (nil).
    Bulk(Option<Vec<u8>>),
}

/// One connection to Redis.
pub struct Resp {
    stream: BufReader<TcpStream>,
    out: Vec<u8>,
    line: Vec<u8>,
}

impl Resp {
    /// Connects to `addr` with TCP_NODELAY.
    pub async fn connect(addr: &str) -> Result<Resp, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("redis at {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Resp {
            stream: BufReader::new(stream),
            out: Vec::with_capacity(256),
            line: Vec::with_capacity(64),
        })
    }

    /// Sends one command and reads its reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        self.out.clear();
        self.out
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            self.out
                .extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            self.out.extend_from_slice(arg);
            self.out.extend_from_slice(b"\r\n");
        }
        let io = |e: std::io::Error| format!("redis: {e}");
        self.stream
            .get_mut()
            .write_all(&self.out)
            .await
            .map_err(io)?;
        self.line.clear();
        let n = self
            .stream
            .read_until(b'\n', &mut self.line)
            .await
            .map_err(io)?;
        if n < 3 || !self.line.ends_with(b"\r\n") {
            return Err("redis: connection closed or bad reply".into());
        }
        let text = String::from_utf8_lossy(&self.line[1..n - 2]).into_owned();
        let number = || {
            text.parse::<i64>()
                .map_err(|_| format!("redis: bad number {text:?}"))
        };
        match self.line[0] {
            b'+' => Ok(Reply::Simple(text.clone())),
            b'-' => Ok(Reply::Error(text.clone())),
            b':' => Ok(Reply::Int(number()?)),
            b'$' => {
                let len = number()?;
                if len < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let mut data = vec![0u8; len as usize + 2];
                self.stream.read_exact(&mut data).await.map_err(io)?;
                data.truncate(len as usize);
                Ok(Reply::Bulk(Some(data)))
            }
            other => Err(format!("redis: unexpected reply type {:?}", other as char)),
        }
    }

    /// `SET key token NX`: true when acquired, false when someone else holds the key.
    pub async fn acquire(&mut self, key: &str, token: &str) -> Result<bool, String> {
        match self
            .call(&[b"SET", key.as_bytes(), token.as_bytes(), b"NX"])
            .await?
        {
            Reply::Simple(ok) if ok == "OK" => Ok(true),
            Reply::Bulk(None) => Ok(false),
            other => Err(format!("redis SET NX answered {other:?}")),
        }
    }

    /// `SET key token NX PX ms`: as [`Resp::acquire`], the key expiring after `ms`.
    pub async fn acquire_px(&mut self, key: &str, token: &str, ms: u64) -> Result<bool, String> {
        let ms = ms.to_string();
        let args: [&[u8]; 6] = [
            b"SET",
            key.as_bytes(),
            token.as_bytes(),
            b"NX",
            b"PX",
            ms.as_bytes(),
        ];
        match self.call(&args).await? {
            Reply::Simple(ok) if ok == "OK" => Ok(true),
            Reply::Bulk(None) => Ok(false),
            other => Err(format!("redis SET NX PX answered {other:?}")),
        }
    }

    /// The compare-and-delete release; an error unless it deleted the key.
    pub async fn release(&mut self, key: &str, token: &str) -> Result<(), String> {
        match self
            .call(&[
                b"EVAL",
                RELEASE.as_bytes(),
                b"1",
                key.as_bytes(),
                token.as_bytes(),
            ])
            .await?
        {
            Reply::Int(1) => Ok(()),
            other => Err(format!("redis release answered {other:?}")),
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// Checks that `addr` answers `PING`.
pub fn check(addr: &str) -> Result<(), String> {
    runtime()?.block_on(async {
        let mut c = Resp::connect(addr).await?;
        match tokio::time::timeout(Duration::from_secs(5), c.call(&[b"PING"])).await {
            Ok(Ok(Reply::Simple(pong))) if pong == "PONG" => Ok(()),
            Ok(Ok(other)) => Err(format!("redis PING answered {other:?}")),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("redis did not answer PING within 5 s".into()),
        }
    })
}

/// One round of `R-SEQ`: `cycles` sequential lock cycles on one key.
pub fn sequential(addr: &str, round: usize, cycles: u64) -> Result<Sample, String> {
    runtime()?.block_on(async {
        let mut c = Resp::connect(addr).await?;
        let key = "locks-bench:seq";
        let mut latencies = Vec::with_capacity(cycles as usize);
        let start = Instant::now();
        for i in 0..cycles {
            let token = format!("c0-{round}-{i}");
            let t = Instant::now();
            if !c.acquire(key, &token).await? {
                return Err(format!("{key} is held by someone else"));
            }
            c.release(key, &token).await?;
            latencies.push(t.elapsed().as_nanos() as u64);
        }
        Ok(Sample::new(cycles, start.elapsed(), latencies))
    })
}

/// One round of `R-HOT`: [`HOT_CLIENTS`] clients on one key for `duration`.
pub fn hot(addr: &str, round: usize, duration: Duration) -> Result<Sample, String> {
    runtime()?.block_on(async {
        let key = format!("locks-bench:hot:{round}");
        let mut clients = Vec::new();
        for _ in 0..HOT_CLIENTS {
            clients.push(Resp::connect(addr).await?);
        }
        let start = Instant::now();
        let deadline = start + duration;
        let tasks: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(client, mut c)| {
                let key = key.clone();
                tokio::spawn(async move {
                    let (mut waits, mut attempts) = (Vec::new(), 0u64);
                    let mut i = 0u64;
                    'cycles: while Instant::now() < deadline {
                        let token = format!("c{client}-{i}");
                        i += 1;
                        let first = Instant::now();
                        loop {
                            attempts += 1;
                            if c.acquire(&key, &token).await? {
                                break;
                            }
                            if Instant::now() >= deadline {
                                break 'cycles;
                            }
                        }
                        waits.push(first.elapsed().as_nanos() as u64);
                        c.release(&key, &token).await?;
                    }
                    Ok::<_, String>((waits, attempts))
                })
            })
            .collect();
        let mut waits = Vec::new();
        let (mut attempts, mut least) = (0u64, u64::MAX);
        for task in tasks {
            let (w, a) = task.await.map_err(|e| e.to_string())??;
            least = least.min(w.len() as u64);
            waits.extend(w);
            attempts += a;
        }
        let elapsed = start.elapsed();
        let successes = waits.len() as u64;
        let share = least as f64 / successes.max(1) as f64;
        Ok(Sample::new(successes, elapsed, waits)
            .with_extra("attempts/s", attempts as f64 / elapsed.as_secs_f64())
            .with_extra(
                "attempts/success",
                attempts as f64 / successes.max(1) as f64,
            )
            .with_extra("least client share", share))
    })
}

/// The expiry of the lock cycle's keys: longer than any round.
const CYCLE_PX_MS: u64 = 30_000;

/// The name of the lock-cycle row of `clients` clients.
pub fn cycles_name(clients: usize) -> String {
    let plural = if clients == 1 { "" } else { "s" };
    format!("R-C redis {clients} client{plural} lock cycle")
}

/// One round of `R-C`: `clients` clients, each on its own connection and keys, doing lock
/// cycles for `run_for` (on a current-thread runtime, as the other Redis rows).
pub fn cycles(
    addr: &str,
    round: usize,
    clients: usize,
    run_for: Duration,
) -> Result<Sample, String> {
    runtime()?.block_on(async {
        let mut conns = Vec::with_capacity(clients);
        for _ in 0..clients {
            conns.push(Resp::connect(addr).await?);
        }
        let mut conns: Vec<Option<Resp>> = conns.into_iter().map(Some).collect();
        super::fleet::run(clients, run_for, |client, start| {
            let c = conns[client].take();
            async move {
                let mut c = c.ok_or("harness bug: a connection used twice")?;
                let key = format!("locks-bench:cycle:{round}:{client}");
                let deadline = start.ready().await;
                let mut lat = Vec::new();
                let mut done = Instant::now();
                let mut i = 0u64;
                while done < deadline {
                    let token = format!("c{client}-{i}");
                    let t = Instant::now();
                    if !c.acquire_px(&key, &token, CYCLE_PX_MS).await? {
                        return Err(format!("{key} is held by someone else"));
                    }
                    c.release(&key, &token).await?;
                    done = Instant::now();
                    lat.push((done - t).as_nanos() as u64);
                    i += 1;
                }
                Ok((lat, done))
            }
        })
        .await
    })
}
