//! The client token: the check every call of the service passes ([`Auth`], a tonic
//! interceptor), and the two pieces the rest of the crate shares with it, reading the token of
//! an `authorization: Bearer <token>` value ([`bearer`]) and comparing secrets in a time that
//! does not depend on where they differ ([`same`]). The client port (`on_node.rs`) uses them to
//! prove a connection, and `Proclaim` (`election.rs`) to check a campaign's secret.
//!
//! Pure but for [`Auth`]'s rate-limited log line. Invariant: a token or secret is only ever
//! compared with [`same`], so how long a refusal takes says nothing of how much of a guess was
//! right.

use locks_server::embed::{LogLimiter, Verdict};
use tonic::{Request, Status};

/// The bearer-token check on every call: a node without a token lets every call in.
#[derive(Clone)]
pub(crate) struct Auth {
    token: Option<String>,
    log: LogLimiter,
}

impl Auth {
    /// The check of `token` (none: every call passes), logging refusals through `log`.
    pub(crate) fn new(token: Option<String>, log: LogLimiter) -> Auth {
        Auth { token, log }
    }
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.token else {
            return Ok(request);
        };
        match bearer(
            request
                .metadata()
                .get("authorization")
                .map(|v| v.as_bytes()),
        ) {
            Some(given) if same(given.as_bytes(), token.as_bytes()) => Ok(request),
            _ => {
                if let Verdict::Warn { suppressed } = self.log.event("grpc-bad-token") {
                    tracing::warn!(
                        suppressed,
                        peer = ?request.remote_addr(),
                        "a client call without the client token was refused"
                    );
                }
                Err(Status::unauthenticated(
                    "this node wants `authorization: Bearer <token>` with its client token",
                ))
            }
        }
    }
}

/// The token of an `authorization: Bearer <token>` header's value.
pub(crate) fn bearer<V: AsRef<[u8]> + ?Sized>(value: Option<&V>) -> Option<&str> {
    std::str::from_utf8(value?.as_ref())
        .ok()?
        .strip_prefix("Bearer ")
}

/// Compares two byte strings in a time that does not depend on where they differ.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::{Auth, bearer, same};
    use locks_server::embed::LogLimiter;
    use tonic::service::Interceptor;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }

    #[test]
    fn only_a_bearer_value_yields_a_token() {
        assert_eq!(bearer(Some("Bearer s3cret")), Some("s3cret"));
        assert_eq!(bearer(Some("Bearer ")), Some(""));
        assert_eq!(bearer(Some("Basic s3cret")), None);
        assert_eq!(bearer(Some("bearer s3cret")), None);
        assert_eq!(bearer(Some(&b"Bearer \xff"[..])), None);
        assert_eq!(bearer::<str>(None), None);
    }

    fn call(auth: &mut Auth, authorization: Option<&str>) -> Result<(), tonic::Code> {
        let mut request = tonic::Request::new(());
        if let Some(value) = authorization {
            request
                .metadata_mut()
                .insert("authorization", value.parse().unwrap());
        }
        auth.call(request).map(drop).map_err(|s| s.code())
    }

    #[test]
    fn a_call_passes_with_the_nodes_token_or_on_a_node_without_one() {
        let mut auth = Auth::new(Some("s3cret".into()), LogLimiter::default());
        assert_eq!(call(&mut auth, Some("Bearer s3cret")), Ok(()));
        for wrong in [
            None,
            Some("Bearer s3creT"),
            Some("s3cret"),
            Some("Bearer s3cret2"),
        ] {
            assert_eq!(
                call(&mut auth, wrong),
                Err(tonic::Code::Unauthenticated),
                "{wrong:?}"
            );
        }
        let mut open = Auth::new(None, LogLimiter::default());
        assert_eq!(call(&mut open, None), Ok(()));
        assert_eq!(call(&mut open, Some("Bearer anything")), Ok(()));
    }
}
