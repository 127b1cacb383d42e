//! The facts the documents quote, checked against the code: every file name they mention
//! exists, the crate table's dependencies are the manifests', the loss causes are the
//! `LossCause` names, and each number quoted for a block size, a limit or a default is the
//! value in the code. A change to one of them fails here until the document says the same.
//! (The hop table of ARCHITECTURE.md is checked by `locks-agent/tests/lock_path.rs`.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("examples/ is in the workspace")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The documents whose facts are checked.
fn documents() -> Vec<String> {
    let mut docs = vec!["ARCHITECTURE.md".to_string(), "README.md".to_string()];
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let name = entry.expect("docs/ entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs.sort();
    docs
}

/// Every file of the workspace (outside `target/` and dot directories), by path from the root.
fn workspace_files() -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("readable directory") {
            let entry = entry.expect("directory entry");
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" || name == "__pycache__" {
                continue;
            }
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/");
            if path.is_dir() {
                out.push(format!("{rel}/"));
                walk(&path, root, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &root(), &mut out);
    out
}

/// The text between backticks in `doc`.
fn code_spans(doc: &str) -> Vec<&str> {
    doc.split('`').skip(1).step_by(2).collect()
}

/// Whether a code span names a file or directory of ours: a path ending in one of our
/// extensions, or in `/`.
fn names_a_file(span: &str) -> bool {
    let exts = [".rs", ".md", ".proto", ".py", ".toml"];
    !span.contains(' ')
        && !span.contains("::")
        && !span.starts_with("--")
        && !span.contains('=')
        && !span.starts_with('/')
        && !span.starts_with('~')
        && !span.contains(['$', '<', '*'])
        && !exts.contains(&span)
        && (exts.iter().any(|e| span.ends_with(e)) || (span.ends_with('/') && span.len() > 1))
}

#[test]
fn every_file_the_documents_name_exists() {
    let files = workspace_files();
    // Names of files a reader makes or that a tool writes, not files of the repository.
    let not_ours = ["node.toml", "config.toml", "data/"];
    let mut missing = Vec::new();
    for doc in documents() {
        for span in code_spans(&read(&doc)) {
            if !names_a_file(span) || not_ours.contains(&span) {
                continue;
            }
            // A short path names the file whose path ends with it (`table/grant.rs`).
            let found = files
                .iter()
                .any(|f| f == span || f.ends_with(&format!("/{span}")));
            if !found {
                missing.push(format!("{doc}: `{span}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files the documents name that are not in the workspace:\n{}",
        missing.join("\n")
    );
}

/// The crates of ours a manifest depends on (normal dependencies only).
fn our_dependencies(krate: &str) -> BTreeSet<String> {
    let manifest = read(&format!("{krate}/Cargo.toml"));
    let mut deps = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps
            && let Some(name) = line.split(['.', ' ', '=']).next()
            && let Some(short) = name.strip_prefix("locks-")
        {
            deps.insert(short.to_string());
        }
    }
    deps
}

#[test]
fn the_crate_tables_dependencies_are_the_manifests() {
    let arch = read("ARCHITECTURE.md");
    let mut checked = 0;
    for row in arch.lines().filter(|l| l.starts_with("| `locks-")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let krate = cells[0].trim_start_matches("| ").trim_matches('`');
        let said = cells
            .last()
            .expect("a row has cells")
            .trim_end_matches(" |");
        let said: BTreeSet<String> = if said == "nothing of ours" {
            BTreeSet::new()
        } else {
            said.split(", ").map(str::to_string).collect()
        };
        assert_eq!(
            said,
            our_dependencies(krate),
            "ARCHITECTURE.md's crate table, row {krate}: the crates it depends on"
        );
        checked += 1;
    }
    assert_eq!(checked, 6, "the crate table has a row per locks-* crate");
}

/// Every loss cause, by its name; the match makes a new cause a compile error here.
fn loss_causes() -> Vec<&'static str> {
    use locks_agent::LossCause;
    let all = [
        LossCause::NodeDown,
        LossCause::LeaseExpired,
        LossCause::Surrendered,
        LossCause::Aborted,
        LossCause::Revoked,
    ];
    for cause in &all {
        match cause {
            LossCause::NodeDown
            | LossCause::LeaseExpired
            | LossCause::Surrendered
            | LossCause::Aborted
            | LossCause::Revoked => {}
        }
    }
    all.iter().map(|c| c.name()).collect()
}

#[test]
fn the_readme_lists_every_loss_cause() {
    let list = loss_causes()
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let readme = read("README.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        readme.contains(&format!("why ({list})")),
        "README.md's `lost()` paragraph lists the loss causes as ({list})"
    );
}

/// The value of `const NAME: type = value;` in a source file, underscores dropped.
fn constant(file: &str, name: &str) -> String {
    let source = read(file);
    let at = source
        .find(&format!("const {name}:"))
        .unwrap_or_else(|| panic!("{file} defines {name}"));
    let value = &source[at..];
    let value = &value[value.find('=').expect("a constant has a value") + 1..];
    let value = &value[..value.find(';').expect("a constant ends")];
    value.trim().replace('_', "")
}

/// `text` with runs of white space made one space, so that a fact may break across lines.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn assert_says(doc: &str, fact: &str) {
    assert!(
        flat(&read(doc)).contains(fact),
        "{doc} should say \"{fact}\" (the value in the code)"
    );
}

/// `n` with a comma every three digits, as the documents write numbers.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[test]
fn the_numbers_the_invariants_quote_are_the_codes() {
    let serial_block = constant("locks-server/src/router/agents.rs", "SERIAL_BLOCK");
    assert_says(
        "docs/invariants.md",
        &format!("blocks of `SERIAL_BLOCK` ({serial_block}; `locks-server/src/router/agents.rs`"),
    );
    let shards = constant("locks-server/src/local/mod.rs", "SHARDS");
    let sim_shards = constant("locks-testing/src/sim/tables.rs", "SIM_SHARDS");
    assert_says(
        "docs/invariants.md",
        &format!(
            "The node's table is {shards} `LockTable`s (`local/`; a simulated node has {sim_shards})"
        ),
    );
    let turn = constant("locks-server/src/local/whole.rs", "TURN");
    assert_eq!(turn, "Duration::frommillis(2)", "local/whole.rs's TURN");
    assert_says(
        "docs/invariants.md",
        "let in every 2 ms of it (`local/whole.rs`)",
    );
    let release_slice = constant("locks-server/src/local/whole.rs", "RELEASE_SLICE");
    assert_says(
        "docs/invariants.md",
        &format!("A transaction's own release is at most {release_slice} locks per shard at once"),
    );
}

#[test]
fn the_limit_tables_are_the_defaults() {
    let l = locks_grpc::Limits::default();
    let kib = |n: usize| format!("{} KiB", n / 1024);
    let mib = |n: usize| format!("{} MiB", n / (1024 * 1024));
    for doc in ["docs/grpc.md", "docs/operating.md"] {
        assert_says(
            doc,
            &format!(
                "| locks requested in one session | {}",
                grouped(l.max_locks)
            ),
        );
    }
    assert_says(
        "docs/grpc.md",
        &format!(
            "| sessions per client IP address / on the node | {} / {} |",
            l.max_sessions_per_client, l.max_sessions
        ),
    );
    assert_says(
        "docs/grpc.md",
        &format!(
            "| `lock` calls waiting at once in one session | {} |",
            l.max_pending
        ),
    );
    assert_says(
        "docs/grpc.md",
        &format!(
            "| {} / {} ({}) |",
            grouped(l.max_locks_per_client),
            grouped(l.max_locks_total),
            mib(l.max_lock_bytes_per_client)
        ),
    );
    assert_says(
        "docs/grpc.md",
        &format!(
            "| keys / bytes of keys in one lock id | {} / {} |",
            l.max_id_keys, l.max_id_bytes
        ),
    );
    assert_says(
        "docs/grpc.md",
        &format!("| nodes in one request | {} |", l.max_nodes),
    );
    assert_says("docs/grpc.md", &format!("| {} |", kib(l.max_message_bytes)));
    assert_says("docs/grpc.md", &format!("| {} |", mib(l.max_frame_bytes)));

    let q = locks_server::PeerQuotas::default();
    let as_usize = |n: u64| usize::try_from(n).expect("a quota fits a usize");
    assert_says(
        "docs/operating.md",
        &format!("| `locks` | {} |", grouped(as_usize(q.locks))),
    );
    assert_says(
        "docs/operating.md",
        &format!("| `queued` | {} |", grouped(as_usize(q.queued))),
    );
    assert_says(
        "docs/operating.md",
        &format!(
            "| `bytes` | {} ({}) |",
            grouped(as_usize(q.bytes)),
            mib(as_usize(q.bytes))
        ),
    );
}
