//! The terminal view of `--timings`: the parent's phases, largest first, and the worker
//! sessions per stage and target, with each worker's time split by what it did.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, prose, table, ColumnKind};
use crate::report::compare::AuditTimings;

fn ms(v: f64) -> String {
    format!("{v:.0}")
}

/// Both tables, as printed on stderr at the end of an audit run with `--timings`.
pub fn render(t: &AuditTimings) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}",
        bold(&format!(
            "Timings: {:.2} s wall; peak memory of the audit process {:.0} MiB",
            t.wall_ms / 1e3,
            t.parent_peak_rss_mb
        ))
    );
    let mut phases: Vec<_> = t.phases.iter().filter(|p| p.ms >= 0.5).collect();
    phases.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    let mut b = Builder::default();
    b.push_record(["stage", "phase", "ms", "share", "count"]);
    for p in phases {
        let share = if t.wall_ms > 0.0 { 100.0 * p.ms / t.wall_ms } else { 0.0 };
        b.push_record([
            p.stage.clone(),
            p.phase.as_str().to_string(),
            ms(p.ms),
            format!("{share:.1}%"),
            p.count.to_string(),
        ]);
    }
    use ColumnKind::{Figure, Key};
    s.push_str(&table(b, &[Key, Key, Figure, Figure, Figure]));
    s.push('\n');
    if !t.workers.is_empty() {
        let _ = writeln!(
            s,
            "Worker sessions (concurrent; ms summed over each stage's sessions, within the phase `sessions`; peak MiB the largest worker's):"
        );
        let mut b = Builder::default();
        b.push_record([
            "stage", "target", "sessions", "load", "register", "create", "run", "io", "overhead", "wall", "peak MiB",
        ]);
        for w in &t.workers {
            b.push_record([
                w.stage.clone(),
                w.target.clone(),
                w.sessions.to_string(),
                ms(w.load_ms),
                ms(w.register_ms),
                ms(w.session_create_ms),
                ms(w.run_ms),
                ms(w.io_ms),
                ms(w.overhead_ms),
                ms(w.wall_ms),
                ms(w.peak_rss_mb),
            ]);
        }
        let mut kinds = vec![Key, Key];
        kinds.extend([Figure; 9]);
        s.push_str(&table(b, &kinds));
        s.push('\n');
    }
    prose(&s)
}
