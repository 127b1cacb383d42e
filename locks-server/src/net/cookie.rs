//! The cluster's shared secret ([`Cookie`]): what the handshake proves and the session keys
//! derive from, below both.

use std::fmt;
use std::sync::Arc;

/// The shared secret of a cluster. Only nodes that know it can connect to each other.
///
/// Cheap to clone; its `Debug` output never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Cookie(Arc<[u8]>);

impl Cookie {
    /// A cookie from any bytes.
    pub fn new(secret: impl AsRef<[u8]>) -> Cookie {
        Cookie(Arc::from(secret.as_ref()))
    }

    /// Whether the secret is empty (a cluster refuses such a cookie).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The secret, as the HMAC key.
    pub(crate) fn secret(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Cookie(<redacted>)")
    }
}

impl From<&str> for Cookie {
    fn from(s: &str) -> Self {
        Cookie::new(s)
    }
}

impl From<String> for Cookie {
    fn from(s: String) -> Self {
        Cookie::new(s)
    }
}

impl From<&[u8]> for Cookie {
    fn from(b: &[u8]) -> Self {
        Cookie::new(b)
    }
}

impl From<Vec<u8>> for Cookie {
    fn from(b: Vec<u8>) -> Self {
        Cookie::new(b)
    }
}
