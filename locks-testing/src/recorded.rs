//! What a node recorded through the `metrics` facade, read back in a test.
//!
//! A test makes a [`Recorded`], runs the code that registers its handles (starting a node)
//! inside [`Recorded::scope`] (a thread-local recorder: tests of one binary do not share it),
//! and reads counters, gauges and histogram counts by name and labels. The handles stay bound to
//! this recorder whichever thread records through them later; handles registered outside the
//! scope (on another thread) record elsewhere.
//!
//! A `DebuggingRecorder` snapshot resets what it reads, so [`Recorded`] adds counters up
//! across snapshots and keeps the latest value of each gauge (a gauge not set again between
//! two reads reads 0).

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::collections::HashMap;

/// A recorder for one test and what it has read so far.
pub struct Recorded {
    recorder: DebuggingRecorder,
    snapshotter: Snapshotter,
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, usize>,
    descriptions: HashMap<String, String>,
}

impl Default for Recorded {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorded {
    /// A fresh recorder; nothing read yet.
    pub fn new() -> Recorded {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        Recorded {
            recorder,
            snapshotter,
            counters: HashMap::new(),
            gauges: HashMap::new(),
            histograms: HashMap::new(),
            descriptions: HashMap::new(),
        }
    }

    /// Runs `f` with this recorder as the thread's recorder: the handles it registers record
    /// here.
    pub fn scope<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&self.recorder, f)
    }

    /// The total of counter `name` with exactly `labels` (in any order), as of now.
    pub fn counter(&mut self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.read();
        self.counters.get(&key(name, labels)).copied().unwrap_or(0)
    }

    /// The value of gauge `name` with exactly `labels` as this read finds it (0 unless it was
    /// set since the previous read: ask for one gauge per read).
    pub fn gauge(&mut self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.read();
        self.gauges.get(&key(name, labels)).copied().unwrap_or(0.0)
    }

    /// How many values histogram `name` with exactly `labels` has recorded, as of now.
    pub fn histogram_count(&mut self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.read();
        self.histograms
            .get(&key(name, labels))
            .copied()
            .unwrap_or(0)
    }

    /// The help text the recorder was given for `name`, if a metric of that name was read.
    pub fn description(&mut self, name: &str) -> Option<String> {
        self.read();
        self.descriptions.get(name).cloned()
    }

    fn read(&mut self) {
        for (composite, _, help, value) in self.snapshotter.snapshot().into_vec() {
            let k = composite.key();
            if let Some(help) = help {
                self.descriptions
                    .insert(k.name().to_owned(), help.to_string());
            }
            let labels: Vec<(&str, &str)> = k.labels().map(|l| (l.key(), l.value())).collect();
            let key = key(k.name(), &labels);
            match value {
                DebugValue::Counter(n) => *self.counters.entry(key).or_default() += n,
                DebugValue::Gauge(g) => {
                    self.gauges.insert(key, g.into_inner());
                }
                DebugValue::Histogram(values) => {
                    *self.histograms.entry(key).or_default() += values.len()
                }
            }
        }
    }
}

/// `name{k1=v1,k2=v2}` with the labels sorted.
fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}
