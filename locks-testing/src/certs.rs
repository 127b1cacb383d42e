//! Certificates for the TLS tests, made at test time: a CA per test ([`TestCa`]) and node
//! certificates it signs ([`TestCa::node`], [`TestCa::expired_node`]), all as PEM text, the
//! form `locks_server::net::TlsConfig::from_pem` reads. Nothing is written to disk.
//!
//! Every node certificate carries the DNS name `locks` (the default TLS server name a dialing
//! node checks) and the node's own name.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    date_time_ymd,
};

/// The DNS name every node certificate carries (the nodes' default TLS server name).
pub const SERVER_NAME: &str = "locks";

/// A node's certificate and private key, PEM-encoded.
#[derive(Clone, Debug)]
pub struct NodeCert {
    /// The certificate (`-----BEGIN CERTIFICATE-----`).
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

/// A certificate authority made for one test.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate, PEM-encoded: what the nodes trust.
    pub cert: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A fresh CA whose certificate names it `name`.
    ///
    /// # Panics
    /// If rcgen cannot make a key or a certificate (a broken build, not an input).
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, name.to_owned());
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate").pem();
        TestCa {
            issuer: Issuer::new(params, key),
            cert,
        }
    }

    /// A certificate for node `name`, valid now.
    pub fn node(&self, name: &str) -> NodeCert {
        self.sign(name, None)
    }

    /// A certificate for node `name` that expired years ago (valid 2001-2002).
    pub fn expired_node(&self, name: &str) -> NodeCert {
        self.sign(name, Some((2001, 2002)))
    }

    fn sign(&self, name: &str, years: Option<(i32, i32)>) -> NodeCert {
        let mut params = CertificateParams::new(vec![SERVER_NAME.to_owned(), name.to_owned()])
            .expect("node certificate parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, name.to_owned());
        if let Some((from, to)) = years {
            params.not_before = date_time_ymd(from, 1, 1);
            params.not_after = date_time_ymd(to, 1, 1);
        }
        let key = KeyPair::generate().expect("node key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("node certificate");
        NodeCert {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}
