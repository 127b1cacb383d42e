//! The last lines of a run's trace, for failure reports.

use std::collections::VecDeque;
use std::fmt;

/// A ring of the last trace lines (keeping none with a capacity of 0).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    lines: VecDeque<String>,
    capacity: usize,
}

impl Trace {
    /// A trace of at most `capacity` lines.
    pub fn new(capacity: usize) -> Trace {
        Trace {
            lines: VecDeque::new(),
            capacity,
        }
    }

    /// Whether lines are kept at all (callers skip building lines nobody keeps).
    pub fn on(&self) -> bool {
        self.capacity > 0
    }

    /// Adds a line, forgetting the oldest when full.
    pub fn push(&mut self, line: String) {
        if self.capacity == 0 {
            return;
        }
        if self.lines.len() >= self.capacity {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }
}

/// The lines, oldest first, one per line.
impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, line) in self.lines.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(line)?;
        }
        Ok(())
    }
}
