//! The fencing versions of one grant as text (`a@1042,b@977`), to carry with a write over any
//! protocol, and the saved state of a [`Fence`].

use super::Fence;
use crate::{LockId, NodeId};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The fencing versions of one grant: each granting node with the lock's version there. Displays
/// and parses as `node@version` pairs joined by commas (`a@1042,b@977`), the form the `node`
/// binary prints, so a client can send them in a header or a field and the resource parse
/// them back.
///
/// ```
/// use locks_core::fence::Versions;
/// let versions: Versions = "a@1042,b@977".parse().unwrap();
/// assert_eq!(versions.to_string(), "a@1042,b@977");
/// assert_eq!(versions.as_slice()[1].1, 977);
/// assert!("a@x".parse::<Versions>().is_err());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Versions(pub Vec<(NodeId, u64)>);

impl Versions {
    /// The pairs, for [`Fence::admit`].
    pub fn as_slice(&self) -> &[(NodeId, u64)] {
        &self.0
    }
}

impl From<&[(NodeId, u64)]> for Versions {
    fn from(pairs: &[(NodeId, u64)]) -> Versions {
        Versions(pairs.to_vec())
    }
}

impl fmt::Display for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (node, version)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{node}@{version}")?;
        }
        Ok(())
    }
}

/// Why a text is not a list of fencing versions.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionsError {
    /// The text is empty.
    #[error("no fencing versions")]
    Empty,
    /// A pair is not `node@version`.
    #[error("not a fencing version (node@version): {}", crate::escape::Escaped::bounded(.0, 64))]
    Malformed(String),
    /// A node name is not valid.
    #[error(
        "bad node name in fencing version {}: {why}",
        crate::escape::Escaped::bounded(pair, 64)
    )]
    BadNode {
        /// The pair.
        pair: String,
        /// Why.
        why: String,
    },
}

impl FromStr for Versions {
    type Err = VersionsError;

    fn from_str(text: &str) -> Result<Versions, VersionsError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(VersionsError::Empty);
        }
        let mut pairs = Vec::new();
        for pair in text.split(',') {
            let pair = pair.trim();
            let (node, version) = pair
                .rsplit_once('@')
                .ok_or_else(|| VersionsError::Malformed(pair.to_owned()))?;
            let version = version
                .parse::<u64>()
                .map_err(|_| VersionsError::Malformed(pair.to_owned()))?;
            let node = NodeId::new(node).map_err(|e| VersionsError::BadNode {
                pair: pair.to_owned(),
                why: e.to_string(),
            })?;
            pairs.push((node, version));
        }
        Ok(Versions(pairs))
    }
}

/// What a [`Fence`] saves: every (lock, node, highest version), in order (a list, so that any
/// serde format can hold it, JSON included).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Saved {
    highest: Vec<(LockId, NodeId, u64)>,
}

impl From<Fence> for Saved {
    fn from(fence: Fence) -> Saved {
        let mut highest: Vec<(LockId, NodeId, u64)> = fence.entries().collect();
        highest.sort();
        Saved { highest }
    }
}

impl From<Saved> for Fence {
    fn from(saved: Saved) -> Fence {
        let mut fence = Fence::new();
        for (lock, node, version) in saved.highest {
            fence.record(&lock, &node, version);
        }
        fence
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn errors_show_the_text_escaped_not_debug_quoted() {
        let bad = "a@1,b\u{1b}[31m"
            .parse::<super::Versions>()
            .unwrap_err()
            .to_string();
        assert!(!bad.contains('"'), "{bad}");
        assert!(!bad.contains('\u{1b}'), "{bad}");
        assert!(bad.contains("b\\u{1b}[31m"), "{bad}");
        let mode = "wirte".parse::<crate::Mode>().unwrap_err().to_string();
        assert!(mode.starts_with("unknown mode name wirte ("), "{mode}");
    }

    use super::*;
    use proptest::prelude::*;

    fn node_name() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_]{0,6}"
    }

    proptest! {
        /// Every list of versions displays to a text that parses back to it.
        #[test]
        fn versions_round_trip(pairs in prop::collection::vec((node_name(), any::<u64>()), 1..5)) {
            let versions = Versions(
                pairs.iter().map(|(n, v)| (NodeId::new(n).unwrap(), *v)).collect(),
            );
            prop_assert_eq!(versions.to_string().parse::<Versions>(), Ok(versions));
        }
    }

    #[test]
    fn bad_versions_say_why() {
        assert_eq!("".parse::<Versions>(), Err(VersionsError::Empty));
        assert_eq!(
            "a@1,b".parse::<Versions>(),
            Err(VersionsError::Malformed("b".into()))
        );
        assert_eq!(
            "a@-1".parse::<Versions>(),
            Err(VersionsError::Malformed("a@-1".into()))
        );
        assert!(matches!(
            "@5".parse::<Versions>(),
            Err(VersionsError::BadNode { .. })
        ));
    }

    #[test]
    fn a_saved_fence_refuses_what_the_original_refused() {
        let lock = crate::lock_id!["register"];
        let mut fence = Fence::new();
        fence
            .admit(&lock, "a@10,b@20".parse::<Versions>().unwrap().as_slice())
            .unwrap();
        let bytes = bincode::serde::encode_to_vec(&fence, bincode::config::standard()).unwrap();
        let (restored, _): (Fence, usize) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
        let stale: Versions = "a@9,b@20".parse().unwrap();
        assert!(restored.check(&lock, stale.as_slice()).is_err());
        assert_eq!(
            restored.highest(&lock, &NodeId::new("b").unwrap()),
            Some(20)
        );
        // Recording never lowers what was seen.
        let mut recorded = restored.clone();
        recorded.record(&lock, &NodeId::new("a").unwrap(), 3);
        assert_eq!(
            recorded.highest(&lock, &NodeId::new("a").unwrap()),
            Some(10)
        );
    }
}
