//! `node --gen-certs DIR --names a,b,c`: a test CA and one certificate and key per node, so
//! that TLS between nodes can be tried with no other tool (see `docs/tls.md`).
//!
//! What it writes, in `DIR` (created if needed; existing files are not overwritten):
//! `ca.pem` (the CA certificate every node trusts) and, per node `n`, `n.pem` (its
//! certificate, signed by the CA) and `n.key` (its private key, PKCS#8, readable by the owner
//! only). Every node certificate carries two DNS names: the cluster's TLS server name
//! ([`locks_server::tls::DEFAULT_SERVER_NAME`], what a dialing node checks) and the node's own
//! name. The CA's private key is never written: to add a node, generate a new set for every
//! node. These are test certificates (valid from 1975 to 4096, rcgen's default); production
//! clusters should use their own CA, with expiry and rotation.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A test CA and a certificate and key per node, PEM-encoded, in memory.
#[derive(Clone, Debug)]
pub struct TestCerts {
    /// The CA certificate every node trusts.
    pub ca: String,
    /// Per node, in the order of the names: (name, certificate, private key).
    pub nodes: Vec<(String, String, String)>,
}

impl TestCerts {
    /// Makes a fresh CA and signs a certificate for each of `names` (letters, digits, '-').
    pub fn new(names: &[String]) -> Result<TestCerts, String> {
        if names.is_empty() {
            return Err("--gen-certs needs --names a,b,c".to_owned());
        }
        for name in names {
            // The name goes into a file name and a DNS name: keep it to what both accept.
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !name.starts_with('-');
            if !valid {
                return Err(format!(
                    "invalid node name {name:?} for a certificate: use letters, digits and '-'"
                ));
            }
        }
        let err = |e: rcgen::Error| format!("cannot make a certificate: {e}");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "locks test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().map_err(err)?;
        let ca = ca_params.self_signed(&ca_key).map_err(err)?.pem();
        let issuer = Issuer::new(ca_params, ca_key);
        let mut nodes = Vec::new();
        for name in names {
            let sans = vec![
                locks_server::tls::DEFAULT_SERVER_NAME.to_owned(),
                name.clone(),
            ];
            let mut params = CertificateParams::new(sans).map_err(err)?;
            params
                .distinguished_name
                .push(DnType::CommonName, name.as_str());
            let key = KeyPair::generate().map_err(err)?;
            let cert = params.signed_by(&key, &issuer).map_err(err)?;
            nodes.push((name.clone(), cert.pem(), key.serialize_pem()));
        }
        Ok(TestCerts { ca, nodes })
    }

    /// The TLS settings of the `i`-th node.
    pub fn tls(&self, i: usize) -> Result<locks_server::TlsConfig, String> {
        let (name, cert, key) = self.nodes.get(i).ok_or("no such node")?;
        locks_server::TlsConfig::from_pem(cert.as_bytes(), key.as_bytes(), self.ca.as_bytes())
            .map_err(|e| format!("TLS settings of {name}: {e}"))
    }
}

/// Writes the CA and the node certificates into `dir`; returns the files written.
pub fn gen_certs(dir: &Path, names: &[String]) -> Result<Vec<PathBuf>, String> {
    let certs = TestCerts::new(names)?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut files = vec![write_new(&dir.join("ca.pem"), &certs.ca, false)?];
    for (name, cert, key) in &certs.nodes {
        files.push(write_new(&dir.join(format!("{name}.pem")), cert, false)?);
        files.push(write_new(&dir.join(format!("{name}.key")), key, true)?);
    }
    Ok(files)
}

/// Writes a file that must not exist yet (a key is made readable by its owner only).
fn write_new(path: &Path, text: &str, secret: bool) -> Result<PathBuf, String> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_server::TlsConfig;

    #[test]
    fn the_generated_files_make_valid_tls_settings() {
        let dir = std::env::temp_dir().join(format!("node-gen-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let names = vec!["a".to_owned(), "b".to_owned()];
        let files = gen_certs(&dir, &names).unwrap();
        assert_eq!(files.len(), 5);
        let tls =
            TlsConfig::from_pem_files(dir.join("a.pem"), dir.join("a.key"), dir.join("ca.pem"));
        assert!(tls.is_ok(), "{tls:?}");
        // Existing files are not overwritten.
        let again = gen_certs(&dir, &names).unwrap_err();
        assert!(again.contains("ca.pem"), "{again}");
        assert!(gen_certs(&dir, &["../x".to_owned()]).is_err());
        assert!(gen_certs(&dir, &[]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
