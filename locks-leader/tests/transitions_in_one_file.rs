//! `core/election.rs` says every transition of a member's state is made there. This keeps it
//! true: no other source file of the crate assigns a member's `state` (the member's
//! constructor, which sets the first state, is the one exception).

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the crate's sources are readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn only_election_rs_changes_a_members_state() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("core/election.rs")),
        "core/election.rs exists"
    );
    let mut elsewhere = Vec::new();
    for file in &files {
        if file.ends_with("core/election.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable source file");
        for (n, line) in text.lines().enumerate() {
            if line.contains(".state = ") {
                elsewhere.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "a member's state changes outside core/election.rs:\n{}",
        elsewhere.join("\n")
    );
}
