//! Prints the standard lock-mode tables of StickyLocking and what hierarchical locking takes on
//! ancestors. A first look at `locks-core` until the full demo exists.

use locks_core::{LockId, Mode, ModeTable, lock_id};

fn main() {
    let table = ModeTable::standard();
    println!("compatibility (row = requested, column = held):");
    print!("{:>5}", "");
    for held in Mode::ALL {
        print!("{held:>5}");
    }
    println!();
    for requested in Mode::ALL {
        print!("{requested:>5}");
        for held in Mode::ALL {
            let mark = if table.compatible(requested, held) {
                "yes"
            } else {
                "-"
            };
            print!("{mark:>5}");
        }
        println!();
    }
    println!("\ngroup mode (row = joining, column = current group):");
    print!("{:>5}", "");
    for current in Mode::ALL {
        print!("{current:>5}");
    }
    println!();
    for requested in Mode::ALL {
        print!("{requested:>5}");
        for current in Mode::ALL {
            print!("{:>5}", table.group(requested, current));
        }
        println!();
    }

    let row: LockId = lock_id!["bank", "accounts", 42];
    println!("\nwriting {row} takes:");
    for ancestor in row.ancestors() {
        println!("  {} on {ancestor}", table.intention(Mode::WRITE));
    }
    println!("  {} on {row}", Mode::WRITE);
}
