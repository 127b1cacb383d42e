//! Modes and mode tables: the standard table against StickyLocking's cell for cell, the validation of
//! custom tables (one test per error, each with a table that breaks exactly that property), the
//! shared/exclusive built-in, and the serde form of a table.

use locks_core::codec;
use locks_core::{Mode, ModeTable, ModeTableError};
use serde::Serialize;

/// StickyLocking's "Lock Mode Compatibility", in its own notation (rows: requested mode,
/// columns: held mode).
const SEED000_COMPATIBILITY: &str = "
| Requested |   IS   |   IX   |    S   |   SIX  |    U   |    X   |
|:---------:|:------:|:------:|:------:|:------:|:------:|:------:|
|  **IS**   |   ✔    |   ✔    |   ✔    |   ✔    |   ✔    |   ✘    |
|  **IX**   |   ✔    |   ✔    |   ✘    |   ✘    |   ✘    |   ✘    |
|  **S**    |   ✔    |   ✘    |   ✔    |   ✘    |   ✔    |   ✘    |
|  **SIX**  |   ✔    |   ✘    |   ✘    |   ✘    |   ✘    |   ✘    |
|  **U**    |   ✔    |   ✘    |   ✔    |   ✘    |   ✘    |   ✘    |
|  **X**    |   ✘    |   ✘    |   ✘    |   ✘    |   ✘    |   ✘    |
";

/// StickyLocking, "Lock Group Mode" (rows: requested mode, columns: current group mode).
const SEED000_GROUP: &str = "
| Requested |   IS   |   IX   |   S    |   SIX  |    U   |    X   |
|:---------:|:------:|:------:|:------:|:------:|:------:|:------:|
|  **IS**   |   IS   |   IX   |   S    |   SIX  |    U   |    X   |
|  **IX**   |   IX   |   IX   |   SIX  |   SIX  |    X   |    X   |
|  **S**    |   S    |   SIX  |   S    |   SIX  |    U   |    X   |
|  **SIX**  |   SIX  |   SIX  |   SIX  |   SIX  |    SIX |    X   |
|  **U**    |   U    |   X    |   U    |   SIX  |    U   |    X   |
|  **X**    |   X    |   X    |   X    |   X    |    X   |    X   |
";

/// A markdown table of the seed: the header's modes, then each row's mode and its cells.
struct SeedTable {
    columns: Vec<Mode>,
    rows: Vec<(Mode, Vec<String>)>,
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().trim_matches('*').to_owned())
        .collect()
}

fn parse_seed_table(text: &str) -> SeedTable {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('|') && !l.starts_with("|:"));
    let header = cells(lines.next().expect("a header line"));
    assert_eq!(header[0], "Requested");
    let columns: Vec<Mode> = header[1..]
        .iter()
        .map(|m| m.parse().expect("a mode name"))
        .collect();
    let rows = lines
        .map(|l| {
            let c = cells(l);
            (c[0].parse().expect("a mode name"), c[1..].to_vec())
        })
        .collect();
    SeedTable { columns, rows }
}

fn mark(cell: &str) -> bool {
    match cell {
        "✔" => true,
        "✘" => false,
        other => panic!("not a table mark: {other:?}"),
    }
}

/// StickyLocking's tables as the arguments of `ModeTable::custom`, in `Mode::ALL` order.
fn seed_spec() -> (Vec<Vec<bool>>, Vec<Vec<Mode>>) {
    let compat = parse_seed_table(SEED000_COMPATIBILITY);
    let group = parse_seed_table(SEED000_GROUP);
    assert_eq!(compat.columns, Mode::ALL);
    assert_eq!(group.columns, Mode::ALL);
    let c = compat
        .rows
        .iter()
        .map(|(_, r)| r.iter().map(|s| mark(s)).collect())
        .collect();
    let g = group
        .rows
        .iter()
        .map(|(_, r)| r.iter().map(|s| s.parse().expect("a mode")).collect())
        .collect();
    (c, g)
}

fn standard_intentions() -> Vec<Mode> {
    use Mode::*;
    vec![IS, IX, IS, IX, IX, IX]
}

#[test]
fn sticky_compatibility_matrix_all_36_cells() {
    let table = ModeTable::standard();
    let seed = parse_seed_table(SEED000_COMPATIBILITY);
    let mut checked = 0;
    for (requested, row) in &seed.rows {
        assert_eq!(row.len(), 6, "row {requested}");
        for (held, cell) in seed.columns.iter().zip(row) {
            assert_eq!(
                table.compatible(*requested, *held),
                mark(cell),
                "compatible({requested}, {held})"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 36);
}

#[test]
fn sticky_group_matrix_all_36_cells() {
    let table = ModeTable::standard();
    let seed = parse_seed_table(SEED000_GROUP);
    let mut checked = 0;
    for (requested, row) in &seed.rows {
        assert_eq!(row.len(), 6, "row {requested}");
        for (current, cell) in seed.columns.iter().zip(row) {
            let expected: Mode = cell.parse().expect("a mode");
            assert_eq!(
                table.group(*requested, *current),
                expected,
                "group({requested}, {current})"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 36);
}

#[test]
fn standard_table_is_a_valid_custom_table() {
    let (c, g) = seed_spec();
    let table = ModeTable::custom("standard", &Mode::ALL, &c, &g, &standard_intentions());
    assert_eq!(table, Ok(ModeTable::standard()));
}

#[test]
fn read_write_and_intention_modes() {
    assert_eq!(Mode::READ, Mode::S);
    assert_eq!(Mode::WRITE, Mode::X);
    let table = ModeTable::standard();
    for (mode, intention) in Mode::ALL.into_iter().zip(standard_intentions()) {
        assert_eq!(mode.intention(), intention, "{mode}");
        assert_eq!(table.intention(mode), intention, "{mode}");
    }
    for (i, mode) in Mode::ALL.into_iter().enumerate() {
        assert_eq!(mode.index(), i);
        assert_eq!(Mode::from_index(i), Some(mode));
    }
    assert_eq!(Mode::from_index(6), None);
}

#[test]
fn mode_names_parse() {
    for mode in Mode::ALL {
        assert_eq!(mode.name().parse::<Mode>(), Ok(mode));
        assert_eq!(mode.to_string(), mode.name());
    }
    assert_eq!("six".parse::<Mode>(), Ok(Mode::SIX));
    assert_eq!("read".parse::<Mode>(), Ok(Mode::READ));
    assert_eq!("Write".parse::<Mode>(), Ok(Mode::WRITE));
    assert_eq!(
        "Z".parse::<Mode>(),
        Err(ModeTableError::UnknownModeName("Z".to_owned()))
    );
}

#[test]
fn group_of_a_set_and_covers() {
    let t = ModeTable::standard();
    assert_eq!(t.group_of([]), None);
    assert_eq!(t.group_of([Mode::IS, Mode::S, Mode::IS]), Some(Mode::S));
    assert_eq!(t.group_of([Mode::IS, Mode::IX]), Some(Mode::IX));
    assert!(t.covers(Mode::X, Mode::S));
    assert!(t.covers(Mode::SIX, Mode::IX));
    assert!(!t.covers(Mode::S, Mode::IX));
    assert!(!t.covers(Mode::U, Mode::X));
}

/// The standard table with one change, built through `ModeTable::custom`.
fn standard_with(
    change: impl FnOnce(&mut Vec<Vec<bool>>, &mut Vec<Vec<Mode>>, &mut Vec<Mode>),
) -> Result<ModeTable, ModeTableError> {
    let (mut c, mut g) = seed_spec();
    let mut i = standard_intentions();
    change(&mut c, &mut g, &mut i);
    ModeTable::custom("test", &Mode::ALL, &c, &g, &i)
}

fn ix(m: Mode) -> usize {
    m.index()
}

#[test]
fn custom_table_not_square_is_refused() {
    use ModeTableError::NotSquare;
    let missing_row = standard_with(|c, _, _| {
        c.pop();
    });
    assert_eq!(
        missing_row,
        Err(NotSquare {
            matrix: "compatibility",
            modes: 6,
            row: None,
            len: 5
        })
    );
    let short_row = standard_with(|_, g, _| {
        g[2].pop();
    });
    assert_eq!(
        short_row,
        Err(NotSquare {
            matrix: "group",
            modes: 6,
            row: Some(2),
            len: 5
        })
    );
    let intentions = standard_with(|_, _, i| i.push(Mode::IS));
    assert_eq!(
        intentions,
        Err(NotSquare {
            matrix: "intention",
            modes: 6,
            row: None,
            len: 7
        })
    );
    let message = missing_row.unwrap_err().to_string();
    assert!(message.contains("compatibility matrix"), "{message}");
}

#[test]
fn custom_table_not_symmetric_is_refused() {
    // X requested next to IS held becomes compatible, IS next to X stays incompatible.
    let t = standard_with(|c, _, _| c[ix(Mode::X)][ix(Mode::IS)] = true);
    assert_eq!(
        t,
        Err(ModeTableError::NotSymmetric {
            a: Mode::IS,
            b: Mode::X
        })
    );
}

#[test]
fn custom_table_not_idempotent_is_refused() {
    // X is compatible with nothing, so group(X, X) is in no faithfulness check: only
    // idempotence breaks.
    let t = standard_with(|_, g, _| g[ix(Mode::X)][ix(Mode::X)] = Mode::SIX);
    assert_eq!(
        t,
        Err(ModeTableError::NotIdempotent {
            a: Mode::X,
            aa: Mode::SIX
        })
    );
}

#[test]
fn custom_table_not_commutative_is_refused() {
    // IS and X are incompatible, so the changed cell is in no faithfulness check.
    let t = standard_with(|_, g, _| g[ix(Mode::X)][ix(Mode::IS)] = Mode::SIX);
    assert_eq!(
        t,
        Err(ModeTableError::NotCommutative {
            a: Mode::IS,
            b: Mode::X,
            ab: Mode::X,
            ba: Mode::SIX
        })
    );
}

#[test]
fn custom_table_group_not_faithful_is_refused() {
    // IS and S together in group IS would let IX in, though IX is incompatible with S.
    let t = standard_with(|_, g, _| {
        g[ix(Mode::IS)][ix(Mode::S)] = Mode::IS;
        g[ix(Mode::S)][ix(Mode::IS)] = Mode::IS;
    });
    assert_eq!(
        t,
        Err(ModeTableError::GroupNotFaithful {
            a: Mode::IS,
            b: Mode::S,
            group: Mode::IS,
            c: Mode::IX,
            verdict: "compatible",
            expected: "incompatible",
        })
    );
}

#[test]
fn custom_table_bad_intention_is_refused() {
    // U's intention is IX, so U is not its own intention.
    let not_own = standard_with(|_, _, i| i[ix(Mode::S)] = Mode::U);
    assert_eq!(
        not_own,
        Err(ModeTableError::BadIntention {
            mode: Mode::S,
            intention: Mode::U
        })
    );
    // A two-mode table whose S takes IS on ancestors, but IS is not in the table.
    let outside = ModeTable::custom(
        "rw",
        &[Mode::S, Mode::X],
        &[vec![true, false], vec![false, false]],
        &[vec![Mode::S, Mode::X], vec![Mode::X, Mode::X]],
        &[Mode::IS, Mode::X],
    );
    assert_eq!(
        outside,
        Err(ModeTableError::BadIntention {
            mode: Mode::S,
            intention: Mode::IS
        })
    );
}

#[test]
fn custom_table_duplicate_mode_is_refused() {
    let t = ModeTable::custom(
        "dup",
        &[Mode::S, Mode::X, Mode::S],
        &vec![vec![true, false, true]; 3],
        &vec![vec![Mode::S, Mode::X, Mode::S]; 3],
        &[Mode::S, Mode::X, Mode::S],
    );
    assert_eq!(t, Err(ModeTableError::DuplicateMode(Mode::S)));
}

#[test]
fn custom_table_without_modes_or_with_a_group_outside_is_refused() {
    assert_eq!(
        ModeTable::custom("none", &[], &[], &[], &[]),
        Err(ModeTableError::NoModes)
    );
    let outside = ModeTable::custom(
        "rw",
        &[Mode::S, Mode::X],
        &[vec![true, false], vec![false, false]],
        &[vec![Mode::S, Mode::U], vec![Mode::U, Mode::X]],
        &[Mode::S, Mode::X],
    );
    assert_eq!(
        outside,
        Err(ModeTableError::GroupOutsideTable {
            a: Mode::S,
            b: Mode::X,
            result: Mode::U
        })
    );
}

#[test]
fn shared_exclusive_validates_and_behaves_like_read_write_locks() {
    let t = ModeTable::shared_exclusive();
    // `shared_exclusive()` falls back to the standard table if its own cells ever failed
    // validation; the name says the fallback was not taken.
    assert_eq!(t.name(), "shared_exclusive");
    assert_eq!(t.modes(), &[Mode::IS, Mode::IX, Mode::S, Mode::X]);
    let (read, write) = (Mode::READ, Mode::WRITE);
    assert!(t.compatible(read, read));
    assert!(!t.compatible(read, write));
    assert!(!t.compatible(write, read));
    assert!(!t.compatible(write, write));
    assert_eq!(t.group(read, read), read);
    assert_eq!(t.intention(read), Mode::IS);
    assert_eq!(t.intention(write), Mode::IX);
    // Hierarchy: a write below blocks a read above (IX vs S); writes on siblings coexist.
    assert!(!t.compatible(read, t.intention(write)));
    assert!(t.compatible(t.intention(write), t.intention(write)));
    // Modes outside the table are refused by servers and compatible with nothing.
    assert!(!t.contains(Mode::SIX) && !t.contains(Mode::U));
    assert!(!t.compatible(Mode::U, Mode::IS));
    // Re-validating its own cells accepts it.
    let back: ModeTable = codec::decode(&codec::encode(&t, 4096).unwrap(), 4096).unwrap();
    assert_eq!(back, t);
}

#[test]
fn valid_custom_read_update_write_table_is_accepted() {
    use Mode::*;
    // Read/update/write with intention modes: U is like S towards readers, but only one U.
    let modes = [IS, IX, S, U, X];
    let compatible = vec![
        vec![true, true, true, true, false],
        vec![true, true, false, false, false],
        vec![true, false, true, true, false],
        vec![true, false, true, false, false],
        vec![false; 5],
    ];
    let group = vec![
        vec![IS, IX, S, U, X],
        vec![IX, IX, X, X, X],
        vec![S, X, S, U, X],
        vec![U, X, U, U, X],
        vec![X; 5],
    ];
    let t = ModeTable::custom("ruw", &modes, &compatible, &group, &[IS, IX, IS, IX, IX])
        .expect("a valid table");
    assert_eq!(t.name(), "ruw");
    assert!(t.compatible(S, U) && t.compatible(U, S) && !t.compatible(U, U));
    assert_eq!(t.group_of([S, U, S]), Some(U));
    assert!(!t.contains(SIX));
    let back: ModeTable = codec::decode(&codec::encode(&t, 4096).unwrap(), 4096).unwrap();
    assert_eq!(back, t);
}

/// The serialized layout of a mode table (the arguments of `ModeTable::custom`), to forge one.
#[derive(Serialize)]
struct ForgedTable {
    name: String,
    modes: Vec<Mode>,
    compatible: Vec<Vec<bool>>,
    group: Vec<Vec<Mode>>,
    intention: Vec<Mode>,
}

#[test]
fn deserialized_tables_are_validated() {
    let (mut compatible, group) = seed_spec();
    let honest = ForgedTable {
        name: "standard".into(),
        modes: Mode::ALL.to_vec(),
        compatible: compatible.clone(),
        group: group.clone(),
        intention: standard_intentions(),
    };
    let bytes = codec::encode(&honest, 4096).unwrap();
    assert_eq!(
        codec::decode::<ModeTable>(&bytes, 4096).unwrap(),
        ModeTable::standard()
    );
    compatible[ix(Mode::X)][ix(Mode::IS)] = true;
    let forged = ForgedTable {
        compatible,
        ..honest
    };
    let bytes = codec::encode(&forged, 4096).unwrap();
    let err = codec::decode::<ModeTable>(&bytes, 4096).unwrap_err();
    assert!(err.to_string().contains("not symmetric"), "{err}");
}
