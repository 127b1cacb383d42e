//! How a node is set up: [`NodeConfig`], built in code or loaded from a TOML file.
//!
//! A node with none of `listen`, `peer` or `cookie` is local-only: it never opens a socket.
//! Setting any of them makes it a cluster node, and a cluster node needs the cluster cookie
//! ([`Node::start`](crate::Node::start) refuses to start without one, with
//! [`ConfigError::MissingCookie`]).
//!
//! The TOML form is documented on [`NodeConfig`].
//!
//! TLS between nodes is optional ([`NodeConfig::tls`], or a `[tls]` table in the file; see
//! [`crate::tls`]). The certificate, key and CA are read and checked when the
//! configuration is built, so a bad PEM file or a key that does not match its certificate is a
//! [`ConfigError::Tls`] before the node starts, never a failure at the first connection.
//!
//! The lease, lock-delay and start-delay are explained in [`crate::lease`]: in short, after a
//! holder's node crashes or is cut off its locks are unavailable for about lease + lock-delay,
//! and a node that starts grants nothing for the start-delay.

use crate::lease::{LeaseConfig, LeaseError, Leases};
use crate::net::{Cookie, HeartbeatConfig, TlsConfig, TlsConfigError};
use crate::node_core::quota::PeerQuotas;
use locks_core::ModeTable;
use locks_core::codec::DEFAULT_MAX_FRAME;
use serde::Deserialize;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The TOML text is not valid, or has unknown or mistyped keys.
    #[error("invalid node configuration: {0}")]
    Toml(#[from] toml::de::Error),
    /// An address could not be parsed or resolved.
    #[error(
        "invalid address {}: {error}",
        locks_core::escape::Escaped::bounded(address, 128)
    )]
    Address {
        /// The address as written.
        address: String,
        /// Why it was not resolved.
        error: std::io::Error,
    },
    /// A host name resolved to no address.
    #[error(
        "invalid address {}: the name resolves to no address",
        locks_core::escape::Escaped::bounded(address, 128)
    )]
    NoAddress {
        /// The address as written.
        address: String,
    },
    /// Both `cookie` and `cookie_file` were given.
    #[error("give either `cookie` or `cookie_file`, not both")]
    TwoCookies,
    /// The node listens or has peers, but no cookie was configured.
    #[error("a cluster node needs a cookie (NodeConfig::cookie, or `cookie` in the file)")]
    MissingCookie,
    /// The cookie is empty.
    #[error("the cluster cookie is empty")]
    EmptyCookie,
    /// The lease, lock-delay and heartbeat settings do not fit together.
    #[error("invalid lease settings: {0}")]
    Lease(#[from] LeaseError),
    /// The TLS settings could not be loaded (a file, the PEM, a key that does not match).
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
}

/// The cluster settings of a node (see [`NodeConfig`] for the builders).
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Where to accept peers, if anywhere (port 0 picks a free port; see
    /// [`Node::local_addr`](crate::Node::local_addr)).
    pub listen: Option<SocketAddr>,
    /// Peers to dial at start, and to dial again whenever they are lost.
    pub peers: Vec<SocketAddr>,
    /// The cluster cookie.
    pub cookie: Option<Cookie>,
    /// When to ping a silent peer and when to declare it down (default: ping after 500 ms of
    /// silence, down after 2 s).
    pub heartbeat: HeartbeatConfig,
    /// How long a TCP connect may take (default 5 s).
    pub connect_timeout: Duration,
    /// How long a handshake may take (default 5 s).
    pub handshake_timeout: Duration,
    /// The first wait before dialing a lost peer again; it doubles on every failure up to
    /// `reconnect_max` (defaults 100 ms and 1 s).
    pub reconnect_min: Duration,
    /// The longest wait between two dials of a lost peer.
    pub reconnect_max: Duration,
    /// The largest frame sent or accepted after the handshake, in bytes (default 4 MiB).
    pub max_frame: usize,
    /// The lease, lock-delay and start-delay (see [`crate::lease`]; defaults derived from the
    /// heartbeat timeout).
    pub lease: LeaseConfig,
    /// Mutual TLS with every peer (default `None`: clear text, and a warning at start).
    pub tls: Option<TlsConfig>,
    /// How much of this node's lock table the agents of one peer node may take (see
    /// [`PeerQuotas`]; defaults far above what programs take).
    pub peer_quotas: PeerQuotas,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            listen: None,
            peers: Vec::new(),
            cookie: None,
            heartbeat: HeartbeatConfig::default(),
            connect_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(1),
            max_frame: DEFAULT_MAX_FRAME,
            lease: LeaseConfig::default(),
            tls: None,
            peer_quotas: PeerQuotas::default(),
        }
    }
}

impl ClusterConfig {
    /// Whether any cluster setting was made (a listener, a peer or a cookie).
    pub fn is_clustered(&self) -> bool {
        self.listen.is_some() || !self.peers.is_empty() || self.cookie.is_some()
    }

    /// Checks the settings: a clustered configuration needs a non-empty cookie, and lease
    /// settings that fit the heartbeat (see [`LeaseConfig::resolve`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match &self.cookie {
            None if self.is_clustered() => Err(ConfigError::MissingCookie),
            Some(cookie) if cookie.is_empty() => Err(ConfigError::EmptyCookie),
            _ => {
                self.leases()?;
                Ok(())
            }
        }
    }

    /// The lease settings in force, with the defaults filled in.
    pub fn leases(&self) -> Result<Leases, LeaseError> {
        self.lease.resolve(&self.heartbeat)
    }
}

/// How a node is set up. `NodeConfig::new(name)` is a local-only node with the standard modes;
/// `.listen(addr)`, `.peer(addr)` and `.cookie(secret)` make it a cluster node.
///
/// ```
/// use locks_server::NodeConfig;
/// use std::time::Duration;
/// let config = NodeConfig::new("a")
///     .listen("127.0.0.1:0".parse().unwrap())
///     .peer("127.0.0.1:7002".parse().unwrap())
///     .cookie("change-me")
///     .heartbeat(Duration::from_millis(200), Duration::from_secs(1));
/// assert!(config.cluster().is_clustered());
/// ```
///
/// The TOML form has the same settings (unknown keys are refused, so a typo is an error):
///
/// ```toml
/// name = "a"
/// listen = "127.0.0.1:7001"                     # optional: accept peers here
/// peers = ["127.0.0.1:7002", "127.0.0.1:7003"]  # optional: dial these, and again when lost
/// cookie = "change-me"                          # or: cookie_file = "/path/to/cookie"
/// heartbeat_interval_ms = 500                   # optional, defaults shown
/// heartbeat_timeout_ms = 2000
/// connect_timeout_ms = 5000
/// handshake_timeout_ms = 5000
/// reconnect_min_ms = 100
/// reconnect_max_ms = 1000
/// max_frame = 4194304
/// lease_ms = 1500                               # default: 3/4 of the heartbeat timeout
/// lock_delay_ms = 2000                          # default: the heartbeat timeout
/// start_delay_ms = 2000                         # default: the lock-delay
///
/// [tls]                                         # optional: mutual TLS with every peer
/// cert = "a.pem"          # this node's certificate chain (PEM), relative to the file
/// key = "a.key"           # its private key (PEM: PKCS#8, PKCS#1 or SEC1)
/// ca = "ca.pem"           # the CA every peer's certificate must chain to
/// server_name = "locks"   # optional: the DNS name every node certificate carries
/// node_names = true       # optional (default true): a peer's certificate must carry its node name
///
/// [peer_quotas]                                 # optional: what one peer's agents may take here
/// locks = 65536           # entries on lock ids (a lock and each ancestor count once per agent)
/// queued = 16384          # of those, entries waiting or converting
/// bytes = 33554432        # bytes of the entries' lock ids (32 MiB)
/// ```
///
/// A `data_dir = "/var/lib/locks/a"` line (relative to the file) keeps the node's data
/// directory there ([`NodeConfig::data_dir`]).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    name: String,
    modes: ModeTable,
    cluster: ClusterConfig,
    data_dir: Option<PathBuf>,
}

impl NodeConfig {
    /// A local-only node named `name` (checked by [`Node::start`](crate::Node::start)), with the
    /// standard modes.
    pub fn new(name: impl Into<String>) -> NodeConfig {
        NodeConfig {
            name: name.into(),
            modes: ModeTable::standard(),
            cluster: ClusterConfig::default(),
            data_dir: None,
        }
    }

    /// Keeps the node's data directory at `path` (created if missing; see
    /// [`crate::data_dir`]): a restarted node's lock versions (fencing versions), agent ids and
    /// its leader members' terms then start above every one an earlier run handed out,
    /// whatever the clock says. Without one (the default of an in-process node) they derive
    /// from the start time, so a restart with the clock behind hands out lower ones.
    pub fn data_dir(mut self, path: impl Into<PathBuf>) -> NodeConfig {
        self.data_dir = Some(path.into());
        self
    }

    /// No data directory (the default): versions, agent ids and terms derive from the clock.
    pub fn without_data_dir(mut self) -> NodeConfig {
        self.data_dir = None;
        self
    }

    /// The data directory, if one is configured.
    pub fn data_dir_path(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    /// Installs a custom mode table (every node of a cluster must use the same one).
    pub fn mode_table(mut self, modes: ModeTable) -> NodeConfig {
        self.modes = modes;
        self
    }

    /// Accepts peers on `addr` (port 0 picks a free port).
    pub fn listen(mut self, addr: SocketAddr) -> NodeConfig {
        self.cluster.listen = Some(addr);
        self
    }

    /// Dials the node at `addr` at start, and again whenever it is lost. Repeatable.
    pub fn peer(mut self, addr: SocketAddr) -> NodeConfig {
        if !self.cluster.peers.contains(&addr) {
            self.cluster.peers.push(addr);
        }
        self
    }

    /// The cluster cookie: only nodes that know it connect to each other.
    pub fn cookie(mut self, secret: impl Into<Cookie>) -> NodeConfig {
        self.cluster.cookie = Some(secret.into());
        self
    }

    /// Pings a peer silent for `interval`; declares it down after `timeout` of silence.
    pub fn heartbeat(mut self, interval: Duration, timeout: Duration) -> NodeConfig {
        self.cluster.heartbeat = HeartbeatConfig {
            interval,
            timeout,
            ..HeartbeatConfig::default()
        };
        self
    }

    /// How long after the send time of its latest answered ping a link's lease stays valid
    /// (see [`crate::lease`]). Default: three quarters of the heartbeat timeout.
    pub fn lease(mut self, lease: Duration) -> NodeConfig {
        self.cluster.lease.lease = Some(lease);
        self
    }

    /// How long a downed peer's agents' locks stay held by nobody before they are released.
    /// At least the lease plus 1 %. Default: the heartbeat timeout.
    pub fn lock_delay(mut self, delay: Duration) -> NodeConfig {
        self.cluster.lease.lock_delay = Some(delay);
        self
    }

    /// How long a clustered node grants nothing after it starts (default: the lock-delay).
    /// Zero is unsafe if the node may restart within a lease of crashing: its previous
    /// incarnation's grants may still be believed.
    pub fn start_delay(mut self, delay: Duration) -> NodeConfig {
        self.cluster.lease.start_delay = Some(delay);
        self
    }

    /// How long a TCP connect to a peer may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> NodeConfig {
        self.cluster.connect_timeout = timeout;
        self
    }

    /// How long a handshake may take.
    pub fn handshake_timeout(mut self, timeout: Duration) -> NodeConfig {
        self.cluster.handshake_timeout = timeout;
        self
    }

    /// The waits between dials of a lost peer: `min` first, doubling up to `max`.
    pub fn reconnect_backoff(mut self, min: Duration, max: Duration) -> NodeConfig {
        self.cluster.reconnect_min = min;
        self.cluster.reconnect_max = max.max(min);
        self
    }

    /// The largest frame sent or accepted after the handshake, in bytes.
    pub fn max_frame(mut self, bytes: usize) -> NodeConfig {
        self.cluster.max_frame = bytes;
        self
    }

    /// Mutual TLS with every peer (see [`crate::tls`]); every node of the cluster needs
    /// TLS settings with the same CA. Build them with [`TlsConfig::from_pem_files`] or, in
    /// memory, [`TlsConfig::from_pem`].
    pub fn tls(mut self, tls: TlsConfig) -> NodeConfig {
        self.cluster.tls = Some(tls);
        self
    }

    /// Limits what the agents of one peer node may take of this node's lock table: a `Lock`
    /// request of theirs that would pass a limit is refused with
    /// [`Rejection::QuotaExceeded`](locks_core::proto::Rejection::QuotaExceeded), which their
    /// transaction's call returns. The node's own transactions are not limited. See
    /// [`PeerQuotas`] for what counts and the defaults.
    pub fn peer_quotas(mut self, quotas: PeerQuotas) -> NodeConfig {
        self.cluster.peer_quotas = quotas;
        self
    }

    /// The node's name as configured.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The mode table.
    pub fn modes(&self) -> &ModeTable {
        &self.modes
    }

    /// The cluster settings.
    pub fn cluster(&self) -> &ClusterConfig {
        &self.cluster
    }

    /// Reads a configuration from TOML text (the format is in the [`NodeConfig`] docs).
    /// Relative `cookie_file` and `[tls]` paths are taken from the current directory.
    pub fn from_toml_str(text: &str) -> Result<NodeConfig, ConfigError> {
        NodeConfig::from_toml(text, None)
    }

    /// Reads a configuration from a TOML file. A relative `cookie_file` or `[tls]` path is
    /// taken from the file's directory.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<NodeConfig, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        NodeConfig::from_toml(&text, path.parent())
    }

    fn from_toml(text: &str, base: Option<&Path>) -> Result<NodeConfig, ConfigError> {
        let file: FileConfig = toml::from_str(text)?;
        let relative = |path: PathBuf| match base {
            Some(base) if path.is_relative() => base.join(path),
            _ => path,
        };
        let mut config = NodeConfig::new(file.name);
        if let Some(listen) = file.listen {
            config = config.listen(resolve(&listen)?);
        }
        for peer in file.peers {
            config = config.peer(resolve(&peer)?);
        }
        match (file.cookie, file.cookie_file) {
            (Some(_), Some(_)) => return Err(ConfigError::TwoCookies),
            (Some(cookie), None) => config = config.cookie(cookie),
            (None, Some(path)) => {
                let path = relative(path);
                let secret = std::fs::read_to_string(&path)
                    .map_err(|error| ConfigError::Read { path, error })?;
                // A trailing newline from an editor is not part of the secret.
                config = config.cookie(secret.trim_end_matches(['\n', '\r']));
            }
            (None, None) => {}
        }
        let defaults = ClusterConfig::default();
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        let heartbeat = HeartbeatConfig {
            interval: ms(file.heartbeat_interval_ms, defaults.heartbeat.interval),
            timeout: ms(file.heartbeat_timeout_ms, defaults.heartbeat.timeout),
            ..HeartbeatConfig::default()
        };
        config.cluster.lease = LeaseConfig {
            lease: file.lease_ms.map(Duration::from_millis),
            lock_delay: file.lock_delay_ms.map(Duration::from_millis),
            start_delay: file.start_delay_ms.map(Duration::from_millis),
        };
        config = config
            .heartbeat(heartbeat.interval, heartbeat.timeout)
            .connect_timeout(ms(file.connect_timeout_ms, defaults.connect_timeout))
            .handshake_timeout(ms(file.handshake_timeout_ms, defaults.handshake_timeout))
            .reconnect_backoff(
                ms(file.reconnect_min_ms, defaults.reconnect_min),
                ms(file.reconnect_max_ms, defaults.reconnect_max),
            )
            .max_frame(file.max_frame.unwrap_or(defaults.max_frame));
        if let Some(tls) = file.tls {
            let mut settings =
                TlsConfig::from_pem_files(relative(tls.cert), relative(tls.key), relative(tls.ca))?;
            if let Some(name) = tls.server_name {
                settings = settings.with_server_name(&name)?;
            }
            if tls.node_names == Some(false) {
                settings = settings.without_node_names();
            }
            config = config.tls(settings);
        }
        if let Some(dir) = file.data_dir {
            config = config.data_dir(relative(dir));
        }
        if let Some(quotas) = file.peer_quotas {
            config = config.peer_quotas(quotas);
        }
        config.cluster.validate()?;
        Ok(config)
    }
}

/// The TOML form of a [`NodeConfig`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    name: String,
    /// The `node` binary's metrics address (its `--metrics`); not a node setting, read by the
    /// binary itself and accepted here so that one file configures both.
    #[serde(default, rename = "metrics")]
    _metrics: Option<String>,
    /// The `node` binary's client API settings (`--client-listen`, `--client-token`,
    /// `--client-keepalive-ms`, `--client-tls-*`), read by the binary itself, as `metrics`.
    #[serde(default, rename = "client_listen")]
    _client_listen: Option<String>,
    #[serde(default, rename = "client_token")]
    _client_token: Option<String>,
    #[serde(default, rename = "client_keepalive_ms")]
    _client_keepalive_ms: Option<u64>,
    #[serde(default, rename = "client_tls_cert")]
    _client_tls_cert: Option<PathBuf>,
    #[serde(default, rename = "client_tls_key")]
    _client_tls_key: Option<PathBuf>,
    #[serde(default, rename = "client_tls_ca")]
    _client_tls_ca: Option<PathBuf>,
    listen: Option<String>,
    #[serde(default)]
    peers: Vec<String>,
    cookie: Option<String>,
    cookie_file: Option<PathBuf>,
    heartbeat_interval_ms: Option<u64>,
    heartbeat_timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
    handshake_timeout_ms: Option<u64>,
    reconnect_min_ms: Option<u64>,
    reconnect_max_ms: Option<u64>,
    max_frame: Option<usize>,
    lease_ms: Option<u64>,
    lock_delay_ms: Option<u64>,
    start_delay_ms: Option<u64>,
    tls: Option<FileTls>,
    data_dir: Option<PathBuf>,
    peer_quotas: Option<PeerQuotas>,
}

/// The `[tls]` table of the TOML form.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    server_name: Option<String>,
    node_names: Option<bool>,
}

/// An address as written: `ip:port`, or `host:port` resolved now (its first address).
fn resolve(address: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(addr) = address.parse() {
        return Ok(addr);
    }
    address
        .to_socket_addrs()
        .map_err(|error| ConfigError::Address {
            address: address.to_owned(),
            error,
        })?
        .next()
        .ok_or_else(|| ConfigError::NoAddress {
            address: address.to_owned(),
        })
}
