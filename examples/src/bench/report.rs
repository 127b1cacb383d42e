//! The report: the table on stdout, the comparisons with Redis and with the issue's goals, and
//! the same rows as JSON (an array with one object per row) for comparing commits.

use super::stats::RankBy;
use super::{Measured, Outcome, Row};
use std::fmt::Write as _;

/// A number in 3-4 significant characters: `1.23M`, `45.6k`, `812`, `3.14`.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e5 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A duration given in nanoseconds: `812ns`, `7.94µs`, `145µs`, `2.10ms`.
pub fn duration(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0}ns")
    } else if ns < 1e4 {
        format!("{:.2}µs", ns / 1e3)
    } else if ns < 1e6 {
        format!("{:.0}µs", ns / 1e3)
    } else {
        format!("{:.2}ms", ns / 1e6)
    }
}

/// The progress line's summary of a workload's rows.
pub fn progress_summary(rows: &[Row]) -> String {
    // One failure shared by every row (no lock path, say) is said once.
    if let Some(Outcome::Failed(first)) = rows.first().map(|r| &r.outcome)
        && rows
            .iter()
            .all(|r| matches!(&r.outcome, Outcome::Failed(e) if e == first))
    {
        return format!("FAILED ({first})");
    }
    rows.iter()
        .map(|r| match &r.outcome {
            Outcome::Measured(m) => {
                format!("{} {} {}", r.name.trim(), short_number(m.value), r.unit)
            }
            Outcome::Unavailable(_) => format!("{}: not available yet", r.name.trim()),
            Outcome::Failed(e) => format!("{}: FAILED ({e})", r.name.trim()),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn range(m: &Measured, unit: &str) -> String {
    if m.rounds <= 1 {
        return String::new();
    }
    match m.rank {
        RankBy::Rate => format!("{}-{} {unit}", short_number(m.min), short_number(m.max)),
        RankBy::P50 => format!("p50 {}-{}", duration(m.min), duration(m.max)),
    }
}

/// The table of every row.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<30} {:>16} {:>22} {:>9} {:>9} {:>18}  notes",
        "workload", "median round", "rounds min-max", "p50", "p99", "p50 / floor p50"
    );
    let _ = writeln!(out, "{}", "-".repeat(120));
    for row in rows {
        match &row.outcome {
            Outcome::Measured(m) => {
                let dash = || "-".to_string();
                let ratio = m
                    .floor
                    .map(|(f, r)| format!("{}x {}", short_number(r), f.short()))
                    .unwrap_or_else(dash);
                let _ = writeln!(
                    out,
                    "{:<30} {:>16} {:>22} {:>9} {:>9} {:>18}  {}",
                    row.name,
                    format!("{} {}", short_number(m.value), row.unit),
                    range(m, row.unit),
                    m.p50_ns.map(duration).unwrap_or_else(dash),
                    m.p99_ns.map(duration).unwrap_or_else(dash),
                    ratio,
                    m.notes.join(" "),
                );
            }
            Outcome::Unavailable(why) => {
                let _ = writeln!(out, "{:<30} {why}", row.name);
            }
            Outcome::Failed(why) => {
                let _ = writeln!(out, "{:<30} FAILED: {why}", row.name);
            }
        }
    }
    out
}

fn find<'a>(rows: &'a [Row], prefix: &str) -> Option<(&'a Row, &'a Measured)> {
    rows.iter()
        .find(|r| r.name.starts_with(prefix))
        .and_then(|r| r.measured().map(|m| (r, m)))
}

/// Our workloads beside the Redis mutex of the same run (empty without Redis rows).
pub fn redis_comparison(rows: &[Row]) -> String {
    let pairs = [
        ("W1 node-rt txn", "R-SEQ"),
        ("W1 foreign-rt txn", "R-SEQ"),
        ("W3 hot lock", "R-HOT"),
        ("C1 grpc local lock+unlock", "R-C redis 1 client"),
        ("C1 grpc 16 sessions", "R-C redis 16 clients"),
        ("C1 grpc 64 sessions", "R-C redis 64 clients"),
        ("C1 grpc 256 sessions", "R-C redis 256 clients"),
        ("PY python 1 thread", "R-C redis 1 client"),
        ("PY python 16 threads", "R-C redis 16 clients"),
    ];
    comparison(rows, "beside the Redis mutex of this run:\n", &pairs)
}

/// The gRPC API's rows beside etcd's of the same run (empty without etcd rows).
pub fn etcd_comparison(rows: &[Row]) -> String {
    let pairs = [
        ("C1 grpc local lock+unlock", "E1 etcd lock+unlock"),
        ("C1 grpc 16 sessions", "E1 etcd 16 sessions"),
        ("C1 grpc 64 sessions", "E1 etcd 64 sessions"),
        ("C1 grpc 256 sessions", "E1 etcd 256 sessions"),
        ("C2 grpc Majority 3 procs 64", "E1 etcd 64 sessions"),
        ("PY python 1 thread", "E1 etcd lock+unlock"),
        ("PY python 16 threads", "E1 etcd 16 sessions"),
    ];
    comparison(rows, "beside etcd in this run:\n", &pairs)
}

/// Each pair of rows (name prefixes, ours first) that both were measured: rates, their
/// ratio and the p50s.
fn comparison(rows: &[Row], title: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for &(ours, theirs) in pairs {
        let (Some((our_row, our)), Some((their_row, their))) =
            (find(rows, ours), find(rows, theirs))
        else {
            continue;
        };
        if out.is_empty() {
            out.push_str(title);
        }
        let latency = match (our.p50_ns, their.p50_ns) {
            (Some(a), Some(b)) => format!(
                "; p50 {} vs {} ({}x less)",
                duration(a),
                duration(b),
                short_number(b / a)
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  {:<18} {} {} vs {} {}: {}x{latency}{}",
            our_row.name,
            short_number(our.value),
            our_row.unit,
            their_row.name,
            short_number(their.value),
            short_number(our.value / their.value),
            if our.value > their.value {
                "; ahead"
            } else {
                "; BEHIND"
            },
        );
    }
    out
}

/// Every row with a goal, met or missed.
pub fn goals(rows: &[Row]) -> String {
    let mut out = String::new();
    for row in rows {
        if let Some(m) = row.measured()
            && let Some((text, met)) = m.goal
        {
            if out.is_empty() {
                out.push_str("goals:\n");
            }
            let _ = writeln!(
                out,
                "  {:<7} {:<28} {} {:<10} ({text})",
                if met { "met" } else { "MISSED" },
                row.name,
                short_number(m.value),
                row.unit,
            );
        }
    }
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "null".into()
    }
}

fn json_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "null".into(), json_num)
}

/// The rows as a JSON array, one object per row.
pub fn json(rows: &[Row], quick: bool) -> String {
    let objects: Vec<String> = rows
        .iter()
        .map(|row| {
            let mut fields = vec![
                format!("\"workload\":{}", json_str(row.name.trim())),
                format!("\"unit\":{}", json_str(row.unit)),
                format!("\"quick\":{quick}"),
            ];
            match &row.outcome {
                Outcome::Measured(m) => {
                    fields.push("\"status\":\"measured\"".into());
                    fields.push(format!("\"throughput\":{}", json_num(m.value)));
                    fields.push(format!(
                        "\"rank_by\":{}",
                        json_str(match m.rank {
                            RankBy::Rate => "throughput",
                            RankBy::P50 => "p50_ns",
                        })
                    ));
                    fields.push(format!("\"min\":{}", json_num(m.min)));
                    fields.push(format!("\"max\":{}", json_num(m.max)));
                    fields.push(format!("\"p50_ns\":{}", json_opt(m.p50_ns)));
                    fields.push(format!("\"p99_ns\":{}", json_opt(m.p99_ns)));
                    fields.push(format!("\"ops\":{}", m.ops));
                    fields.push(format!("\"rounds\":{}", m.rounds));
                    if let Some((floor, ratio)) = m.floor {
                        fields.push(format!("\"floor\":{}", json_str(floor.label())));
                        fields.push(format!("\"floor_ratio\":{}", json_num(ratio)));
                    }
                    if let Some((text, met)) = m.goal {
                        fields.push(format!("\"goal\":{}", json_str(text)));
                        fields.push(format!("\"goal_met\":{met}"));
                    }
                    let notes: Vec<String> = m.notes.iter().map(|n| json_str(n)).collect();
                    fields.push(format!("\"notes\":[{}]", notes.join(",")));
                }
                Outcome::Unavailable(why) => {
                    fields.push("\"status\":\"unavailable\"".into());
                    fields.push(format!("\"reason\":{}", json_str(why)));
                }
                Outcome::Failed(why) => {
                    fields.push("\"status\":\"failed\"".into());
                    fields.push(format!("\"reason\":{}", json_str(why)));
                }
            }
            format!("  {{{}}}", fields.join(","))
        })
        .collect();
    format!("[\n{}\n]\n", objects.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_are_short() {
        assert_eq!(short_number(1_234_567.0), "1.23M");
        assert_eq!(short_number(123_456.0), "123k");
        assert_eq!(short_number(12_345.0), "12.3k");
        assert_eq!(short_number(812.4), "812");
        assert_eq!(duration(812.0), "812ns");
        assert_eq!(duration(7_940.0), "7.94µs");
        assert_eq!(duration(145_000.0), "145µs");
        assert_eq!(duration(2_100_000.0), "2.10ms");
    }

    #[test]
    fn json_escapes_and_lists_every_row() {
        let rows = vec![
            Row::unavailable("W6 \"cluster\"", "not yet"),
            Row::failed("W1", "txn/s", "line\nbreak"),
        ];
        let j = json(&rows, true);
        assert!(j.contains(r#""workload":"W6 \"cluster\"""#));
        assert!(j.contains(r#""reason":"line\nbreak""#));
        assert_eq!(j.matches("\"status\"").count(), 2);
    }
}
