//! The node's client API (`locks-grpc`): its settings from the TOML file (`client_listen`,
//! `client_token`, `client_keepalive_ms`, `client_tls_cert`, `client_tls_key`,
//! `client_tls_ca`) and the flags that override them.

use locks_grpc::{GrpcConfig, ServerTls};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The client API flags; each overrides the file's key.
#[derive(Debug, Clone, Default)]
pub struct ClientFlags {
    /// `--client-listen`
    pub listen: Option<String>,
    /// `--client-token`
    pub token: Option<String>,
    /// `--client-keepalive-ms`
    pub keepalive_ms: Option<u64>,
    /// `--client-tls-cert`
    pub tls_cert: Option<PathBuf>,
    /// `--client-tls-key`
    pub tls_key: Option<PathBuf>,
    /// `--client-tls-ca`
    pub tls_ca: Option<PathBuf>,
}

/// The client API's configuration, or `None` when neither the flags nor the file ask for it.
/// A bad address, or a file that cannot be read, is an error that says so.
pub fn client_config(
    file: Option<&Path>,
    flags: &ClientFlags,
) -> Result<Option<GrpcConfig>, String> {
    #[derive(serde::Deserialize, Default)]
    struct Keys {
        client_listen: Option<String>,
        client_token: Option<String>,
        client_keepalive_ms: Option<u64>,
        client_tls_cert: Option<PathBuf>,
        client_tls_key: Option<PathBuf>,
        client_tls_ca: Option<PathBuf>,
    }
    let keys: Keys = match file {
        None => Keys::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| format!("bad configuration file: {e}"))?
        }
    };
    let Some(listen) = flags.listen.clone().or(keys.client_listen) else {
        return Ok(None);
    };
    let listen: SocketAddr = listen
        .parse()
        .map_err(|_| format!("bad client address {listen:?}: give ip:port"))?;
    let mut config = GrpcConfig::new(listen);
    config.token = flags.token.clone().or(keys.client_token);
    if config.token.as_deref() == Some("") {
        return Err("the client token is empty".to_owned());
    }
    if let Some(ms) = flags.keepalive_ms.or(keys.client_keepalive_ms) {
        if ms < 2 {
            return Err("the client keepalive must be at least 2 ms".to_owned());
        }
        config.keepalive = Duration::from_millis(ms);
    }
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let cert = flags.tls_cert.clone().or(keys.client_tls_cert);
    let key = flags.tls_key.clone().or(keys.client_tls_key);
    let ca = flags.tls_ca.clone().or(keys.client_tls_ca);
    config.tls = match (cert, key) {
        (None, None) if ca.is_none() => None,
        (Some(cert), Some(key)) => Some(ServerTls {
            cert: read(&cert)?,
            key: read(&key)?,
            client_ca: ca.as_ref().map(read).transpose()?,
        }),
        _ => return Err("the client API's TLS needs both a certificate and a key".to_owned()),
    };
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_api_comes_from_the_file_or_the_flags() {
        let dir = std::env::temp_dir().join(format!("node-client-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.toml");
        std::fs::write(
            &path,
            "name = \"c\"\nclient_listen = \"127.0.0.1:7100\"\nclient_token = \"t\"\n\
             client_keepalive_ms = 3000\n",
        )
        .unwrap();
        // The library accepts the keys, so one file configures both.
        let node = crate::node_cli::config::node_config(Some(&path), &Default::default());
        let from_file = client_config(Some(&path), &ClientFlags::default())
            .unwrap()
            .unwrap();
        let flags = ClientFlags {
            listen: Some("127.0.0.1:0".to_owned()),
            token: Some("u".to_owned()),
            ..ClientFlags::default()
        };
        let from_flags = client_config(Some(&path), &flags).unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(node.is_ok(), "{node:?}");
        assert_eq!(from_file.listen, "127.0.0.1:7100".parse().unwrap());
        assert_eq!(from_file.token.as_deref(), Some("t"));
        assert_eq!(from_file.keepalive, Duration::from_secs(3));
        assert_eq!(from_flags.listen.port(), 0);
        assert_eq!(from_flags.token.as_deref(), Some("u"));
        assert!(
            client_config(None, &ClientFlags::default())
                .unwrap()
                .is_none()
        );
        let bad = ClientFlags {
            listen: Some("localhost".to_owned()),
            ..ClientFlags::default()
        };
        assert!(
            client_config(None, &bad)
                .unwrap_err()
                .contains("bad client address")
        );
    }
}
