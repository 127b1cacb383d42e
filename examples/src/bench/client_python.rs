//! PY: the installed Python client (`clients/python`, package `locks-client`) as its users see
//! it, with `--python PATH` (a Python interpreter that has the package installed, such as a
//! virtualenv's `bin/python`): lock+unlock at 1 and 16 threads against the C1 node, and with
//! the asyncio client (`locks_client.aio`) at 16 sessions on one event loop.
//!
//! Each round runs [`SCRIPT`] (or [`AIO_SCRIPT`]) in a new interpreter: one `Client`, one
//! session per thread (per task), all started together once their sessions are open, each
//! doing `session.lock(path)` (waiting for the grant) then `session.unlock(path)` on its own
//! paths until the deadline. The script prints its count, wall time and every latency; the
//! interpreter's start and the sessions' opening are not timed. The child is killed if it
//! outlives the round limit.

use super::floors::Floor;
use super::stats::Sample;
use super::{Ctx, Row, Spec};
use std::time::Duration;

/// Threads of the rows of the thread-based client.
pub const THREADS: [usize; 2] = [1, 16];
/// Sessions of the asyncio client's row.
pub const AIO_SESSIONS: usize = 16;

/// The name of the row of `threads` threads.
pub fn name(threads: usize) -> String {
    if threads == 1 {
        "PY python 1 thread lock+unlock".to_owned()
    } else {
        format!("PY python {threads} threads lock+unlock")
    }
}

/// The name of the asyncio client's row.
pub fn aio_name() -> String {
    format!("PY python asyncio {AIO_SESSIONS} sessions lock+unlock")
}

/// Which of the package's clients a row drives, and with how many sessions.
#[derive(Clone, Copy, Debug)]
enum Driver {
    /// `locks_client.Client`, one thread per session.
    Threads(usize),
    /// `locks_client.aio.Client`, one task per session on one event loop.
    Asyncio(usize),
}

/// The rows, their specs and their drivers: none without `--python`.
fn rows(ctx: &Ctx) -> Vec<(Spec, Driver)> {
    if ctx.cfg.python.is_none() {
        return Vec::new();
    }
    let threads = THREADS
        .iter()
        .map(|&n| (Spec::rate(name(n), "op/s", Floor::Tcp), Driver::Threads(n)));
    let aio = (
        Spec::rate(aio_name(), "op/s", Floor::Tcp),
        Driver::Asyncio(AIO_SESSIONS),
    );
    threads.chain(std::iter::once(aio)).collect()
}

/// The rows' specs: none without `--python`.
pub fn specs(ctx: &Ctx) -> Vec<Spec> {
    rows(ctx).into_iter().map(|(spec, _)| spec).collect()
}

/// The measuring script: `python -c SCRIPT ADDR THREADS SECONDS`. Prints `ops elapsed_ns`,
/// then the latencies in ns on one line.
pub const SCRIPT: &str = r#"
import sys, threading, time
from locks_client import Client

addr, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
client = Client(addr)
ready = threading.Barrier(threads + 1)
began = [0]
lat = [[] for _ in range(threads)]
ended = [0] * threads
errors = []

def run(t):
    try:
        session = client.session()
    except BaseException as e:
        errors.append(repr(e))
        ready.abort()
        return
    try:
        ready.wait()
        deadline = began[0] + int(seconds * 1e9)
        out, i, done = lat[t], 0, time.perf_counter_ns()
        while done < deadline:
            path = f"py/{t}/{i}"
            start = time.perf_counter_ns()
            session.lock(path)
            session.unlock(path)
            done = time.perf_counter_ns()
            out.append(done - start)
            i += 1
        ended[t] = done
        session.end()
    except BaseException as e:
        errors.append(repr(e))

workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
for w in workers:
    w.start()
try:
    began[0] = time.perf_counter_ns()
    ready.wait()
    began[0] = time.perf_counter_ns()
except threading.BrokenBarrierError:
    pass
for w in workers:
    w.join()
if errors:
    sys.exit("python client: " + errors[0])
all_lat = [x for l in lat for x in l]
print(len(all_lat), max(ended) - began[0])
print(" ".join(map(str, all_lat)))
client.close()
"#;

/// The asyncio client's script: `python -c AIO_SCRIPT ADDR SESSIONS SECONDS`, one task per
/// session on one event loop; prints as [`SCRIPT`] does.
pub const AIO_SCRIPT: &str = r#"
import asyncio, sys, time
from locks_client.aio import Client

addr, sessions, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

async def run(session, t, out, deadline):
    i, done = 0, time.perf_counter_ns()
    while done < deadline:
        path = f"pya/{t}/{i}"
        began = time.perf_counter_ns()
        await session.lock(path)
        await session.unlock(path)
        done = time.perf_counter_ns()
        out.append(done - began)
        i += 1
    return done

async def main():
    lat = [[] for _ in range(sessions)]
    async with Client(addr) as client:
        opened = await asyncio.gather(*(client.session() for _ in range(sessions)))
        began = time.perf_counter_ns()
        deadline = began + int(seconds * 1e9)
        ended = await asyncio.gather(*(run(s, t, lat[t], deadline) for t, s in enumerate(opened)))
        for s in opened:
            await s.end()
    all_lat = [x for l in lat for x in l]
    print(len(all_lat), max(ended) - began)
    print(" ".join(map(str, all_lat)))

asyncio.run(main())
"#;

/// The Python rows against the node serving clients at `addr` (none without `--python`).
pub fn run(ctx: &Ctx, addr: &str) -> Vec<Row> {
    let Some(python) = ctx.cfg.python.clone() else {
        return Vec::new();
    };
    let seconds = super::fleet::fleet_time(ctx).as_secs_f64();
    let mut out = Vec::new();
    for (spec, driver) in rows(ctx) {
        out.extend(ctx.run_rounds(std::slice::from_ref(&spec), |_| {
            let sample = once(&python, addr, driver, seconds);
            Ok(vec![super::rig::bounded(ctx, sample)?])
        }));
    }
    out
}

/// One round: the script in a new interpreter (killed when this future is dropped).
async fn once(
    python: &std::path::Path,
    addr: &str,
    driver: Driver,
    seconds: f64,
) -> Result<Sample, String> {
    let (script, sessions) = match driver {
        Driver::Threads(n) => (SCRIPT, n),
        Driver::Asyncio(n) => (AIO_SCRIPT, n),
    };
    let output = tokio::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(addr)
        .arg(sessions.to_string())
        .arg(seconds.to_string())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("no message");
        return Err(format!(
            "{} failed ({}): {last}",
            python.display(),
            output.status
        ));
    }
    parse(&String::from_utf8_lossy(&output.stdout))
}

/// The script's output as a sample.
fn parse(out: &str) -> Result<Sample, String> {
    let bad = || format!("unexpected output of the Python script: {out:.200}");
    let mut lines = out.lines();
    let mut head = lines.next().ok_or_else(bad)?.split_whitespace();
    let ops: u64 = head.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let ns: u64 = head.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let lat: Vec<u64> = lines
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    Ok(Sample::new(ops, Duration::from_nanos(ns), lat))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_scripts_output_is_read_whole_or_refused() {
        let s = super::parse("3 3000000\n10 20 30\n").unwrap();
        assert_eq!((s.ops, s.latencies), (3, vec![10, 20, 30]));
        assert_eq!(s.elapsed.as_millis(), 3);
        assert!(super::parse("").is_err());
        assert!(super::parse("x 3\n").is_err());
        assert!(super::parse("3 3\n1 y\n").is_err());
    }
}
