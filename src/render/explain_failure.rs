//! The terminal rendering of `explain-failure`: per target, the compiles tried and the finding.

use std::fmt::Write as _;

use crate::commands::explain_failure::Explanation;
use crate::foundation::error::one_line_str as one_line;

/// The terminal rendering.
pub fn render(list: &[Explanation]) -> String {
    let mut s = String::new();
    for e in list {
        let _ = writeln!(s, "{}  {}", e.target, e.outcome);
        if let Some(err) = &e.full_model_error {
            let _ = writeln!(s, "  full model: {}", one_line(err));
        }
        let compiled = e.steps.iter().filter(|s| s.status != "not_built").count();
        for st in &e.steps {
            let _ = writeln!(s, "  {:<7} #{}..#{}  {}", st.kind, st.first, st.last, st.status);
        }
        if !e.window.is_empty() {
            let names: Vec<String> = e.window.iter().map(|n| format!("{} ({})", n.name, n.op_type)).collect();
            let _ = writeln!(s, "  failing window: {}", names.join(", "));
        }
        if let Some(err) = &e.window_error {
            let _ = writeln!(s, "  its error: {}", one_line(err));
        }
        let _ = writeln!(
            s,
            "  => {} ({} compiled)\n",
            e.summary,
            super::present::count(compiled, "session")
        );
    }
    super::grid::prose(&s)
}
