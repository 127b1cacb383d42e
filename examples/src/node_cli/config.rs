//! The node's configuration: a TOML file (`--config`), overridden by flags.

use locks_server::NodeConfig;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// The settings given as flags; each one overrides the file's.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--name`
    pub name: Option<String>,
    /// `--listen`
    pub listen: Option<SocketAddr>,
    /// `--peer` (added to the file's)
    pub peers: Vec<SocketAddr>,
    /// `--cookie`
    pub cookie: Option<String>,
    /// `--heartbeat-timeout-ms` (the ping interval is a quarter of it)
    pub heartbeat_timeout_ms: Option<u64>,
}

/// The configuration from `file` (if any) and the flags; without a file, `--name` is needed.
pub fn node_config(file: Option<&Path>, args: &Overrides) -> Result<NodeConfig, String> {
    let mut config = match (file, &args.name) {
        (Some(path), _) => NodeConfig::from_toml_file(path).map_err(|e| e.to_string())?,
        (None, Some(name)) => NodeConfig::new(name.clone()),
        (None, None) => return Err("give --config or --name".to_owned()),
    };
    if let Some(name) = &args.name
        && name != config.name()
    {
        // A flag overrides the file; rebuild with the cluster settings kept.
        let cluster = config.cluster().clone();
        config = NodeConfig::new(name.clone())
            .heartbeat(cluster.heartbeat.interval, cluster.heartbeat.timeout)
            .connect_timeout(cluster.connect_timeout)
            .handshake_timeout(cluster.handshake_timeout)
            .reconnect_backoff(cluster.reconnect_min, cluster.reconnect_max)
            .max_frame(cluster.max_frame);
        if let Some(listen) = cluster.listen {
            config = config.listen(listen);
        }
        for peer in cluster.peers {
            config = config.peer(peer);
        }
        if let Some(cookie) = cluster.cookie {
            config = config.cookie(cookie);
        }
    }
    if let Some(listen) = args.listen {
        config = config.listen(listen);
    }
    for peer in &args.peers {
        config = config.peer(*peer);
    }
    if let Some(cookie) = &args.cookie {
        config = config.cookie(cookie.as_str());
    }
    if let Some(ms) = args.heartbeat_timeout_ms {
        let timeout = Duration::from_millis(ms);
        config = config.heartbeat(timeout / 4, timeout);
    }
    Ok(config)
}
