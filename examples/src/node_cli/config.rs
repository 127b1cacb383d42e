//! The node's configuration: a TOML file (`--config`), overridden by flags.

use locks_server::{NodeConfig, TlsConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    /// `--lease-ms`
    pub lease_ms: Option<u64>,
    /// `--lock-delay-ms`
    pub lock_delay_ms: Option<u64>,
    /// `--start-delay-ms`
    pub start_delay_ms: Option<u64>,
    /// `--tls-cert`, `--tls-key`, `--tls-ca`: all three or none (they replace the file's
    /// `[tls]` settings, keeping its `server_name` and `node_names`).
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`
    pub tls_key: Option<PathBuf>,
    /// `--tls-ca`
    pub tls_ca: Option<PathBuf>,
    /// `--data-dir` (overrides the file's `data_dir`)
    pub data_dir: Option<PathBuf>,
    /// `--no-data-dir`: no data directory at all
    pub no_data_dir: bool,
}

/// The node binary's data directory when neither `--data-dir` nor the file's `data_dir` names
/// one: `$XDG_STATE_HOME/locks/NAME`, else `$HOME/.local/state/locks/NAME`.
pub fn default_data_dir(name: &str) -> Result<PathBuf, String> {
    let state = match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
        (Some(state), _) if !state.is_empty() => PathBuf::from(state),
        (_, Some(home)) if !home.is_empty() => PathBuf::from(home).join(".local/state"),
        _ => {
            return Err(
                "no default data directory (neither XDG_STATE_HOME nor HOME is set): give --data-dir DIR or --no-data-dir"
                    .to_owned(),
            );
        }
    };
    Ok(state.join("locks").join(name))
}

/// The metrics address: `flag` (`--metrics`) if given, else the file's `metrics` key, else
/// none. A bad address, or a file that cannot be read, is an error that says so.
pub fn metrics_addr(file: Option<&Path>, flag: Option<&str>) -> Result<Option<SocketAddr>, String> {
    #[derive(serde::Deserialize)]
    struct MetricsKey {
        metrics: Option<String>,
    }
    let text = match (flag, file) {
        (Some(flag), _) => return super::metrics::parse_addr(flag).map(Some),
        (None, None) => return Ok(None),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
    };
    let key: MetricsKey =
        toml::from_str(&text).map_err(|e| format!("bad configuration file: {e}"))?;
    key.metrics
        .map(|m| super::metrics::parse_addr(&m))
        .transpose()
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
        let data_dir = config.data_dir_path().map(Path::to_owned);
        config = NodeConfig::new(name.clone())
            .heartbeat(cluster.heartbeat.interval, cluster.heartbeat.timeout)
            .connect_timeout(cluster.connect_timeout)
            .handshake_timeout(cluster.handshake_timeout)
            .reconnect_backoff(cluster.reconnect_min, cluster.reconnect_max)
            .max_frame(cluster.max_frame)
            .peer_quotas(cluster.peer_quotas);
        if let Some(tls) = cluster.tls {
            config = config.tls(tls);
        }
        if let Some(listen) = cluster.listen {
            config = config.listen(listen);
        }
        for peer in cluster.peers {
            config = config.peer(peer);
        }
        if let Some(cookie) = cluster.cookie {
            config = config.cookie(cookie);
        }
        if let Some(lease) = cluster.lease.lease {
            config = config.lease(lease);
        }
        if let Some(delay) = cluster.lease.lock_delay {
            config = config.lock_delay(delay);
        }
        if let Some(delay) = cluster.lease.start_delay {
            config = config.start_delay(delay);
        }
        if let Some(dir) = data_dir {
            config = config.data_dir(dir);
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
    if let Some(ms) = args.lease_ms {
        config = config.lease(Duration::from_millis(ms));
    }
    if let Some(ms) = args.lock_delay_ms {
        config = config.lock_delay(Duration::from_millis(ms));
    }
    if let Some(ms) = args.start_delay_ms {
        config = config.start_delay(Duration::from_millis(ms));
    }
    match (&args.tls_cert, &args.tls_key, &args.tls_ca) {
        (None, None, None) => {}
        (Some(cert), Some(key), Some(ca)) => {
            let mut tls = TlsConfig::from_pem_files(cert, key, ca).map_err(|e| e.to_string())?;
            if let Some(file) = &config.cluster().tls {
                tls = tls
                    .with_server_name(&file.server_name())
                    .map_err(|e| e.to_string())?;
                if !file.binds_node_names() {
                    tls = tls.without_node_names();
                }
            }
            config = config.tls(tls);
        }
        _ => return Err("give all of --tls-cert, --tls-key and --tls-ca, or none".to_owned()),
    }
    config = match (&args.data_dir, args.no_data_dir) {
        (Some(_), true) => return Err("give --data-dir or --no-data-dir, not both".to_owned()),
        (_, true) => config.without_data_dir(),
        (Some(dir), false) => config.data_dir(dir),
        (None, false) if config.data_dir_path().is_none() => {
            let dir = default_data_dir(config.name())?;
            config.data_dir(dir)
        }
        (None, false) => config,
    };
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_flag_keeps_the_files_lease_settings() {
        let dir = std::env::temp_dir().join(format!("node-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.toml");
        std::fs::write(
            &path,
            "name = \"a\"\ncookie = \"c\"\nheartbeat_timeout_ms = 2000\n\
             lease_ms = 900\nlock_delay_ms = 1700\nstart_delay_ms = 300\n\
             [peer_quotas]\nlocks = 12\n",
        )
        .unwrap();
        let from_file = node_config(Some(&path), &Overrides::default()).unwrap();
        let renamed = Overrides {
            name: Some("b".to_owned()),
            ..Overrides::default()
        };
        let config = node_config(Some(&path), &renamed).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(config.name(), "b");
        assert_eq!(config.cluster().lease, from_file.cluster().lease);
        assert_eq!(
            config.cluster().lease.lock_delay,
            Some(Duration::from_millis(1700))
        );
        assert_eq!(config.cluster().peer_quotas.locks, 12);
    }

    #[test]
    fn the_metrics_address_comes_from_the_flag_or_the_file_and_a_bad_one_is_an_error() {
        let dir = std::env::temp_dir().join(format!("node-metrics-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.toml");
        std::fs::write(&path, "name = \"m\"\nmetrics = \"127.0.0.1:9100\"\n").unwrap();
        let from_file = metrics_addr(Some(&path), None).unwrap();
        let from_flag = metrics_addr(Some(&path), Some("127.0.0.1:0")).unwrap();
        // The library accepts the key, so one file configures both.
        assert!(node_config(Some(&path), &Overrides::default()).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(from_file, Some("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(from_flag, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(metrics_addr(None, None).unwrap(), None);
        let bad = metrics_addr(None, Some("localhost")).unwrap_err();
        assert!(bad.contains("bad metrics address"), "{bad}");
    }

    #[test]
    fn tls_flags_load_the_files_and_come_all_three_together() {
        let dir = std::env::temp_dir().join(format!("node-config-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        crate::node_cli::certs::gen_certs(&dir, &["a".to_owned()]).unwrap();
        let mut flags = Overrides {
            name: Some("a".to_owned()),
            tls_cert: Some(dir.join("a.pem")),
            tls_key: Some(dir.join("a.key")),
            tls_ca: Some(dir.join("ca.pem")),
            ..Overrides::default()
        };
        let config = node_config(None, &flags).unwrap();
        assert!(config.cluster().tls.is_some());
        flags.tls_ca = None;
        let err = node_config(None, &flags).unwrap_err();
        assert!(err.contains("--tls-ca"), "{err}");
        // A key that does not belong to the certificate is refused, saying so.
        flags.tls_ca = Some(dir.join("ca.pem"));
        flags.tls_key = Some(dir.join("ca.pem"));
        let err = node_config(None, &flags).unwrap_err();
        assert!(err.contains("key"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lease_flags_override_the_defaults() {
        let flags = Overrides {
            name: Some("a".to_owned()),
            heartbeat_timeout_ms: Some(1000),
            lock_delay_ms: Some(1200),
            start_delay_ms: Some(0),
            ..Overrides::default()
        };
        let config = node_config(None, &flags).unwrap();
        let lease = config.cluster().lease;
        assert_eq!(lease.lease, None);
        assert_eq!(lease.lock_delay, Some(Duration::from_millis(1200)));
        assert_eq!(lease.start_delay, Some(Duration::ZERO));
    }
}
