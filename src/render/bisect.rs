//! The terminal rendering of `runtime bisect`: every release tried against `--from`, the first
//! that differs, and where in the model it departs from the release before it.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, prose, table, ColumnKind};
use super::present::{db, divergence_at, num};
use crate::commands::bisect::{ReleaseBisection, ReleaseStep};

fn changes_cell(s: &ReleaseStep) -> String {
    if s.changes.is_empty() {
        return "-".into();
    }
    s.changes
        .iter()
        .map(|c| {
            let steps = c.max_steps.map_or(String::new(), |m| {
                format!(", max {}", super::present::count(m as usize, "step"))
            });
            let differing = c
                .differing
                .map_or("type differs".into(), |d| format!("{d}/{}", c.elements));
            format!("{}: {differing}{steps}, max abs {}", c.output, num(c.max_abs.0))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The findings as text.
pub fn render(found: &ReleaseBisection) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} {} from {} to {} (a release differs on {})",
        bold("RELEASES"),
        found.target,
        found.from,
        found.to,
        found.tolerance
    );
    let mut b = Builder::default();
    b.push_record(["release", "runtime", "status", "SQNR dB", "against --from", "differs"]);
    for st in &found.steps {
        let sqnr: Vec<String> = st.sqnr_db.iter().map(|v| db(v.0)).collect();
        b.push_record([
            st.release.clone(),
            st.runtime.clone().unwrap_or_else(|| "-".into()),
            st.status.as_str().to_string(),
            if sqnr.is_empty() { "-".into() } else { sqnr.join(" / ") },
            changes_cell(st),
            if st.release == found.from {
                "(from)".into()
            } else if st.differs {
                "yes".into()
            } else {
                "no".into()
            },
        ]);
    }
    use ColumnKind::{Figure, Key, Text};
    let _ = writeln!(s, "{}", table(b, &[Key, Text, Key, Figure, Text, Key]));
    for st in found.steps.iter().filter(|st| st.error.is_some()) {
        let _ = writeln!(
            s,
            "  {} {}: {}",
            st.release,
            st.status.as_str(),
            st.error.as_deref().unwrap_or("")
        );
    }
    match &found.first_differing {
        Some(r) => {
            let _ = writeln!(s, "\nfirst release whose outputs differ: {r}");
        }
        None => {
            let _ = writeln!(
                s,
                "\nno release from {} to {} differs from {}",
                found.from, found.to, found.from
            );
        }
    }
    if let Some(l) = &found.layers {
        let _ = writeln!(
            s,
            "layers of {} against {}:",
            found.first_differing.as_deref().unwrap_or("-"),
            l.against
        );
        for (name, p) in [
            ("first code difference", &l.first_code_difference),
            ("first beyond rounding", &l.first_beyond_rounding),
            ("first SQNR loss", &l.first_sqnr_loss),
        ] {
            let what = p.as_ref().map_or("none".into(), divergence_at);
            let _ = writeln!(s, "  {name}: {what}");
        }
        if let Some(e) = &l.error {
            let _ = writeln!(s, "  ! {e}");
        }
    }
    for n in &found.notes {
        let _ = writeln!(s, "  - {n}");
    }
    prose(&s)
}
