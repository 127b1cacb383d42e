//! The first program to run: bank transfers that deadlock, resolved by the agents.
//!
//! A node holds a bank of accounts. Many concurrent clients move money between random pairs of
//! accounts; each transfer write-locks the two accounts in the order it names them, so two
//! transfers in opposite directions deadlock. The agents find every such cycle and make one
//! transaction surrender a lock (or, for clients started with `abort_on_deadlock`, abort and
//! retry). A transfer touches the balances only once it holds both locks, and every account has
//! an "inside" flag that would catch two transfers touching it at once.
//!
//! ```sh
//! cargo run --release -p examples --example demo -- [--clients 16] [--transfers 500]
//! ```

use locks_agent::{Error, Options, begin_transaction};
use locks_core::{Mode, lock_id};
use locks_server::{Node, NodeConfig};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ACCOUNTS: usize = 8;
const INITIAL: i64 = 1_000;

struct Bank {
    balances: Vec<AtomicI64>,
    inside: Vec<AtomicBool>,
    violations: AtomicU64,
}

#[derive(Default)]
struct Tally {
    committed: AtomicU64,
    saw_deadlock: AtomicU64,
    surrendered: AtomicU64,
    aborted: AtomicU64,
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator, so runs are repeatable per client.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One transfer of the script of a client.
struct Transfer {
    from: usize,
    to: usize,
    amount: i64,
    abort_on_deadlock: bool,
    verbose: bool,
}

async fn transfer(node: &Node, bank: &Bank, tally: &Tally, t: &Transfer) -> Result<(), Error> {
    let Transfer {
        from,
        to,
        amount,
        abort_on_deadlock,
        verbose,
    } = *t;
    let options = Options {
        abort_on_deadlock,
        ..Options::default()
    };
    let txn = begin_transaction(node, options).await?;
    txn.lock(lock_id!["bank", "account", from as i64], Mode::WRITE)
        .await?;
    txn.lock(lock_id!["bank", "account", to as i64], Mode::WRITE)
        .await?;
    let result = txn.await_all_locks().await?;
    if !result.deadlocks.is_empty() {
        tally.saw_deadlock.fetch_add(1, Ordering::Relaxed);
        if result.deadlocks.iter().any(|d| &d.victim == txn.id()) {
            tally.surrendered.fetch_add(1, Ordering::Relaxed);
        }
        if verbose {
            let locks: Vec<String> = result
                .deadlocks
                .iter()
                .map(|d| d.lock.to_string())
                .collect();
            println!(
                "  transfer {from}->{to} by {} got through a deadlock on {}",
                txn.id(),
                locks.join(", ")
            );
        }
    }
    for account in [from, to] {
        if bank.inside[account].swap(true, Ordering::SeqCst) {
            bank.violations.fetch_add(1, Ordering::SeqCst);
        }
    }
    // Read, yield to let any wrongly admitted transfer interleave, then write back.
    let (a, b) = (
        bank.balances[from].load(Ordering::SeqCst),
        bank.balances[to].load(Ordering::SeqCst),
    );
    tokio::task::yield_now().await;
    bank.balances[from].store(a - amount, Ordering::SeqCst);
    bank.balances[to].store(b + amount, Ordering::SeqCst);
    for account in [from, to] {
        bank.inside[account].store(false, Ordering::SeqCst);
    }
    txn.end().await?;
    tally.committed.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clients = arg("--clients", 16);
    let transfers = arg("--transfers", 500);
    let node = Node::start(NodeConfig::new("demo")).await?;
    println!(
        "node {} started: {clients} clients x {transfers} transfers over {ACCOUNTS} accounts \
         (every 4th client uses abort_on_deadlock and retries)",
        node.name()
    );
    let bank = Arc::new(Bank {
        balances: (0..ACCOUNTS).map(|_| AtomicI64::new(INITIAL)).collect(),
        inside: (0..ACCOUNTS).map(|_| AtomicBool::new(false)).collect(),
        violations: AtomicU64::new(0),
    });
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (node2, bank, tally) = (node.clone(), bank.clone(), tally.clone());
        let abort_on_deadlock = client % 4 == 3;
        // Clients run on the node's own thread: no cross-thread hop per lock.
        tasks.push(node.spawn(async move {
            let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (client as u64 + 1));
            for i in 0..transfers {
                let from = rng.below(ACCOUNTS);
                let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                let amount = 1 + rng.below(50) as i64;
                let verbose = client == 0 && i % 100 == 0;
                let t = Transfer {
                    from,
                    to,
                    amount,
                    abort_on_deadlock,
                    verbose,
                };
                loop {
                    match transfer(&node2, &bank, &tally, &t).await {
                        Ok(()) => break,
                        Err(Error::Deadlock { lock, .. }) => {
                            tally.aborted.fetch_add(1, Ordering::Relaxed);
                            if verbose {
                                println!("  client {client} aborted on {lock}; retrying");
                            }
                        }
                        Err(other) => return Err(other),
                    }
                }
            }
            Ok::<(), Error>(())
        }));
    }
    let mut progress = tokio::time::interval(Duration::from_millis(500));
    progress.tick().await;
    let all = futures::future::join_all(tasks);
    tokio::pin!(all);
    let results = loop {
        tokio::select! {
            results = &mut all => break results,
            _ = progress.tick() => println!(
                "  ... {} transfers committed, {} deadlocks resolved so far",
                tally.committed.load(Ordering::Relaxed),
                tally.surrendered.load(Ordering::Relaxed) + tally.aborted.load(Ordering::Relaxed)
            ),
        }
    };
    for result in results {
        result??;
    }
    let elapsed = started.elapsed();
    let total: i64 = bank.balances.iter().map(|b| b.load(Ordering::SeqCst)).sum();
    let committed = tally.committed.load(Ordering::Relaxed);
    println!("\nsummary");
    println!("  transactions committed     {committed}");
    println!(
        "  saw a resolved deadlock    {}",
        tally.saw_deadlock.load(Ordering::Relaxed)
    );
    println!(
        "  surrendered a lock         {}",
        tally.surrendered.load(Ordering::Relaxed)
    );
    println!(
        "  aborted and retried        {}",
        tally.aborted.load(Ordering::Relaxed)
    );
    println!(
        "  throughput                 {:.0} transfers/s ({:.2?} in all)",
        committed as f64 / elapsed.as_secs_f64(),
        elapsed
    );
    let violations = bank.violations.load(Ordering::SeqCst);
    println!(
        "  total balance              {total} (expected {}), overlapping transfers: {violations}",
        INITIAL * ACCOUNTS as i64
    );
    node.shutdown().await;
    if total != INITIAL * ACCOUNTS as i64 || violations != 0 {
        return Err("consistency check failed".into());
    }
    println!("  consistency check          ok");
    Ok(())
}
