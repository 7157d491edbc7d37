//! The terminal table of `targets`.

use tabled::builder::Builder;

use super::grid::{table_with, ColumnKind, Frame, Look};

use crate::commands::availability::TargetAvailability;

/// Renders `targets` as a table.
pub fn targets_table(rows: &[TargetAvailability]) -> String {
    let mut b = Builder::default();
    b.push_record(["target", "can run", "runtime", "what", "why not / where"]);
    for r in rows {
        b.push_record([
            r.target.clone(),
            if r.available { "yes".into() } else { "no".into() },
            r.runtime.clone().unwrap_or_else(|| "-".into()),
            r.description.clone(),
            r.reason.clone().or_else(|| r.runtime_state.clone()).unwrap_or_default(),
        ]);
    }
    // Descriptions and reasons are read whole: wrapped in their cells, never cut.
    use ColumnKind::{Key, Words};
    table_with(b, &Look::plain(Frame::Rounded, &[Key, Key, Words, Words, Words]))
}
