//! The terminal tables of `targets` and `runtime list`.

use tabled::builder::Builder;
use tabled::settings::Style;

use crate::listing::{RuntimeRow, TargetAvailability};

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
    let mut t = b.build();
    t.with(Style::rounded());
    t.to_string()
}

/// Renders `runtime list` as a table.
pub fn runtime_table(rows: &[RuntimeRow]) -> String {
    let mut b = Builder::default();
    b.push_record(["key", "package", "version", "state", "library"]);
    for r in rows {
        b.push_record([
            r.key.clone(),
            r.package.clone(),
            r.version.clone(),
            r.state.clone(),
            r.library.clone().unwrap_or_default(),
        ]);
    }
    let mut t = b.build();
    t.with(Style::rounded());
    t.to_string()
}
