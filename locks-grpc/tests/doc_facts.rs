//! The defaults that docs/operating.md's table of the client port's limits quotes are the
//! code's: each row's default column starts with the values of the settings it names.

use locks_grpc::{GrpcConfig, Limits, PortLimits};

const DOC: &str = include_str!("../../docs/operating.md");

/// `4096` as the docs write it: `4,096`.
fn n(v: usize) -> String {
    let digits = v.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `65536` as a size: `64 KiB`, `4 MiB`.
fn size(v: usize) -> String {
    match v {
        v if v.is_multiple_of(1 << 20) => format!("{} MiB", v >> 20),
        v if v.is_multiple_of(1 << 10) => format!("{} KiB", v >> 10),
        v => n(v),
    }
}

/// The default column of the table row whose first column is `label`.
fn default_of(label: &str) -> &'static str {
    let section = DOC
        .split("## The client port's limits")
        .nth(1)
        .expect("docs/operating.md has the client port's limits");
    let row = section
        .lines()
        .find(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no row {label:?} in docs/operating.md"));
    row.split(" | ").nth(1).unwrap_or_default()
}

fn says(label: &str, values: &[String]) {
    let expected = values.join(" / ");
    let got = default_of(label);
    assert!(
        got.starts_with(&expected),
        "docs/operating.md, {label:?}: {got:?} should start with {expected:?}"
    );
}

#[test]
fn the_client_ports_limits_in_docs_operating_md_are_the_defaults() {
    let l = Limits::default();
    let p = PortLimits::default();
    says("connections open at once", &[n(p.max_connections)]);
    says(
        "connections from one IP address",
        &[n(p.max_connections_per_client)],
    );
    says(
        "connections without a call carrying the token yet (*unproven*)",
        &[n(p.max_unproven)],
    );
    says(
        "time a connection may stay without an open call (*idle*)",
        &[format!("{} s", p.idle_timeout.as_secs())],
    );
    says(
        "calls open at once on one connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`)",
        &[n(p.max_calls_per_connection as usize)],
    );
    says(
        "calls open at once from one IP address / on the node",
        &[n(p.max_calls_per_client), n(p.max_calls)],
    );
    says(
        "bytes of one call's request headers",
        &[size(p.max_header_bytes as usize)],
    );
    says(
        "sessions (and campaigns, and table and graph reads while they run) from one IP address / on the node",
        &[n(l.max_sessions_per_client), n(l.max_sessions)],
    );
    says(
        "`lock` calls waiting at once in one session",
        &[n(l.max_pending)],
    );
    says("locks requested in one session", &[n(l.max_locks)]);
    says(
        "locks requested by the sessions of one IP address together / their ids' bytes",
        &[n(l.max_locks_per_client), size(l.max_lock_bytes_per_client)],
    );
    says(
        "locks requested by every session of the node together",
        &[n(l.max_locks_total)],
    );
    says(
        "keys / bytes of keys in one lock id",
        &[n(l.max_id_keys), n(l.max_id_bytes)],
    );
    says("nodes named in one request", &[n(l.max_nodes)]);
    says("bytes in one session request", &[size(l.max_message_bytes)]);
    says(
        "bytes in one message on the wire",
        &[size(l.max_frame_bytes)],
    );
    let keepalive = GrpcConfig::new("127.0.0.1:0".parse().unwrap()).keepalive;
    says(
        "the keepalive bound (`--client-keepalive-ms`)",
        &[format!("{} s", keepalive.as_secs())],
    );
    // The unproven deadline is said in the same cell.
    assert!(
        default_of("connections without a call carrying the token yet (*unproven*)")
            .contains(&format!("{} s after", p.unproven_deadline.as_secs())),
    );
}
