//! The `Node`: the actix system a process runs, its lock server and its router.
//!
//! A node runs its actors on one thread of its own (an actix `System` with a current-thread
//! runtime), so a [`Node`] handle (`Clone + Send + Sync`) can be used from any tokio runtime or
//! plain thread. Client code that wants the shortest lock round trips runs on that thread with
//! [`Node::spawn`]: a message between actors of one thread costs well under a microsecond,
//! while every hop between threads wakes a sleeping core (10-50 µs on a small VM).
//!
//! Life cycle: [`Node::start`] starts the thread, the lock server and, for a cluster node, the
//! cluster layer ([`crate::cluster`]: listener, dialers, links); [`Node::shutdown`] stops the
//! system (every agent, the server and every connection stop with it, so peers see this node
//! go down) and waits for the thread; dropping the last handle does the same.

use crate::agent_ids::AgentIds;
use crate::cluster::{Cluster, HandshakeRefusals, LinkInfo, NodeEvents};
pub use crate::config::NodeConfig;
use crate::data_dir::{DataDir, VersionReserve};
use crate::error::Error;
use crate::introspect::{self, ClusterQuery, ClusterView};
use crate::local::LocalTable;
use crate::router::Presence;
use crate::router::{FreshAgent, Port, Router};
use crate::server::{LockServer, Snapshot, Watchers};
use crate::table::{LockTable, TableSnapshot};
use actix::prelude::*;
use futures::channel::oneshot;
use locks_core::{AgentId, LockId, ModeTable, NodeId};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing::{debug, info};

mod blocking;
#[cfg(test)]
mod tests;

/// A running node. Cheap to clone; the node stops when the last clone is dropped or on
/// [`Node::shutdown`].
#[derive(Clone)]
pub struct Node {
    inner: Arc<NodeInner>,
}

/// Aligned so that the handle's reference count, which every transaction's handle bumps, has a
/// cache line of its own: the fields every transaction reads are not on it (two threads doing
/// uncontended transactions would otherwise miss on them each time the other one counts).
#[repr(align(128))]
struct NodeInner {
    id: NodeId,
    incarnation: u64,
    modes: ModeTable,
    router: Arc<Router>,
    /// What agents and members of this node get of the router.
    port: Port,
    /// The node's lock table, shared by the lock server actor and the fast path.
    table: Arc<LocalTable>,
    /// The lock server actor (snapshots and watchers go through its mailbox, behind the
    /// requests sent before them).
    server: Addr<LockServer>,
    arbiter: ArbiterHandle,
    system: System,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
    stopped: futures::future::Shared<oneshot::Receiver<()>>,
    agent_ids: AgentIds,
    cluster: Option<Arc<Cluster>>,
    /// The largest frame the node's links carry (introspection answers must fit it).
    max_frame: usize,
    data_dir: Option<DataDir>,
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
    /// Starts a node: its thread, its actix system and its lock server; for a cluster node also
    /// its listener and its dialers (peers are dialed in the background: watch
    /// [`Node::subscribe_nodes`] or use [`Node::connect`] to wait for one).
    ///
    /// Fails on an invalid name, a cluster configuration without a cookie, TLS settings whose
    /// certificate does not carry the node's name (unless node names are not bound), or a
    /// listen address that cannot be bound.
    pub async fn start(config: NodeConfig) -> Result<Node, Error> {
        let id = NodeId::new(config.name())?;
        config.cluster().validate()?;
        if let Some(tls) = &config.cluster().tls {
            tls.check_own_name(config.name())
                .map_err(crate::ConfigError::from)?;
        }
        let (incarnation, base, reserve, data_dir) = match config.data_dir_path() {
            Some(path) => {
                let dir = DataDir::open(path, config.name())?;
                let kept = dir.clone();
                let claim = dir.claim(incarnation_now())?;
                let (i, b, r) = (claim.incarnation, claim.version_base, claim.reserve);
                (i, b, r, Some(kept))
            }
            None => {
                let i = incarnation_now();
                (i, version_base(i), VersionReserve::none(), None)
            }
        };
        let router = Arc::new(Router::new(id.clone()));
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stopped_tx, stopped_rx) = oneshot::channel::<()>();
        let thread_router = router.clone();
        let modes = config.modes().clone();
        let cluster_config = config
            .cluster()
            .cookie
            .is_some()
            .then(|| config.cluster().clone());
        let thread_id_for_start = id.clone();
        // Only a clustered node has remote holders to wait for.
        let delays = match (&cluster_config, config.cluster().leases()) {
            (Some(_), Ok(leases)) => (leases.lock_delay, leases.start_delay),
            _ => (Duration::ZERO, Duration::ZERO),
        };
        let table = Arc::new(
            LocalTable::new(
                router.clone(),
                || LockTable::new(id.clone(), modes.clone(), base),
                !delays.1.is_zero(),
            )
            .with_reserve(reserve)
            .with_quotas(config.cluster().peer_quotas),
        );
        let max_frame = config.cluster().max_frame.clamp(
            crate::net::frame::HANDSHAKE_MAX_FRAME,
            locks_core::codec::HARD_MAX_FRAME,
        );
        router.set_table(Arc::downgrade(&table), max_frame);
        let thread_table = table.clone();
        let sampled = (table.clone(), router.clone());
        let thread = std::thread::Builder::new()
            .name(format!("locks-node-{id}"))
            .spawn(move || {
                let runner = System::new();
                let started = runner.block_on(async move {
                    actix::spawn(sample_metrics(sampled.0, sampled.1));
                    let server = LockServer::new(thread_table).with_delays(delays.0, delays.1);
                    let server = server.start();
                    thread_router
                        .set_server(server.clone().recipient(), server.clone().recipient());
                    let cluster = match cluster_config {
                        Some(config) => {
                            let listen = config.listen;
                            match Cluster::start(thread_id_for_start, config, thread_router).await {
                                Ok(cluster) => Some(cluster),
                                Err(error) => {
                                    let addr = listen.unwrap_or(SocketAddr::from(([0; 4], 0)));
                                    let _ = ready_tx.send(Err(Error::Listen { addr, error }));
                                    return false;
                                }
                            }
                        }
                        None => None,
                    };
                    let _ =
                        ready_tx.send(Ok((System::current(), Arbiter::current(), cluster, server)));
                    true
                });
                if started {
                    let _ = runner.run();
                }
                let _ = stopped_tx.send(());
            })
            .map_err(Error::Start)?;
        let thread_id = thread.thread().id();
        let (system, arbiter, cluster, server) = match ready_rx.await {
            Ok(Ok(ready)) => ready,
            Ok(Err(error)) => {
                let _ = thread.join();
                return Err(error);
            }
            Err(_) => return Err(Error::Stopped),
        };
        info!(node = %id, incarnation, addr = ?cluster.as_ref().and_then(|c| c.local_addr()), "node started");
        Ok(Node {
            inner: Arc::new(NodeInner {
                agent_ids: AgentIds::new(id.clone(), incarnation, router.agents().clone()),
                id,
                incarnation,
                modes: config.modes().clone(),
                port: Port::new(router.clone()),
                router,
                table,
                server,
                arbiter,
                system,
                thread: Mutex::new(Some(thread)),
                thread_id,
                stopped: futures::FutureExt::shared(stopped_rx),
                cluster,
                max_frame,
                data_dir,
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

    /// The node's incarnation: its start time in microseconds since the epoch, or with a data
    /// directory above every earlier incarnation's if the clock is behind. Agent ids and lock
    /// versions include it, so they keep growing across a restart.
    pub fn incarnation(&self) -> u64 {
        self.inner.incarnation
    }

    /// The node's data directory, if it has one ([`NodeConfig::data_dir`]).
    pub fn data_dir(&self) -> Option<&DataDir> {
        self.inner.data_dir.as_ref()
    }

    /// The mode table of this node's lock server.
    pub fn modes(&self) -> &ModeTable {
        &self.inner.modes
    }

    /// The nodes this node can reach: itself and its connected peers, sorted.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes = self.inner.router.remote_nodes();
        nodes.push(self.inner.id.clone());
        nodes.sort();
        nodes
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

    /// Runs `make()` on the node's thread and the future it returns there (it need not be
    /// `Send`); resolves to its output.
    fn on_node_thread<F, Fut>(
        &self,
        make: F,
    ) -> impl Future<Output = Result<Fut::Output, Error>> + Send + 'static
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let spawned = self.inner.arbiter.spawn_fn(move || {
            actix::spawn(async move {
                let _ = tx.send(make().await);
            });
        });
        async move {
            if !spawned {
                return Err(Error::Stopped);
            }
            rx.await.map_err(|_| Error::Stopped)
        }
    }

    fn cluster(&self) -> Result<&Arc<Cluster>, Error> {
        self.inner.cluster.as_ref().ok_or(Error::NotClustered)
    }

    /// The address this node accepts peers on (with the real port when configured with port
    /// 0); `None` when it does not listen.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.cluster.as_ref().and_then(|c| c.local_addr())
    }

    /// Connects to the node at `addr` and returns its name once the connection is up (at once
    /// if it already is). A node kept apart by [`Node::disconnect`] is let back in. From then
    /// on the address is dialed again whenever that node is lost, like a configured peer.
    pub async fn connect(&self, addr: SocketAddr) -> Result<NodeId, Error> {
        let cluster = self.cluster()?.clone();
        Ok(self.on_node_thread(move || cluster.connect(addr)).await??)
    }

    /// Closes the connection to the node `name` and keeps it apart: no connection with it is
    /// made or accepted until [`Node::reconnect`] or [`Node::connect`] (for tests of
    /// partitions). Returns once this node has handled the node down (its agents are told and
    /// its lock server released that node's agents' locks); the peer sees the connection end
    /// and does the same on its side. Returns whether the node was connected.
    pub async fn disconnect(&self, name: &str) -> Result<bool, Error> {
        let cluster = self.cluster()?.clone();
        let peer = NodeId::new(name)?;
        self.on_node_thread(move || cluster.disconnect(peer)).await
    }

    /// Lets the node `name`, kept apart by [`Node::disconnect`], connect again: addresses of it
    /// that this node dials are dialed at once; otherwise it connects when it next dials here.
    pub async fn reconnect(&self, name: &str) -> Result<(), Error> {
        let cluster = self.cluster()?.clone();
        let peer = NodeId::new(name)?;
        self.on_node_thread(move || async move { cluster.reconnect(&peer) })
            .await
    }

    /// Node up and down events: first an `Up` for every node connected now, then every change
    /// (see [`NodeEvents`]). On a local-only node the stream ends at once.
    pub fn subscribe_nodes(&self) -> NodeEvents {
        match &self.inner.cluster {
            Some(cluster) => cluster.subscribe(),
            None => NodeEvents::closed(),
        }
    }

    /// How many handshakes of this node failed, by cause (see [`HandshakeRefusals`]); the
    /// receiver sees every later change. On a local-only node nothing ever changes.
    pub fn handshake_refusals(&self) -> tokio::sync::watch::Receiver<HandshakeRefusals> {
        match &self.inner.cluster {
            Some(cluster) => cluster.refusals(),
            None => tokio::sync::watch::Sender::new(HandshakeRefusals::default()).subscribe(),
        }
    }

    /// The connections to peers, by peer name.
    pub fn links(&self) -> Vec<LinkInfo> {
        self.inner
            .cluster
            .as_ref()
            .map(|c| c.links())
            .unwrap_or_default()
    }

    /// A copy of this node's lock table, taken after every request sent to the node's lock
    /// server before it, a slice at a time so that a large table does not keep the node's
    /// thread from its other work (see `crate::local`): each lock is as it was at one instant,
    /// each is listed once, and a table that nothing changes meanwhile gives exactly its
    /// picture at one instant. A lock that changes during the copy may show its state before
    /// or after the change, and one taken or released meanwhile may be missing.
    pub async fn snapshot(&self) -> Result<TableSnapshot, Error> {
        self.inner
            .server
            .send(Snapshot)
            .await
            .map_err(|_| Error::Stopped)
    }

    /// The lock tables of this node and of every connected peer, each asked over its link and
    /// answered from the peer's table (no agent is involved), and the peers that did not
    /// answer within `query.timeout` ([`ClusterView::missing`]). Each node lists at most
    /// `query.max_locks_per_node` locks (see [`ClusterQuery`] and [`crate::introspect`] for
    /// the bounds). [`ClusterView::wait_for_graph`] turns the view into the cluster's wait-for
    /// graph.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locks_server::Error> {
    /// use locks_server::{ClusterQuery, Node, NodeConfig};
    ///
    /// let node = Node::start(NodeConfig::new("a")).await?;
    /// let view = node.cluster_view(ClusterQuery::default()).await?;
    /// // A node without peers sees its own table only.
    /// assert_eq!(view.nodes.len(), 1);
    /// assert!(view.missing.is_empty());
    /// let graph = view.wait_for_graph(node.modes());
    /// assert!(graph.edges.is_empty());
    /// println!("{}", graph.to_dot());
    /// node.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cluster_view(&self, query: ClusterQuery) -> Result<ClusterView, Error> {
        let router = self.inner.router.clone();
        let table = self.inner.table.clone();
        let max_frame = self.inner.max_frame;
        // On the node's thread: the wait needs a tokio timer, and the caller may have none.
        self.on_node_thread(move || async move {
            introspect::cluster_view(
                router.introspection(),
                router.node(),
                router.remote_nodes(),
                |peer, envelope| router.send_node(peer, envelope),
                table,
                max_frame,
                query,
            )
            .await
        })
        .await
    }

    /// The agents watching `lock` on this node's lock server, in id order: the local answer
    /// to the Erlang original's `watchers/1`. Cheaper than a [`Node::snapshot`], which copies
    /// the whole table.
    pub async fn watchers(&self, lock: LockId) -> Result<Vec<AgentId>, Error> {
        self.inner
            .server
            .send(Watchers(lock))
            .await
            .map_err(|_| Error::Stopped)
    }

    /// Stops the node: every agent and the lock server stop, and the node's thread ends.
    /// Calls made afterwards through this or any other handle fail with [`Error::Stopped`].
    ///
    /// A cluster node first leaves cleanly (the cluster layer's `leave`): its peers are told to release
    /// its agents' locks and its connections are closed after what is queued, so the peers
    /// give those locks to others at once instead of after the lock-delay of a crash. This
    /// holds from any thread, the node's own included (a task of [`Node::spawn`]); a node
    /// that is dropped without `shutdown` stops at once, as a crash would.
    pub async fn shutdown(&self) {
        info!(node = %self.inner.id, "node shutting down");
        if let Some(cluster) = self.inner.cluster.clone() {
            if self.is_node_thread() {
                // The leave runs here: its connections' drivers are tasks of this thread,
                // and progress while it waits.
                cluster.leave().await;
            } else {
                let _ = self.on_node_thread(move || cluster.leave()).await;
            }
        }
        self.inner.stop();
        if !self.is_node_thread() {
            let _ = self.inner.stopped.clone().await;
            self.inner.join();
        }
    }

    /// Whether the node's system is still running.
    pub fn is_running(&self) -> bool {
        self.inner.server.connected()
    }
}

impl NodeInner {
    /// Stops the system; subscriptions to node events end.
    fn stop(&self) {
        self.system.stop();
        if let Some(cluster) = &self.cluster {
            cluster.stopped();
        }
    }

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
        self.stop();
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

/// Without a data directory, versions of a node incarnation start at its start time in
/// microseconds times 1024: a later incarnation starts above every version the earlier one
/// could have handed out, unless that one ran more than 1024 operations per microsecond or the
/// clock went back. (Peers refuse versions beyond their own clock's bound: `node_core/peer_check.rs`.)
fn version_base(incarnation: u64) -> u64 {
    incarnation.saturating_mul(crate::node_core::peer_check::VERSIONS_PER_MICROSECOND)
}

/// What a shell needs of a [`Node`] to run actors on it (agents, group members): its router's
/// [`Port`], its thread and fresh agent ids (in [`crate::embed`]). Nothing here lets a caller
/// act as a peer, tell the node a node went down, or take over a mailbox it was not given (see
/// the `embed` module's compile-fail tests).
pub trait NodeInternals {
    /// What agents and members of this node get of its router.
    fn router(&self) -> &Port;
    /// The arbiter (thread) the node's actors run on.
    fn arbiter(&self) -> &ArbiterHandle;
    /// A fresh agent id, for an agent that registers its mailbox with the router itself
    /// ([`Port::register_agent`]): on one thread, later calls give larger ids (see
    /// `crate::agent_ids`).
    fn next_agent_id(&self) -> FreshAgent;
    /// A fresh agent id for a transaction that begins now: live for the router, which makes
    /// its mailbox when the first message for it comes, until [`Port::end_transaction`] with
    /// the returned presence. Ids of both kinds grow together on one thread.
    fn begin_agent(&self) -> Presence;
    /// The node's lock table, for the fast path of the transactions of this node (see
    /// `crate::local`).
    fn local_table(&self) -> &Arc<LocalTable>;
}

impl NodeInternals for Node {
    fn router(&self) -> &Port {
        &self.inner.port
    }

    fn arbiter(&self) -> &ArbiterHandle {
        &self.inner.arbiter
    }

    fn next_agent_id(&self) -> FreshAgent {
        FreshAgent::new(self.inner.agent_ids.next())
    }

    fn begin_agent(&self) -> Presence {
        self.inner.agent_ids.begin()
    }

    fn local_table(&self) -> &Arc<LocalTable> {
        &self.inner.table
    }
}

/// Samples the gauges of the node of `router` every
/// [`SAMPLE_INTERVAL`](crate::metrics::SAMPLE_INTERVAL), until the node's system stops (runs on
/// the node's thread). The table is counted a slice at a time (`table::census`), so neither the
/// fast path nor the node's actors wait for a whole count. Here, where the table and the router
/// meet, so that the metric handles need neither.
async fn sample_metrics(table: Arc<LocalTable>, router: Arc<Router>) {
    let mut tick = tokio::time::interval(crate::metrics::SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let mut census = crate::table::Census::default();
        let mut from = Some((0, 0));
        while let Some(start) = from {
            from = table.census_slice(&mut census, start);
            // The node's actors run on this thread too.
            tokio::task::yield_now().await;
        }
        router
            .metrics()
            .set_sampled(&census, router.remote_nodes().len());
    }
}
