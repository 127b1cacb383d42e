//! W1-metrics: what recording costs the fast path. W1 (`uncontended`: begin, lock, end of an
//! uncontended local transaction, 20,000 times per round) first without a recorder, then with
//! the Prometheus recorder of the node binary's `--metrics` installed as the global recorder,
//! on a node started after it (a node's handles bind to the recorder installed when it
//! starts). Both on the node's runtime and on a foreign one; the recorded rows carry the cost
//! as a ratio of the plain rows' p50 and rate (`cost`: recorded p50 / plain p50).
//!
//! A global recorder can be installed only once per process and stays: the plain rows run
//! first, and a full run puts this workload last so that no other row runs with it.

use super::floors::Floor;
use super::uncontended::{w1, w1_specs};
use super::{Ctx, Row};
use metrics_exporter_prometheus::PrometheusBuilder;

/// The W1 rows without and then with the Prometheus recorder, the ratios on the recorded ones.
pub fn w1_metrics(ctx: &mut Ctx) -> Vec<Row> {
    let variants = [
        ("node-rt", Floor::ActixSame, true),
        ("foreign-rt", Floor::ActixFromTokio, false),
    ];
    let mut plain = Vec::new();
    for (variant, floor, on_node) in variants {
        let specs = w1_specs(&format!("{variant} plain"), floor, None, "W1-metrics");
        plain.push(w1(ctx, specs, on_node));
    }
    let installed = PrometheusBuilder::new()
        .set_buckets(&crate::node_cli::metrics::BUCKETS)
        .map_err(|e| e.to_string())
        .and_then(|b| b.install_recorder().map_err(|e| e.to_string()));
    let mut rows = Vec::new();
    for ((variant, floor, on_node), plain) in variants.into_iter().zip(plain) {
        let specs = w1_specs(&format!("{variant} recorded"), floor, None, "W1-metrics");
        let mut recorded = match &installed {
            Ok(_) => w1(ctx, specs, on_node),
            Err(e) => super::uncontended::fail(&specs, &format!("no recorder: {e}")),
        };
        if let (Some(p), Some(r)) = (
            plain.first().and_then(Row::measured),
            recorded.first().and_then(Row::measured),
        ) {
            let cost = r.p50_ns.zip(p.p50_ns).map(|(r, p)| r / p);
            let rate = p.value / r.value;
            let note = match cost {
                Some(cost) => format!("cost x{cost:.3} p50, x{rate:.3} rate vs plain"),
                None => format!("cost x{rate:.3} rate vs plain"),
            };
            eprintln!("W1-metrics {variant}: {note}");
            recorded[0].note(note);
        }
        rows.extend(plain);
        rows.extend(recorded);
    }
    rows
}
