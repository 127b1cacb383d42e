//! Lock ids (the path algebra, order, construction and refusal of empty paths) and the
//! identities of nodes and agents (order, name validation, serde).

mod common;

use locks_core::codec;
use locks_core::{AgentId, Key, LockId, LockIdError, NodeId, NodeNameError, lock_id};
use proptest::prelude::*;
use std::collections::BTreeSet;

const LIMIT: usize = 1 << 16;

fn roundtrip<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    codec::decode(&codec::encode(value, LIMIT).unwrap(), LIMIT).unwrap()
}

#[test]
fn parent_child_ancestors_prefix() {
    let row = lock_id!["db", "accounts", 42];
    assert_eq!(row.depth(), 3);
    assert_eq!(row.last(), &Key::Int(42));
    assert_eq!(row.parent(), Some(LockId::from(["db", "accounts"])));
    assert_eq!(LockId::from(["db"]).parent(), None);
    assert_eq!(LockId::from(["db", "accounts"]).child(42), row);
    let ancestors: Vec<LockId> = row.ancestors().collect();
    assert_eq!(
        ancestors,
        vec![LockId::from(["db"]), LockId::from(["db", "accounts"])]
    );
    assert_eq!(row.ancestors().len(), 2);
    assert_eq!(LockId::from(["db"]).ancestors().count(), 0);
    assert!(LockId::from(["db"]).is_ancestor_of(&row));
    assert!(!row.is_ancestor_of(&row), "an id is not its own ancestor");
    assert!(!LockId::from(["db", "other"]).is_ancestor_of(&row));
    assert!(row.is_descendant_of(&LockId::from(["db"])));
    assert!(row.is_related_to(&row));
    assert!(!row.is_related_to(&LockId::from(["db", "other"])));
    assert_eq!(row.prefix(0), None);
    assert_eq!(row.prefix(1), Some(LockId::from(["db"])));
    assert_eq!(row.prefix(3), Some(row.clone()));
    assert_eq!(row.prefix(4), None);
}

#[test]
fn an_ancestor_sorts_before_its_descendants() {
    let ids: BTreeSet<LockId> = [
        lock_id!["b"],
        lock_id!["a", "z"],
        lock_id!["a", "b", 1],
        lock_id!["a"],
        lock_id!["a", "b"],
    ]
    .into_iter()
    .collect();
    let sorted: Vec<LockId> = ids.into_iter().collect();
    assert_eq!(
        sorted,
        vec![
            lock_id!["a"],
            lock_id!["a", "b"],
            lock_id!["a", "b", 1],
            lock_id!["a", "z"],
            lock_id!["b"],
        ]
    );
    // Integers, then strings, then byte strings; keys of different kinds never equal.
    assert!(Key::Int(i64::MAX) < Key::from(""));
    assert!(Key::from("\u{10FFFF}") < Key::from(Vec::<u8>::new()));
    assert_ne!(Key::Int(1), Key::from("1"));
}

#[test]
fn lock_id_macro_takes_mixed_key_types() {
    let name = String::from("accounts");
    let id = lock_id!["db", name.clone(), 42, -7i64, 7u32, b"raw", vec![1u8, 2],];
    assert_eq!(
        id.keys(),
        &[
            Key::from("db"),
            Key::from("accounts"),
            Key::Int(42),
            Key::Int(-7),
            Key::Int(7),
            Key::from(&b"raw"[..]),
            Key::from(vec![1u8, 2]),
        ]
    );
    assert_eq!(lock_id!["db", &name], LockId::from(["db", "accounts"]));
    assert_eq!(
        id.to_string(),
        "[db, accounts, 42, -7, 7, 0x726177, 0x0102]"
    );
    assert_eq!(
        format!("{:?}", lock_id!["a", 1]),
        "[\"a\", 1]",
        "Debug shows the kind of each key"
    );
}

#[test]
fn from_str_array_and_keys() {
    let id = LockId::from(["db", "t"]);
    assert_eq!(id, lock_id!["db", "t"]);
    assert_eq!(
        LockId::from([Key::Int(1), Key::from("x")]),
        lock_id![1, "x"]
    );
    assert_eq!(LockId::from(Key::Int(3)), lock_id![3]);
    let collected: LockId = ["db", "t"].into_iter().collect();
    assert_eq!(collected, id);
    assert_eq!(Vec::<Key>::from(id.clone()), id.keys().to_vec());
}

#[test]
fn integer_keys_of_every_type_name_one_key_per_value_in_numeric_order() {
    let (row, idx): (u64, usize) = (42, 42);
    // Row ids and indices are usually unsigned: `lock_id!` takes them as they are.
    assert_eq!(lock_id!["db", "rows", row], lock_id!["db", "rows", 42]);
    assert_eq!(lock_id!["db", "rows", idx], lock_id!["db", "rows", 42i64]);
    assert_eq!(Key::from(5u64), Key::Int(5));
    assert_eq!(Key::from(-5isize), Key::Int(-5));
    assert_eq!(Key::from(u64::MAX), Key::UInt(u64::MAX));
    assert_eq!(Key::try_from(5u128), Ok(Key::Int(5)));
    assert_eq!(Key::try_from(-5i128), Ok(Key::Int(-5)));
    assert_eq!(Key::try_from(u64::MAX as i128), Ok(Key::UInt(u64::MAX)));
    assert!(Key::try_from(u128::MAX).is_err());
    assert!(Key::try_from(i128::MIN).is_err());
    // Numeric order across the whole range, then strings.
    let order = [
        Key::from(i64::MIN),
        Key::from(-1i32),
        Key::from(0u8),
        Key::from(i64::MAX),
        Key::from(i64::MAX as u64 + 1),
        Key::from(u64::MAX),
        Key::from("0"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert_eq!(Key::from(u64::MAX).to_string(), u64::MAX.to_string());
}

#[test]
fn empty_lock_id_is_an_error() {
    assert_eq!(LockId::try_from(Vec::<Key>::new()), Err(LockIdError::Empty));
    assert_eq!(LockId::new(Vec::<Key>::new()), Err(LockIdError::Empty));
    assert_eq!(LockId::new::<&str>([]), Err(LockIdError::Empty));
    assert_eq!(
        LockId::try_from_iter(Vec::<i32>::new()),
        Err(LockIdError::Empty)
    );
    // An empty path on the wire is refused by the decoder, with the lock id's own message.
    let bytes = codec::encode(&Vec::<Key>::new(), LIMIT).unwrap();
    let err = codec::decode::<LockId>(&bytes, LIMIT).unwrap_err();
    assert!(err.to_string().contains("at least one key"), "{err}");
    assert_eq!(
        LockIdError::Empty.to_string(),
        "a lock id needs at least one key"
    );
}

#[test]
fn lock_id_serde_round_trip() {
    let id = lock_id!["db", 42, b"\x00\xff"];
    assert_eq!(roundtrip(&id), id);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn child_then_parent_is_identity(id in common::lock_id(), k in common::key()) {
        let child = id.child(k.clone());
        prop_assert_eq!(child.parent(), Some(id.clone()));
        prop_assert_eq!(child.last(), &k);
        prop_assert_eq!(child.depth(), id.depth() + 1);
        prop_assert!(id.is_ancestor_of(&child));
        prop_assert!(id < child);
    }

    #[test]
    fn ancestors_are_exactly_the_proper_prefixes(id in common::lock_id()) {
        let ancestors: Vec<LockId> = id.ancestors().collect();
        let prefixes: Vec<LockId> = (1..id.depth()).filter_map(|d| id.prefix(d)).collect();
        prop_assert_eq!(&ancestors, &prefixes);
        for (depth, a) in ancestors.iter().enumerate() {
            prop_assert_eq!(a.depth(), depth + 1);
            prop_assert!(a.is_ancestor_of(&id));
            prop_assert!(a < &id);
        }
        // Walking up with parent() visits the same ids, deepest first.
        let mut up = Vec::new();
        let mut cur = id.parent();
        while let Some(p) = cur {
            cur = p.parent();
            up.push(p);
        }
        up.reverse();
        prop_assert_eq!(up, ancestors);
        prop_assert_eq!(id.prefix(id.depth()), Some(id.clone()));
    }

    #[test]
    fn is_ancestor_of_means_proper_prefix(a in common::lock_id(), b in common::lock_id()) {
        let proper_prefix = a.depth() < b.depth() && b.keys()[..a.depth()] == *a.keys();
        prop_assert_eq!(a.is_ancestor_of(&b), proper_prefix);
        prop_assert_eq!(b.is_descendant_of(&a), proper_prefix);
        prop_assert!(!(a.is_ancestor_of(&b) && b.is_ancestor_of(&a)));
        prop_assert_eq!(
            a.is_related_to(&b),
            a == b || a.is_ancestor_of(&b) || b.is_ancestor_of(&a)
        );
    }

    /// Between an ancestor and its descendant in the order, there are only other descendants
    /// of the ancestor: a subtree is a contiguous range.
    #[test]
    fn a_subtree_is_a_contiguous_range(
        a in common::lock_id(),
        below in proptest::collection::vec(common::key(), 1..3),
        other in common::lock_id(),
    ) {
        let descendant = below.into_iter().fold(a.clone(), |id, k| id.child(k));
        prop_assert!(a < descendant);
        if a < other && other < descendant {
            prop_assert!(a.is_ancestor_of(&other), "{a} < {other} < {descendant}");
        }
        // The same with `other` placed inside the subtree by construction.
        let inside = a.child(other.keys()[0].clone());
        prop_assert!(a < inside && inside.is_descendant_of(&a));
    }

    #[test]
    fn keys_order_by_kind_then_content_shared_or_not(a in common::key(), b in common::key()) {
        fn reference(k: &Key) -> (u8, Vec<u8>, i128) {
            match k {
                Key::Int(i) => (0, Vec::new(), i128::from(*i)),
                Key::UInt(i) => (1, Vec::new(), i128::from(*i)),
                Key::Str(s) => (2, s.as_bytes().to_vec(), 0),
                Key::Bytes(b) => (3, b.to_vec(), 0),
            }
        }
        prop_assert_eq!(a.cmp(&b), reference(&a).cmp(&reference(&b)));
        prop_assert_eq!(a.cmp(&b) == std::cmp::Ordering::Equal, a == b);
        // A clone shares the allocation; an equal key built afresh does not.
        prop_assert_eq!(a.cmp(&a.clone()), std::cmp::Ordering::Equal);
        let fresh = match &a {
            Key::Int(i) => Key::Int(*i),
            Key::UInt(i) => Key::UInt(*i),
            Key::Str(s) => Key::from(s.to_string()),
            Key::Bytes(b) => Key::from(b.to_vec()),
        };
        prop_assert_eq!(a.cmp(&fresh), std::cmp::Ordering::Equal);
        prop_assert_eq!(a.partial_cmp(&b), Some(a.cmp(&b)));
    }

    #[test]
    fn order_is_lexicographic_by_key(a in common::lock_id(), b in common::lock_id()) {
        prop_assert_eq!(a.cmp(&b), a.keys().cmp(b.keys()));
        prop_assert_eq!(a == b, a.keys() == b.keys());
    }

    #[test]
    fn lock_id_round_trips(id in common::lock_id()) {
        prop_assert_eq!(roundtrip(&id), id);
    }

    #[test]
    fn agent_ids_round_trip_and_order_by_node_incarnation_serial(
        a in common::agent_id(), b in common::agent_id()
    ) {
        prop_assert_eq!(roundtrip(&a), a.clone());
        let key = |x: &AgentId| (x.node().clone(), x.incarnation(), x.serial());
        prop_assert_eq!(a.cmp(&b), key(&a).cmp(&key(&b)));
    }

    /// Equal ids hash alike, also when their node names are separate copies (each thread makes
    /// its own); ids apart in incarnation or serial hash apart (with 64-bit hashes, two such
    /// ids colliding would be a one-in-2^64 fluke of the seed, not a property of the ids).
    #[test]
    fn agent_ids_hash_as_they_compare(a in common::agent_id(), b in common::agent_id()) {
        use std::hash::BuildHasher;
        let h = std::collections::hash_map::RandomState::new();
        let copy = AgentId::new(
            NodeId::new(a.node().as_str()).unwrap(),
            a.incarnation(),
            a.serial(),
        );
        prop_assert_eq!(h.hash_one(&a), h.hash_one(&copy));
        if (a.incarnation(), a.serial()) != (b.incarnation(), b.serial()) {
            prop_assert_ne!(h.hash_one(&a), h.hash_one(&b));
        }
    }
}

#[test]
fn a_later_agent_on_a_node_is_larger() {
    let n = NodeId::new("n1").unwrap();
    let first = AgentId::new(n.clone(), 7, 1);
    let second = AgentId::new(n.clone(), 7, 2);
    assert!(first < second);
    // A restarted node (a later incarnation) counts serials from the start again, and its
    // agents are still larger than the agents of the earlier incarnation.
    let restarted = AgentId::new(n.clone(), 8, 0);
    assert!(second < restarted);
    let mut agents = [
        AgentId::new(NodeId::new("n2").unwrap(), 0, 0),
        restarted.clone(),
        first.clone(),
        second.clone(),
    ];
    agents.sort();
    assert_eq!(agents[..3], [first, second, restarted]);
    assert_eq!(agents[3].node().as_str(), "n2");
}

#[test]
fn node_names_are_validated() {
    assert_eq!(NodeId::new(""), Err(NodeNameError::Empty));
    assert_eq!(
        NodeId::new("x".repeat(256)),
        Err(NodeNameError::TooLong(256))
    );
    assert!(NodeId::new("x".repeat(255)).is_ok());
    let lookalikes = ["a\u{200b}", "a\u{202e}b", "\u{430}", "caf\u{e9}"];
    for bad in [
        "a b",
        "a\tb",
        "a\nb",
        "bell\u{7}",
        "nbsp\u{a0}x",
        "a,b",
        "a/b",
        "a=b",
    ]
    .into_iter()
    .chain(lookalikes)
    {
        assert_eq!(
            NodeId::new(bad),
            Err(NodeNameError::BadCharacter(bad.to_owned())),
            "{bad:?}"
        );
    }
    let ok = NodeId::try_from("node-1@host.example").unwrap();
    assert_eq!(ok.as_str(), "node-1@host.example");
    assert_eq!(ok.to_string(), "node-1@host.example");
    assert_eq!(NodeId::try_from(String::from("n")).unwrap().as_str(), "n");
}

#[test]
fn node_and_agent_ids_round_trip_and_bad_names_are_refused_on_the_wire() {
    let n = NodeId::new("n1").unwrap();
    assert_eq!(roundtrip(&n), n);
    let agent = AgentId::new(n.clone(), u64::MAX - 1, 3);
    assert_eq!(roundtrip(&agent), agent);
    assert_eq!(agent.to_string(), format!("<n1.{}.3>", u64::MAX - 1));
    // The largest incarnation is reserved for the lock servers' ghosts.
    let ghost = AgentId::ghost(n, 3);
    assert!(ghost.is_ghost() && !agent.is_ghost());
    assert_eq!(roundtrip(&ghost), ghost);
    assert_eq!(ghost.to_string(), "<n1.ghost.3>");
    let bytes = codec::encode(&"bad name", LIMIT).unwrap();
    let err = codec::decode::<NodeId>(&bytes, LIMIT).unwrap_err();
    assert!(err.to_string().contains("ASCII letters"), "{err}");
    let bytes = codec::encode(&"", LIMIT).unwrap();
    assert!(codec::decode::<NodeId>(&bytes, LIMIT).is_err());
}
