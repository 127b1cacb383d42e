//! A member keeps the largest term it accepted in its node's data directory: a member started
//! again on that node leads with a larger term than any recorded, whatever the lock versions;
//! a damaged record stops the member at start. Every wait is bounded.

mod common;

use common::bounded;
use common::dict::Dict;
use locks_core::{Key, codec};
use locks_leader::{Error, Member, Role, Term, start};
use locks_server::{DataDir, Node, NodeConfig};
use std::path::PathBuf;

const MAGIC: &[u8; 8] = b"LOCKS-TM";

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let path = std::env::temp_dir().join(format!("locks-leader-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    TempDir(path)
}

async fn node(dir: &TempDir) -> Node {
    Node::start(NodeConfig::new("t").data_dir(&dir.0))
        .await
        .unwrap()
}

async fn leader_of(member: &Member<Dict>) -> Term {
    bounded(async {
        let mut rx = member.changes();
        loop {
            if let Some(t) = rx.current() {
                return t;
            }
            rx.changed().await.unwrap();
        }
    })
    .await
}

/// Starts a node on `dir` and a member of group `g` on it; returns the node and the member's
/// term once it leads (the member stopped).
async fn lead_once(dir: &TempDir) -> (Node, Term) {
    let n = node(dir).await;
    let m: Member<Dict> = bounded(start(&n, "g", Dict::default(), Role::Candidate))
        .await
        .unwrap();
    let term = leader_of(&m).await;
    m.stop().await;
    (n, term)
}

/// The name of the one term record in `dir`.
fn record_name(dir: &DataDir) -> String {
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("term-"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].clone()
}

#[tokio::test]
async fn a_member_started_again_leads_with_a_term_above_the_recorded_one() {
    let dir = temp_dir("recall");
    let (n, first) = lead_once(&dir).await;
    // The record holds the term; move it far above what the lock versions will be.
    let data = n.data_dir().unwrap();
    let name = record_name(data);
    let payload = data
        .read_record(&name, MAGIC)
        .unwrap()
        .expect("a term record");
    let (group, mut term): (Key, Term) = codec::decode(&payload, 1 << 16).unwrap();
    assert_eq!((group, &term), (Key::from("g"), &first));
    term.epoch += 1 << 50;
    let planted = term.clone();
    data.write_record(
        &name,
        MAGIC,
        &codec::encode(&(Key::from("g"), term), 1 << 16).unwrap(),
    )
    .unwrap();
    n.shutdown().await;

    let (n, second) = lead_once(&dir).await;
    assert!(second > planted, "{second} after {planted}");
    n.shutdown().await;
}

#[tokio::test]
async fn a_damaged_term_record_stops_the_member_at_start() {
    let dir = temp_dir("damaged");
    let (n, _) = lead_once(&dir).await;
    let path = n
        .data_dir()
        .unwrap()
        .path()
        .join(record_name(n.data_dir().unwrap()));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[18] ^= 0x55;
    std::fs::write(&path, bytes).unwrap();
    let Err(err) = bounded(start(&n, "g", Dict::default(), Role::Candidate)).await else {
        panic!("a damaged record is refused");
    };
    assert!(
        matches!(&err, Error::DataDir(m) if m.contains("corrupt")),
        "{err}"
    );
    n.shutdown().await;
}
