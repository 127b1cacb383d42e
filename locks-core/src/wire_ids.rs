//! How lock ids, their string keys and node names are encoded: as a `Vec<Key>`, a `String`
//! and a `String` would be (so the bytes on the wire and on disk are those of the derived
//! encodings), without building the `Vec` or `String` on the way in or out.
//!
//! Why: a notice carries a lock id and a node name, and every message between nodes an agent
//! id with its node name; through `Vec<Key>` and `String` each of them cost one allocation to
//! encode and, for a lock id of three string keys, eight to decode (the `Vec`, the id's own
//! slice, and a `String` then an `Arc<str>` per key) where four are needed.
//!
//! Invariants: decoding checks what the constructors check (a lock id has a key, a node name
//! is valid); it never allocates ahead of the bytes it has read (keys are taken one at a time,
//! whatever length the input claims).

use crate::id::{Key, LockId};
use crate::ident::NodeId;
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;

/// A lock id: the sequence of its keys.
impl Serialize for LockId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.keys())
    }
}

impl<'de> Deserialize<'de> for LockId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LockId, D::Error> {
        struct Keys;

        impl<'de> Visitor<'de> for Keys {
            type Value = LockId;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a lock id: a non-empty sequence of keys")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LockId, A::Error> {
                // Inline up to a depth most ids stay within; the id's slice is then the one
                // allocation of the path.
                let mut keys: SmallVec<[Key; 4]> = SmallVec::new();
                while let Some(key) = seq.next_element()? {
                    keys.push(key);
                }
                LockId::new(keys.iter().cloned()).map_err(de::Error::custom)
            }
        }

        deserializer.deserialize_seq(Keys)
    }
}

/// A node name: its string.
impl Serialize for NodeId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NodeId, D::Error> {
        struct Name;

        impl Visitor<'_> for Name {
            type Value = NodeId;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a node name")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<NodeId, E> {
                NodeId::new(name).map_err(E::custom)
            }
        }

        deserializer.deserialize_str(Name)
    }
}

/// A string key's text, straight into its `Arc<str>` (`#[serde(deserialize_with)]` of
/// [`Key::Str`]).
pub(crate) fn arc_str<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
    struct Text;

    impl Visitor<'_> for Text {
        type Value = Arc<str>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Arc<str>, E> {
            Ok(Arc::from(text))
        }
    }

    deserializer.deserialize_str(Text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    /// The encodings this module writes are the derived ones of `Vec<Key>` and `String`.
    #[test]
    fn ids_encode_as_the_vec_and_string_they_used_to_be_built_into() {
        let id = LockId::new([Key::from("db"), Key::Int(-3), Key::UInt(u64::MAX)]).unwrap();
        let keys: Vec<Key> = id.keys().to_vec();
        let limit = codec::HARD_MAX_FRAME;
        assert_eq!(
            codec::encode(&id, limit).unwrap(),
            codec::encode(&keys, limit).unwrap()
        );
        let node = NodeId::new("node-1").unwrap();
        assert_eq!(
            codec::encode(&node, limit).unwrap(),
            codec::encode(&"node-1".to_owned(), limit).unwrap()
        );
        assert_eq!(
            codec::decode::<LockId>(&codec::encode(&keys, limit).unwrap(), limit).unwrap(),
            id
        );
    }

    #[test]
    fn an_empty_lock_id_and_a_bad_node_name_do_not_decode() {
        let limit = codec::HARD_MAX_FRAME;
        let empty = codec::encode(&Vec::<Key>::new(), limit).unwrap();
        assert!(codec::decode::<LockId>(&empty, limit).is_err());
        let bad = codec::encode(&"no spaces".to_owned(), limit).unwrap();
        assert!(codec::decode::<NodeId>(&bad, limit).is_err());
        let empty_name = codec::encode(&String::new(), limit).unwrap();
        assert!(codec::decode::<NodeId>(&empty_name, limit).is_err());
    }
}
