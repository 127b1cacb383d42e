//! The path of a lock request as the code takes it, against the hop table of `ARCHITECTURE.md`
//! ("The path of a lock request", "Agent path"). Every hop of that table reports itself with a
//! `trace` event of the `lock_path` target, from the file it runs in (`RUST_LOG=lock_path=trace`
//! shows them in any program). A hop that moves to another file, a hop missing or out of
//! order, or a row that names the wrong file fails this test; so the table can be trusted
//! without opening the files it names.
//!
//! One test in this binary: it installs the process's global subscriber.

use locks_agent::{Options, begin_transaction};
use locks_core::{Mode, lock_id};
use locks_server::{Node, NodeConfig};
use locks_testing::wait::within;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

const BOUND: Duration = Duration::from_secs(20);

/// The hops recorded: (hop number, file of the event).
#[derive(Clone, Default)]
struct Hops(Arc<Mutex<Vec<(u64, String)>>>);

impl Hops {
    fn take(&self) -> Vec<(u64, String)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

struct HopField(Option<u64>);

impl Visit for HopField {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "hop" {
            self.0 = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "hop" {
            self.0 = u64::try_from(value).ok();
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: Subscriber> Layer<S> for Hops {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != "lock_path" {
            return;
        }
        let mut hop = HopField(None);
        event.record(&mut hop);
        let hop = hop.0.expect("every lock_path event names its hop");
        let file = event.metadata().file().unwrap_or("?").replace('\\', "/");
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((hop, file));
    }
}

/// The agent path's rows of `ARCHITECTURE.md`: for hop `i` (from 1), the files its row names,
/// each from the workspace's root. A file without a crate is in the crate named last in its
/// row, `locks-agent/src/` at first.
fn documented_hops() -> Vec<Vec<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../ARCHITECTURE.md");
    let doc = std::fs::read_to_string(path).expect("ARCHITECTURE.md is readable");
    let section = doc
        .split("### Agent path")
        .nth(1)
        .expect("ARCHITECTURE.md has an \"Agent path\" section");
    let mut rows = Vec::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Ok(hop) = cells[1].parse::<usize>() else {
            continue; // the header and its rule
        };
        assert_eq!(hop, rows.len() + 1, "the rows are numbered in order");
        let files_cell = cells[cells.len() - 2];
        let mut krate = "locks-agent/src/".to_string();
        let files = files_cell
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|f| match f.find("/src/") {
                Some(at) if f.starts_with("locks-") => {
                    krate = f[..at + "/src/".len()].to_string();
                    f.to_string()
                }
                _ => format!("{krate}{f}"),
            })
            .collect();
        rows.push(files);
    }
    rows
}

#[test]
fn a_lock_takes_the_hops_the_architecture_table_names_in_order() {
    let hops = Hops::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(hops.clone()))
        .expect("the only subscriber of this test binary");
    let rows = documented_hops();
    assert_eq!(rows.len(), 11, "the table has the agent path's 11 hops");
    for files in &rows {
        for file in files {
            let on_disk = concat!(env!("CARGO_MANIFEST_DIR"), "/../").to_string() + file;
            assert!(
                std::path::Path::new(&on_disk).is_file(),
                "ARCHITECTURE.md names {file}, which does not exist"
            );
        }
    }

    let system = actix::System::new();
    let (fast, agent) = system.block_on(async {
        let node = Node::start(NodeConfig::new("path"))
            .await
            .expect("node starts");
        within(BOUND, "both locks answered", path_of_locks(&node, &hops)).await
    });

    // A lock granted at once stays on the caller's thread: no hop of the agent path.
    assert_eq!(fast, vec![], "a lock granted at once took agent-path hops");

    // Each hop's first event comes after the previous hop's first, and from a file its row
    // names.
    let mut first_seen = Vec::new();
    for (hop, file) in &agent {
        let row = rows
            .get((*hop as usize).wrapping_sub(1))
            .unwrap_or_else(|| panic!("hop {hop} is not in the table"));
        assert!(
            row.iter().any(|f| file.ends_with(f.as_str())),
            "hop {hop} ran in {file}; its row names {row:?}"
        );
        if !first_seen.contains(hop) {
            first_seen.push(*hop);
        }
    }
    assert_eq!(
        first_seen,
        (1..=11).collect::<Vec<u64>>(),
        "the hops, in the order they first happened: {agent:?}"
    );
}

/// Takes a lock on the fast path, then one through a running agent; returns the hops each took.
async fn path_of_locks(node: &Node, hops: &Hops) -> (Vec<(u64, String)>, Vec<(u64, String)>) {
    let fast = begin_transaction(node, Options::default()).await.unwrap();
    hops.take();
    fast.lock(lock_id!["path", "fast"], Mode::WRITE)
        .await
        .expect("granted at once");
    let fast_hops = hops.take();
    fast.end().await.unwrap();

    let txn = begin_transaction(node, Options::default()).await.unwrap();
    // Setting its options starts the agent: every call goes through it from then on.
    txn.set_options(Options::default()).await.unwrap();
    hops.take();
    txn.lock(lock_id!["path", "agent"], Mode::WRITE)
        .await
        .expect("granted");
    let agent_hops = hops.take();
    txn.end().await.unwrap();
    (fast_hops, agent_hops)
}
