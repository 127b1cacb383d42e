//! The rows of the report: what a reported quantity is ([`Spec`]), the goal of the issue it is
//! checked against ([`Goal`]), and what came of it ([`Row`]).

use super::floors::Floor;
use super::stats::RankBy;

/// A goal of the project, checked (and printed) against a measured row.
#[derive(Debug, Clone, Copy)]
pub struct Goal {
    /// The goal as the issue states it, with the original's figure.
    pub text: &'static str,
    /// What must hold for it to be met.
    pub check: Check,
}

/// How a [`Goal`] is checked.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// The throughput is at least this.
    RateAtLeast(f64),
    /// The p50 is at most this many microseconds.
    P50AtMostUs(f64),
    /// The value (for example bytes per lock) is at most this.
    ValueAtMost(f64),
    /// The ratio to the row's floor is at most this.
    FloorRatioAtMost(f64),
    /// Decided by the workload after its rounds, from the figures of several rows
    /// ([`Row::decide_goal`]); missed until then.
    AfterRounds,
    /// No deadlock cycle was left unresolved: met unless the workload calls
    /// [`Row::goal_missed`] after its rounds.
    NoneUnresolved,
}

/// What one reported quantity is.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The row's name, for example `W1 node-rt txn`.
    pub name: String,
    /// The throughput unit, for example `txn/s`.
    pub unit: &'static str,
    /// How the median round is chosen.
    pub rank: RankBy,
    /// The floor its ratio is taken against.
    pub floor: Option<Floor>,
    /// The goal for it.
    pub goal: Option<Goal>,
}

impl Spec {
    /// A quantity ranked by throughput.
    pub fn rate(name: impl Into<String>, unit: &'static str, floor: Floor) -> Spec {
        Spec {
            name: name.into(),
            unit,
            rank: RankBy::Rate,
            floor: Some(floor),
            goal: None,
        }
    }

    /// A quantity ranked by p50 latency.
    pub fn latency(name: impl Into<String>, unit: &'static str, floor: Floor) -> Spec {
        Spec {
            rank: RankBy::P50,
            ..Spec::rate(name, unit, floor)
        }
    }

    /// With a goal.
    pub fn goal(mut self, text: &'static str, check: Check) -> Spec {
        self.goal = Some(Goal { text, check });
        self
    }
}

/// One row of the report.
#[derive(Debug, Clone)]
pub struct Row {
    /// The quantity's name.
    pub name: String,
    /// The throughput (or value) unit.
    pub unit: &'static str,
    /// What came of it.
    pub outcome: Outcome,
}

/// A measured row, or why there is none.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Measured.
    Measured(Measured),
    /// The workload cannot run in this build (it needs a crate that does not exist yet).
    Unavailable(String),
    /// The workload ran and failed (an error, or no progress within the time limit).
    Failed(String),
}

/// The figures of a measured row.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Throughput of the median round (or the value, for MEM).
    pub value: f64,
    /// How the median round was chosen; `min` and `max` are of that figure.
    pub rank: RankBy,
    /// The lowest round's ranking figure (throughput, or p50 in ns).
    pub min: f64,
    /// The highest round's ranking figure.
    pub max: f64,
    /// p50 latency of the median round, in ns.
    pub p50_ns: Option<f64>,
    /// p99 latency of the median round, in ns.
    pub p99_ns: Option<f64>,
    /// Operations in the median round.
    pub ops: u64,
    /// Timed rounds.
    pub rounds: usize,
    /// The floor and this row's ratio to it.
    pub floor: Option<(Floor, f64)>,
    /// The goal and whether it is met.
    pub goal: Option<(&'static str, bool)>,
    /// Extra figures (`name=value`).
    pub notes: Vec<String>,
}

impl Row {
    /// A row that could not be measured.
    pub fn failed(name: impl Into<String>, unit: &'static str, why: impl Into<String>) -> Row {
        Row {
            name: name.into(),
            unit,
            outcome: Outcome::Failed(why.into()),
        }
    }

    /// A workload that does not exist in this build yet.
    pub fn unavailable(name: impl Into<String>, why: impl Into<String>) -> Row {
        Row {
            name: name.into(),
            unit: "",
            outcome: Outcome::Unavailable(why.into()),
        }
    }

    /// The measured figures, if any.
    pub fn measured(&self) -> Option<&Measured> {
        match &self.outcome {
            Outcome::Measured(m) => Some(m),
            _ => None,
        }
    }

    /// Marks the row's goal as missed (for checks only the workload can make).
    pub fn goal_missed(&mut self) {
        if let Outcome::Measured(Measured {
            goal: Some((_, met)),
            ..
        }) = &mut self.outcome
        {
            *met = false;
        }
    }

    /// Decides the row's goal (for a [`Check::AfterRounds`] goal); nothing if it has none.
    pub fn decide_goal(&mut self, met: bool) {
        if let Outcome::Measured(Measured {
            goal: Some((_, m)), ..
        }) = &mut self.outcome
        {
            *m = met;
        }
    }

    /// Adds a note to a measured row.
    pub fn note(&mut self, note: String) {
        if let Outcome::Measured(m) = &mut self.outcome {
            m.notes.push(note);
        }
    }
}
