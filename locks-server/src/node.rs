//! The `Node`: the actix system a process runs, its lock server and its router.
//!
//! A node runs its actors on one thread of its own (an actix `System` with a current-thread
//! runtime), so a [`Node`] handle (`Clone + Send + Sync`) can be used from any tokio runtime or
//! plain thread. Client code that wants the shortest lock round trips runs on that thread with
//! [`Node::spawn`]: a message between actors of one thread costs well under a microsecond,
//! while every hop between threads wakes a sleeping core (10-50 µs on a small VM).
//!
//! Life cycle: [`Node::start`] starts the thread and the lock server; [`Node::shutdown`] stops
//! the system (every agent and the server stop with it) and waits for the thread; dropping the
//! last handle does the same.

use crate::error::Error;
use crate::router::Router;
use crate::server::{LockServer, Snapshot};
use crate::table::TableSnapshot;
use actix::prelude::*;
use futures::channel::oneshot;
use locks_core::{AgentId, ModeTable, NodeId};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::{debug, info};

/// How a node is set up. `NodeConfig::new(name)` is a local-only node with the standard modes.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    name: String,
    modes: ModeTable,
}

impl NodeConfig {
    /// A local-only node named `name` (checked by [`Node::start`]), with the standard modes.
    pub fn new(name: impl Into<String>) -> NodeConfig {
        NodeConfig {
            name: name.into(),
            modes: ModeTable::standard(),
        }
    }

    /// Installs a custom mode table (every node of a cluster must use the same one).
    pub fn mode_table(mut self, modes: ModeTable) -> NodeConfig {
        self.modes = modes;
        self
    }

    /// The node's name as configured.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A running node. Cheap to clone; the node stops when the last clone is dropped or on
/// [`Node::shutdown`].
#[derive(Clone)]
pub struct Node {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    id: NodeId,
    incarnation: u64,
    modes: ModeTable,
    router: Arc<Router>,
    arbiter: ArbiterHandle,
    system: System,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
    stopped: futures::future::Shared<oneshot::Receiver<()>>,
    next_serial: AtomicU64,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.inner.id)
            .field("incarnation", &self.inner.incarnation)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Starts a node: its thread, its actix system and its lock server.
    pub async fn start(config: NodeConfig) -> Result<Node, Error> {
        let id = NodeId::new(&config.name)?;
        let incarnation = incarnation_now();
        let router = Arc::new(Router::new(id.clone()));
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stopped_tx, stopped_rx) = oneshot::channel::<()>();
        let thread_router = router.clone();
        let modes = config.modes.clone();
        let thread = std::thread::Builder::new()
            .name(format!("locks-node-{id}"))
            .spawn(move || {
                let runner = System::new();
                runner.block_on(async move {
                    let server =
                        LockServer::new(thread_router.clone(), modes, version_base(incarnation));
                    thread_router.set_server(server.start());
                    let _ = ready_tx.send((System::current(), Arbiter::current()));
                });
                let _ = runner.run();
                let _ = stopped_tx.send(());
            })
            .map_err(Error::Start)?;
        let thread_id = thread.thread().id();
        let (system, arbiter) = ready_rx.await.map_err(|_| Error::Stopped)?;
        info!(node = %id, incarnation, "node started");
        Ok(Node {
            inner: Arc::new(NodeInner {
                id,
                incarnation,
                modes: config.modes,
                router,
                arbiter,
                system,
                thread: Mutex::new(Some(thread)),
                thread_id,
                stopped: futures::FutureExt::shared(stopped_rx),
                next_serial: AtomicU64::new(1),
            }),
        })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        self.inner.id.as_str()
    }

    /// The node's id.
    pub fn id(&self) -> &NodeId {
        &self.inner.id
    }

    /// The node's incarnation: its start time in microseconds since the epoch. Agent ids and
    /// lock versions include it, so they keep growing across a restart.
    pub fn incarnation(&self) -> u64 {
        self.inner.incarnation
    }

    /// The mode table of this node's lock server.
    pub fn modes(&self) -> &ModeTable {
        &self.inner.modes
    }

    /// The router of this node (for agents and the cluster layer).
    pub fn router(&self) -> &Arc<Router> {
        &self.inner.router
    }

    /// The arbiter (thread) the node's actors run on.
    pub fn arbiter(&self) -> &ArbiterHandle {
        &self.inner.arbiter
    }

    /// The nodes this node can reach: itself and its connected peers, sorted.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes = self.inner.router.remote_nodes();
        nodes.push(self.inner.id.clone());
        nodes.sort();
        nodes
    }

    /// A fresh agent id: later calls give larger ids.
    pub fn next_agent_id(&self) -> AgentId {
        let serial = self.inner.next_serial.fetch_add(1, Ordering::Relaxed);
        AgentId::new(self.inner.id.clone(), self.inner.incarnation, serial)
    }

    /// Whether the calling thread is the node's own thread.
    pub fn is_node_thread(&self) -> bool {
        std::thread::current().id() == self.inner.thread_id
    }

    /// Runs `future` on the node's own thread and returns its output.
    ///
    /// Client code run this way talks to its agents without leaving the thread, which is the
    /// fastest way to use locks (a lock round trip is a few same-thread actor messages). Code
    /// on any other runtime or thread works the same, but every call crosses threads. Long
    /// blocking work must not run here: it would stall every agent of the node.
    pub fn spawn<F>(
        &self,
        future: F,
    ) -> impl Future<Output = Result<F::Output, Error>> + Send + 'static
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let spawned = self.inner.arbiter.spawn(async move {
            let _ = tx.send(future.await);
        });
        async move {
            if !spawned {
                return Err(Error::Stopped);
            }
            rx.await.map_err(|_| Error::Stopped)
        }
    }

    /// A copy of this node's lock table.
    pub async fn snapshot(&self) -> Result<TableSnapshot, Error> {
        let server = self.inner.router.server().ok_or(Error::Stopped)?.clone();
        server.send(Snapshot).await.map_err(|_| Error::Stopped)
    }

    /// Stops the node: every agent and the lock server stop, and the node's thread ends.
    /// Calls made afterwards through this or any other handle fail with [`Error::Stopped`].
    pub async fn shutdown(&self) {
        info!(node = %self.inner.id, "node shutting down");
        self.inner.system.stop();
        if !self.is_node_thread() {
            let _ = self.inner.stopped.clone().await;
            self.inner.join();
        }
    }

    /// Whether the node's system is still running.
    pub fn is_running(&self) -> bool {
        self.inner.router.server().is_some_and(|s| s.connected())
    }
}

impl NodeInner {
    fn join(&self) {
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

impl Drop for NodeInner {
    fn drop(&mut self) {
        debug!(node = %self.id, "last node handle dropped; stopping");
        self.system.stop();
        // The last handle may be dropped on the node's own thread (by a spawned task); that
        // thread cannot join itself, and it ends on its own once the system stops.
        if std::thread::current().id() != self.thread_id {
            self.join();
        }
    }
}

fn incarnation_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX >> 11))
        .unwrap_or(1)
}

/// Versions of a node incarnation start at its start time in microseconds times 1024: a later
/// incarnation starts above every version the earlier one could have handed out, unless that
/// one ran more than 1024 operations per microsecond.
fn version_base(incarnation: u64) -> u64 {
    incarnation.saturating_mul(1024)
}
