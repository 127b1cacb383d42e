//! Lock modes and the tables that relate them.
//!
//! This module owns [`Mode`], the six standard modes of StickyLocking, and
//! [`ModeTable`], the pair of matrices that decide whether a request is compatible with what is
//! held and which mode a group of holders has together.
//!
//! Invariants of every [`ModeTable`] (checked by [`ModeTable::custom`]):
//! - both matrices are square over the table's modes;
//! - the group matrix is commutative and idempotent, and only yields modes of the table;
//! - compatibility is symmetric;
//! - for two compatible modes `a` and `b`, a mode `c` is compatible with `group(a, b)` exactly
//!   when it is compatible with both `a` and `b` (so testing a request against a group mode is
//!   the same as testing it against every member);
//! - every mode has an intention mode (the mode its ancestors are locked in), which is a mode of
//!   the table and its own intention.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One of the six lock modes of StickyLocking.
///
/// | mode | meaning |
/// | --- | --- |
/// | `IS` | intention shared: a descendant is (or will be) read |
/// | `IX` | intention exclusive: a descendant is (or will be) written |
/// | `S` | shared: read this resource and everything below it |
/// | `SIX` | shared + intention exclusive: read all, write some descendants |
/// | `U` | update: read now, may convert to `X` later; only one `U` at a time |
/// | `X` | exclusive: write this resource and everything below it |
#[allow(clippy::upper_case_acronyms)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum Mode {
    /// Intention shared.
    IS = 0,
    /// Intention exclusive.
    IX = 1,
    /// Shared.
    S = 2,
    /// Shared with intention exclusive.
    SIX = 3,
    /// Update.
    U = 4,
    /// Exclusive.
    X = 5,
}

impl Mode {
    /// The mode of a plain read lock: [`Mode::S`].
    pub const READ: Mode = Mode::S;
    /// The mode of a plain write lock: [`Mode::X`].
    pub const WRITE: Mode = Mode::X;
    /// All six modes, in matrix order (the order of the rows and columns in StickyLocking).
    pub const ALL: [Mode; 6] = [Mode::IS, Mode::IX, Mode::S, Mode::SIX, Mode::U, Mode::X];
    /// How many modes there are.
    pub const COUNT: usize = 6;

    /// The row/column of this mode in the matrices.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The mode at matrix position `index`, if there is one.
    pub const fn from_index(index: usize) -> Option<Mode> {
        match index {
            0 => Some(Mode::IS),
            1 => Some(Mode::IX),
            2 => Some(Mode::S),
            3 => Some(Mode::SIX),
            4 => Some(Mode::U),
            5 => Some(Mode::X),
            _ => None,
        }
    }

    /// The intention mode the standard table takes on every ancestor of a lock held in this
    /// mode: `IS` for `IS` and `S`, `IX` for `IX`, `SIX`, `U` and `X`.
    pub const fn intention(self) -> Mode {
        match self {
            Mode::IS | Mode::S => Mode::IS,
            Mode::IX | Mode::SIX | Mode::U | Mode::X => Mode::IX,
        }
    }

    /// The short name used in StickyLocking's tables (`"IS"`, `"SIX"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Mode::IS => "IS",
            Mode::IX => "IX",
            Mode::S => "S",
            Mode::SIX => "SIX",
            Mode::U => "U",
            Mode::X => "X",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = ModeTableError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .or_else(|| {
                if s.eq_ignore_ascii_case("read") {
                    Some(Mode::READ)
                } else if s.eq_ignore_ascii_case("write") {
                    Some(Mode::WRITE)
                } else {
                    None
                }
            })
            .ok_or_else(|| ModeTableError::UnknownModeName(s.to_owned()))
    }
}

/// Why a custom mode table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModeTableError {
    /// The table names no modes.
    #[error("a mode table needs at least one mode")]
    NoModes,
    /// A mode is listed twice.
    #[error("mode {0} is listed twice")]
    DuplicateMode(Mode),
    /// A matrix does not have one row per mode, or a row does not have one cell per mode (or
    /// the intention list does not have one entry per mode).
    #[error(
        "the {matrix} matrix is not square over the {modes} modes of the table: {}",
        describe_shape(*.row, *.len)
    )]
    NotSquare {
        /// `"compatibility"`, `"group"` or `"intention"`.
        matrix: &'static str,
        /// How many modes the table has.
        modes: usize,
        /// The offending row, or `None` when the number of rows (entries) is wrong.
        row: Option<usize>,
        /// How many cells the row has, or how many rows (entries) there are.
        len: usize,
    },
    /// The compatibility matrix is not symmetric.
    #[error(
        "compatibility is not symmetric: compatible({a}, {b}) differs from compatible({b}, {a})"
    )]
    NotSymmetric {
        /// First mode.
        a: Mode,
        /// Second mode.
        b: Mode,
    },
    /// The group matrix names a mode outside the table.
    #[error("group({a}, {b}) = {result}, which is not a mode of this table")]
    GroupOutsideTable {
        /// First mode.
        a: Mode,
        /// Second mode.
        b: Mode,
        /// The mode the cell names.
        result: Mode,
    },
    /// `group(a, b) != group(b, a)`.
    #[error(
        "the group matrix is not commutative: group({a}, {b}) = {ab} but group({b}, {a}) = {ba}"
    )]
    NotCommutative {
        /// First mode.
        a: Mode,
        /// Second mode.
        b: Mode,
        /// `group(a, b)`.
        ab: Mode,
        /// `group(b, a)`.
        ba: Mode,
    },
    /// `group(a, a) != a`.
    #[error("the group matrix is not idempotent: group({a}, {a}) = {aa}")]
    NotIdempotent {
        /// The mode.
        a: Mode,
        /// `group(a, a)`.
        aa: Mode,
    },
    /// The group of two compatible modes does not behave like the pair towards a third mode.
    #[error(
        "group({a}, {b}) = {group} is {verdict} with {c}, but {c} is {expected} with both {a} and {b}"
    )]
    GroupNotFaithful {
        /// First member.
        a: Mode,
        /// Second member.
        b: Mode,
        /// Their group mode.
        group: Mode,
        /// The mode tested against the group.
        c: Mode,
        /// What the group says (`"compatible"`/`"incompatible"`).
        verdict: &'static str,
        /// What the members say.
        expected: &'static str,
    },
    /// An intention mode is missing from the table or is not its own intention.
    #[error(
        "the intention mode of {mode} is {intention}, which is not a mode of this table or not its own intention"
    )]
    BadIntention {
        /// The mode.
        mode: Mode,
        /// Its intention mode.
        intention: Mode,
    },
    /// A mode name was not recognised.
    #[error(
        "unknown mode name {} (expected IS, IX, S, SIX, U, X, read or write)",
        crate::escape::Escaped::bounded(.0, 32)
    )]
    UnknownModeName(String),
}

fn describe_shape(row: Option<usize>, len: usize) -> String {
    match row {
        Some(row) => format!("row {row} has {len} cells"),
        None => format!("it has {len} rows"),
    }
}

/// The compatibility and group-mode matrices over a set of modes, plus the intention mode each
/// mode takes on ancestors.
///
/// `ModeTable::standard()` is StickyLocking's table. A lock server uses one table for all its locks;
/// nodes of one cluster must use the same one.
///
/// Serialized as the arguments of [`ModeTable::custom`]; deserializing validates them like
/// any custom table, so a table read from outside cannot break the invariants.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ModeTableSpec", into = "ModeTableSpec")]
pub struct ModeTable {
    name: String,
    modes: Vec<Mode>,
    /// `compat[requested][held]`, indexed by [`Mode::index`]; `false` outside the table.
    compat: [[bool; Mode::COUNT]; Mode::COUNT],
    /// `group[requested][current]`; `None` outside the table.
    group: [[Option<Mode>; Mode::COUNT]; Mode::COUNT],
    intention: [Option<Mode>; Mode::COUNT],
}

impl fmt::Debug for ModeTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModeTable")
            .field("name", &self.name)
            .field("modes", &self.modes)
            .finish_non_exhaustive()
    }
}

const T: bool = true;
const F: bool = false;

/// StickyLocking, "Lock Mode Compatibility": rows are the requested mode, columns the held mode.
const STANDARD_COMPAT: [[bool; 6]; 6] = [
    //IS IX S  SIX U  X
    [T, T, T, T, T, F], // IS
    [T, T, F, F, F, F], // IX
    [T, F, T, F, T, F], // S
    [T, F, F, F, F, F], // SIX
    [T, F, T, F, F, F], // U
    [F, F, F, F, F, F], // X
];

/// StickyLocking, "Lock Group Mode": rows are the requested mode, columns the current group mode.
const STANDARD_GROUP: [[Mode; 6]; 6] = {
    use Mode::*;
    [
        //IS IX   S    SIX  U    X
        [IS, IX, S, SIX, U, X],       // IS
        [IX, IX, SIX, SIX, X, X],     // IX
        [S, SIX, S, SIX, U, X],       // S
        [SIX, SIX, SIX, SIX, SIX, X], // SIX
        [U, X, U, SIX, U, X],         // U
        [X, X, X, X, X, X],           // X
    ]
};

impl ModeTable {
    /// StickyLocking's table: the six standard modes with its compatibility and group matrices, cell
    /// for cell, and the intention modes `IS` (for `IS`, `S`) and `IX` (for the rest).
    pub fn standard() -> ModeTable {
        let mut group = [[None; 6]; 6];
        for (r, row) in STANDARD_GROUP.iter().enumerate() {
            for (c, cell) in row.iter().enumerate() {
                group[r][c] = Some(*cell);
            }
        }
        ModeTable {
            name: "standard".to_owned(),
            modes: Mode::ALL.to_vec(),
            compat: STANDARD_COMPAT,
            group,
            intention: Mode::ALL.map(|m| Some(m.intention())),
        }
    }

    /// A plain shared/exclusive table: `S` (read) and `X` (write), plus the intention modes `IS`
    /// and `IX` that hierarchy needs on ancestors. It is the standard table restricted to
    /// `IS`, `IX`, `S` and `X`, so locks behave exactly like the Erlang application's read and
    /// write locks.
    pub fn shared_exclusive() -> ModeTable {
        let modes = [Mode::IS, Mode::IX, Mode::S, Mode::X];
        let compat: Vec<Vec<bool>> = modes
            .iter()
            .map(|r| {
                modes
                    .iter()
                    .map(|c| STANDARD_COMPAT[r.index()][c.index()])
                    .collect()
            })
            .collect();
        let group: Vec<Vec<Mode>> = modes
            .iter()
            .map(|r| {
                modes
                    .iter()
                    .map(|c| match STANDARD_GROUP[r.index()][c.index()] {
                        // IX with S is SIX in the standard table; without SIX the group must
                        // exclude what either member excludes, which only X does.
                        Mode::SIX => Mode::X,
                        m => m,
                    })
                    .collect()
            })
            .collect();
        // Every cell above is drawn from a validated table, so validation cannot fail; if it
        // ever did, the standard table is the safe fallback.
        ModeTable::custom(
            "shared_exclusive",
            &modes,
            &compat,
            &group,
            &[Mode::IS, Mode::IX, Mode::IS, Mode::IX],
        )
        .unwrap_or_else(|_| ModeTable::standard())
    }

    /// Builds and validates a custom table (StickyLocking's "installable lock modes").
    ///
    /// `compatible[i][j]` says whether a request in `modes[i]` is compatible with a hold in
    /// `modes[j]`; `group[i][j]` is the group mode of `modes[i]` joining a group in `modes[j]`;
    /// `intention[i]` is the mode taken on every ancestor of a lock held in `modes[i]`.
    /// The invariants of the module documentation are checked; the first one broken is
    /// returned as the error.
    pub fn custom(
        name: &str,
        modes: &[Mode],
        compatible: &[Vec<bool>],
        group: &[Vec<Mode>],
        intention: &[Mode],
    ) -> Result<ModeTable, ModeTableError> {
        if modes.is_empty() {
            return Err(ModeTableError::NoModes);
        }
        for (i, m) in modes.iter().enumerate() {
            if modes[..i].contains(m) {
                return Err(ModeTableError::DuplicateMode(*m));
            }
        }
        let n = modes.len();
        check_square("compatibility", n, compatible.iter().map(Vec::len))?;
        check_square("group", n, group.iter().map(Vec::len))?;
        if intention.len() != n {
            return Err(ModeTableError::NotSquare {
                matrix: "intention",
                modes: n,
                row: None,
                len: intention.len(),
            });
        }
        let mut table = ModeTable {
            name: name.to_owned(),
            modes: modes.to_vec(),
            compat: [[false; 6]; 6],
            group: [[None; 6]; 6],
            intention: [None; 6],
        };
        for (i, a) in modes.iter().enumerate() {
            for (j, b) in modes.iter().enumerate() {
                table.compat[a.index()][b.index()] = compatible[i][j];
                let g = group[i][j];
                if !modes.contains(&g) {
                    return Err(ModeTableError::GroupOutsideTable {
                        a: *a,
                        b: *b,
                        result: g,
                    });
                }
                table.group[a.index()][b.index()] = Some(g);
            }
            table.intention[a.index()] = Some(intention[i]);
        }
        table.validate()?;
        Ok(table)
    }

    /// Checks the invariants in a fixed order, one property over all cells at a time, so the
    /// error names the first broken property (symmetry, idempotence, commutativity, intention,
    /// then faithfulness of the group) rather than whichever cell a loop met first.
    fn validate(&self) -> Result<(), ModeTableError> {
        let modes = &self.modes;
        let pairs = || {
            modes
                .iter()
                .flat_map(move |&a| modes.iter().map(move |&b| (a, b)))
        };
        if let Some((a, b)) = pairs().find(|&(a, b)| self.compatible(a, b) != self.compatible(b, a))
        {
            return Err(ModeTableError::NotSymmetric { a, b });
        }
        if let Some(&a) = modes.iter().find(|&&a| self.group(a, a) != a) {
            return Err(ModeTableError::NotIdempotent {
                a,
                aa: self.group(a, a),
            });
        }
        if let Some((a, b)) = pairs().find(|&(a, b)| self.group(a, b) != self.group(b, a)) {
            return Err(ModeTableError::NotCommutative {
                a,
                b,
                ab: self.group(a, b),
                ba: self.group(b, a),
            });
        }
        for &mode in modes {
            let intention = self.intention(mode);
            if !self.contains(intention) || self.intention(intention) != intention {
                return Err(ModeTableError::BadIntention { mode, intention });
            }
        }
        for (a, b) in pairs().filter(|&(a, b)| self.compatible(a, b)) {
            let group = self.group(a, b);
            for &c in modes {
                let with_group = self.compatible(c, group);
                let with_both = self.compatible(c, a) && self.compatible(c, b);
                if with_group != with_both {
                    let word = |v: bool| if v { "compatible" } else { "incompatible" };
                    return Err(ModeTableError::GroupNotFaithful {
                        a,
                        b,
                        group,
                        c,
                        verdict: word(with_group),
                        expected: word(with_both),
                    });
                }
            }
        }
        Ok(())
    }

    /// The table's name (`"standard"`, `"shared_exclusive"` or the custom name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The modes of this table, in the order they were given.
    pub fn modes(&self) -> &[Mode] {
        &self.modes
    }

    /// Whether `mode` belongs to this table. Lock servers refuse requests in other modes.
    pub fn contains(&self, mode: Mode) -> bool {
        self.group[mode.index()][mode.index()].is_some()
    }

    /// Whether a request in mode `requested` can be granted next to a holder in mode `held`.
    /// Modes outside the table are compatible with nothing.
    #[inline]
    pub fn compatible(&self, requested: Mode, held: Mode) -> bool {
        self.compat[requested.index()][held.index()]
    }

    /// The mode of a group in mode `current` after a member in mode `requested` joins it.
    /// Also the mode an agent holding `current` needs to additionally satisfy `requested`.
    /// For a mode outside the table the answer is [`Mode::X`], the strictest.
    #[inline]
    pub fn group(&self, requested: Mode, current: Mode) -> Mode {
        self.group[requested.index()][current.index()].unwrap_or(Mode::X)
    }

    /// Whether holding `held` already gives everything `requested` asks for
    /// (`group(requested, held) == held`).
    #[inline]
    pub fn covers(&self, held: Mode, requested: Mode) -> bool {
        self.group(requested, held) == held
    }

    /// The mode taken on every ancestor of a lock held in `mode`. For a mode outside the table
    /// the answer is [`Mode::IX`].
    #[inline]
    pub fn intention(&self, mode: Mode) -> Mode {
        self.intention[mode.index()].unwrap_or(Mode::IX)
    }

    /// The group mode of a set of holders (`None` for an empty set).
    pub fn group_of(&self, modes: impl IntoIterator<Item = Mode>) -> Option<Mode> {
        modes
            .into_iter()
            .fold(None, |acc, m| Some(acc.map_or(m, |g| self.group(m, g))))
    }
}

/// The wire form of a [`ModeTable`]: what [`ModeTable::custom`] takes.
#[derive(Serialize, Deserialize)]
struct ModeTableSpec {
    name: String,
    modes: Vec<Mode>,
    compatible: Vec<Vec<bool>>,
    group: Vec<Vec<Mode>>,
    intention: Vec<Mode>,
}

impl From<ModeTable> for ModeTableSpec {
    fn from(table: ModeTable) -> Self {
        let modes = table.modes.clone();
        ModeTableSpec {
            compatible: modes
                .iter()
                .map(|&r| modes.iter().map(|&c| table.compatible(r, c)).collect())
                .collect(),
            group: modes
                .iter()
                .map(|&r| modes.iter().map(|&c| table.group(r, c)).collect())
                .collect(),
            intention: modes.iter().map(|&m| table.intention(m)).collect(),
            name: table.name,
            modes,
        }
    }
}

impl TryFrom<ModeTableSpec> for ModeTable {
    type Error = ModeTableError;

    fn try_from(spec: ModeTableSpec) -> Result<Self, Self::Error> {
        ModeTable::custom(
            &spec.name,
            &spec.modes,
            &spec.compatible,
            &spec.group,
            &spec.intention,
        )
    }
}

impl Default for ModeTable {
    fn default() -> Self {
        ModeTable::standard()
    }
}

fn check_square(
    matrix: &'static str,
    n: usize,
    rows: impl ExactSizeIterator<Item = usize>,
) -> Result<(), ModeTableError> {
    if rows.len() != n {
        return Err(ModeTableError::NotSquare {
            matrix,
            modes: n,
            row: None,
            len: rows.len(),
        });
    }
    for (row, len) in rows.enumerate() {
        if len != n {
            return Err(ModeTableError::NotSquare {
                matrix,
                modes: n,
                row: Some(row),
                len,
            });
        }
    }
    Ok(())
}
