//! `NodeConfig` from builders and from TOML.

use locks_server::{ConfigError, NodeConfig, PeerQuotas};
use std::net::SocketAddr;
use std::time::Duration;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn a_full_toml_file_sets_every_field() {
    let config = NodeConfig::from_toml_str(
        r#"
        name = "a"
        listen = "127.0.0.1:7001"
        peers = ["127.0.0.1:7002", "127.0.0.1:7003"]
        cookie = "s3cret"
        heartbeat_interval_ms = 100
        heartbeat_timeout_ms = 700
        connect_timeout_ms = 1500
        handshake_timeout_ms = 2500
        reconnect_min_ms = 10
        reconnect_max_ms = 300
        max_frame = 65536
        lease_ms = 500
        lock_delay_ms = 900
        start_delay_ms = 0

        [peer_quotas]
        locks = 10
        queued = 5
        bytes = 1000
        "#,
    )
    .unwrap();
    assert_eq!(config.name(), "a");
    let c = config.cluster();
    assert_eq!(c.listen, Some(addr("127.0.0.1:7001")));
    assert_eq!(c.peers, [addr("127.0.0.1:7002"), addr("127.0.0.1:7003")]);
    assert!(c.cookie.is_some());
    assert_eq!(c.heartbeat.interval, Duration::from_millis(100));
    assert_eq!(c.heartbeat.timeout, Duration::from_millis(700));
    assert_eq!(c.connect_timeout, Duration::from_millis(1500));
    assert_eq!(c.handshake_timeout, Duration::from_millis(2500));
    assert_eq!(
        (c.reconnect_min, c.reconnect_max),
        (Duration::from_millis(10), Duration::from_millis(300))
    );
    assert_eq!(c.max_frame, 65536);
    let leases = c.leases().unwrap();
    assert_eq!(leases.lease, Duration::from_millis(500));
    assert_eq!(leases.lock_delay, Duration::from_millis(900));
    assert_eq!(leases.start_delay, Duration::ZERO);
    assert_eq!(
        c.peer_quotas,
        PeerQuotas {
            locks: 10,
            queued: 5,
            bytes: 1000
        }
    );
}

#[test]
fn peer_quotas_left_out_of_the_file_keep_their_defaults() {
    let c = NodeConfig::from_toml_str("name = \"a\"\ncookie = \"c\"\n[peer_quotas]\nlocks = 7\n")
        .unwrap();
    let expected = PeerQuotas {
        locks: 7,
        ..PeerQuotas::default()
    };
    assert_eq!(c.cluster().peer_quotas, expected);
    let err = NodeConfig::from_toml_str("name = \"a\"\n[peer_quotas]\nlock = 7\n").unwrap_err();
    assert!(
        matches!(&err, ConfigError::Toml(e) if e.to_string().contains("lock")),
        "a typo is named: {err}"
    );
}

#[test]
fn lease_settings_that_would_let_a_holder_outlive_its_lock_are_refused() {
    // The lock-delay must cover the lease plus the clock drift.
    let err = NodeConfig::from_toml_str(
        "name = \"a\"\ncookie = \"c\"\nlease_ms = 1000\nlock_delay_ms = 1000\n",
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::Lease(_)), "{err:?}");
    assert!(err.to_string().contains("lock-delay"), "{err}");
    // A lease no longer than the ping interval would expire between two pings.
    let err = NodeConfig::from_toml_str(
        "name = \"a\"\ncookie = \"c\"\nheartbeat_interval_ms = 500\nlease_ms = 400\n",
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::Lease(_)), "{err:?}");
    // The defaults are safe, and follow a shorter heartbeat.
    let c = NodeConfig::new("a")
        .cookie("c")
        .heartbeat(Duration::from_millis(50), Duration::from_millis(400));
    let leases = c.cluster().leases().unwrap();
    assert_eq!(leases.lease, Duration::from_millis(300));
    assert!(leases.lock_delay >= leases.lease + leases.lease / 100);
}

#[test]
fn builders_and_toml_agree_on_defaults() {
    let from_toml = NodeConfig::from_toml_str("name = \"a\"\ncookie = \"c\"\n").unwrap();
    let built = NodeConfig::new("a").cookie("c");
    let (t, b) = (from_toml.cluster(), built.cluster());
    assert_eq!(t.heartbeat, b.heartbeat);
    assert_eq!(t.connect_timeout, b.connect_timeout);
    assert_eq!(t.handshake_timeout, b.handshake_timeout);
    assert_eq!(
        (t.reconnect_min, t.reconnect_max),
        (b.reconnect_min, b.reconnect_max)
    );
    assert_eq!(t.max_frame, b.max_frame);
    assert_eq!(t.cookie, b.cookie);
    assert_eq!(t.peer_quotas, b.peer_quotas);
    // The default heartbeat declares a silent peer down within 2 s.
    assert!(t.heartbeat.timeout <= Duration::from_secs(2));
}

#[test]
fn bad_files_are_refused_with_clear_errors() {
    let err = NodeConfig::from_toml_str("name = \"a\"\nlisten = \"127.0.0.1:1\"\n").unwrap_err();
    assert!(matches!(err, ConfigError::MissingCookie), "{err:?}");
    let err = NodeConfig::from_toml_str("name = \"a\"\ncookie = \"\"\n").unwrap_err();
    assert!(matches!(err, ConfigError::EmptyCookie), "{err:?}");
    let err =
        NodeConfig::from_toml_str("name = \"a\"\ncookie = \"c\"\nlisen = \"x\"\n").unwrap_err();
    assert!(
        matches!(&err, ConfigError::Toml(e) if e.to_string().contains("lisen")),
        "a typo is named: {err}"
    );
    let err =
        NodeConfig::from_toml_str("name = \"a\"\ncookie = \"c\"\npeers = [\"not an address\"]\n")
            .unwrap_err();
    assert!(matches!(err, ConfigError::Address { .. }), "{err:?}");
    let err = NodeConfig::from_toml_str("name = \"a\"\ncookie = \"c\"\ncookie_file = \"x\"\n")
        .unwrap_err();
    assert!(matches!(err, ConfigError::TwoCookies), "{err:?}");
    let err = NodeConfig::from_toml_str("cookie = \"c\"\n").unwrap_err();
    assert!(
        matches!(err, ConfigError::Toml(_)),
        "the name is required: {err:?}"
    );
}

#[test]
fn a_cookie_file_is_read_relative_to_the_config_file() {
    let dir = std::env::temp_dir().join(format!("locks-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cookie"), "from-a-file\n").unwrap();
    std::fs::write(
        dir.join("node.toml"),
        "name = \"a\"\ncookie_file = \"cookie\"\nlisten = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let config = NodeConfig::from_toml_file(dir.join("node.toml")).unwrap();
    assert_eq!(
        config.cluster().cookie,
        NodeConfig::new("a").cookie("from-a-file").cluster().cookie,
        "the trailing newline is not part of the secret"
    );
    let err = NodeConfig::from_toml_file(dir.join("missing.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
