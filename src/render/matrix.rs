//! `matrix` in the terminal and as Markdown: the SQNR of every cell (variant by target, a mark on
//! the cells that meet the policy), the recommendation per target, the remedy searches; and the
//! dispatch table as JSON.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, table as grid_text, table_with, ColumnKind, Look};
use super::present::{bytes, db, db_opt, pct, signed};
use crate::foundation::console::printable;
use crate::report::matrix::{Cell, Matrix, RemedyKind, RemedySearch};
use crate::report::RunStatus;

/// A cell's text: SQNR (with `--task`: the primary metric and its drop against the reference in
/// points) with `✓` when it meets the policy, else its status.
pub fn cell_text(c: Option<&Cell>) -> String {
    match c {
        None => "-".into(),
        Some(c) if c.status != RunStatus::Ok => c.status.as_str().to_string(),
        Some(c) => {
            let figure = match &c.task {
                Some(t) => format!("{:.1}% {}", 100.0 * t.primary.value.0, signed(-t.drop.value.0, 1)),
                None => db_opt(c.sqnr_db),
            };
            format!("{figure}{}", if c.meets_policy { " ✓" } else { "" })
        }
    }
}

/// What the matrix's cells show, for its heading.
pub fn measured_text(m: &Matrix) -> String {
    match &m.task {
        Some(t) => format!(
            "{} (%) on {} samples of {} and its change against the reference in points ({} {}); ✓ meets the policy",
            t.task.primary, t.dataset.samples, t.dataset.path, t.task.kind, t.task.settings
        ),
        None => "worst output's SQNR dB against the golden run; ✓ meets the policy".into(),
    }
}

/// What a figure at or below 0 dB means, when some cell that ran has one (signal figures only):
/// the error then carries at least as much energy as the golden output itself, which no
/// precision explains (fp16 arithmetic keeps some 60 dB, int8 some 20 to 40): the target computed
/// another function. Names the cells, and what to do.
pub fn wrong_result_note(m: &Matrix) -> Option<String> {
    if m.task.is_some() {
        return None;
    }
    let cells: Vec<String> = m
        .cells
        .iter()
        .filter(|c| c.status == RunStatus::Ok)
        .filter_map(|c| {
            let s = c.sqnr_db?.0;
            (s <= 0.0).then(|| format!("{} on {} ({} dB)", c.variant, c.target, db(s)))
        })
        .collect();
    (!cells.is_empty()).then(|| {
        format!(
            "at or below 0 dB the error is as large as the output: {} computed another function, not the same one in lower precision (fp16 keeps some 60 dB); cut the model (npu-audit repro) to find the op",
            cells.join(", ")
        )
    })
}

/// The cell of `variant` on `target`.
pub fn find<'a>(m: &'a Matrix, variant: &str, target: &str) -> Option<&'a Cell> {
    m.cells.iter().find(|c| c.variant == variant && c.target == target)
}

/// The matrix's rows, cheapest variant first: its name, its size, then one cell per target.
fn variant_rows(m: &Matrix) -> impl Iterator<Item = (&String, Vec<String>)> {
    m.cost_order.iter().map(|name| {
        let size = m.variants.iter().find(|v| v.name == *name).map_or(0, |v| v.size_bytes);
        let mut cells = vec![bytes(size)];
        cells.extend(m.targets.iter().map(|t| cell_text(find(m, name, t))));
        (name, cells)
    })
}

/// The matrix's columns: the variant, its size, then one cell of figures per target.
fn grid_kinds(targets: usize) -> Vec<ColumnKind> {
    let mut kinds = vec![ColumnKind::Key, ColumnKind::Figure];
    kinds.extend(vec![ColumnKind::Figure; targets]);
    kinds
}

/// What the columns of [`recommendation_rows`] hold.
/// The reasons are sentences read whole: wrapped in their cells, never cut.
const RECOMMENDATION_KINDS: [ColumnKind; 6] = [
    ColumnKind::Key,
    ColumnKind::Key,
    ColumnKind::Text,
    ColumnKind::Figure,
    ColumnKind::Words,
    ColumnKind::Words,
];

/// What the columns of [`remedy_rows`] hold: the step, the layer's tensor and op, figures and the
/// kept word, each failing target's figures, then where it runs.
fn remedy_kinds(failing_targets: usize) -> Vec<ColumnKind> {
    use ColumnKind::{Figure, Key, Text};
    let mut kinds = vec![Key, Text, Key, Figure, Key];
    kinds.extend(vec![Figure; failing_targets]);
    kinds.push(Text);
    kinds
}

fn grid(m: &Matrix) -> Builder {
    let mut b = Builder::default();
    let mut head = vec!["variant".to_string(), "size".to_string()];
    head.extend(m.targets.iter().cloned());
    b.push_record(head);
    for (name, cells) in variant_rows(m) {
        b.push_record(std::iter::once(name.clone()).chain(cells));
    }
    b
}

fn recommendation_rows(m: &Matrix) -> Builder {
    let mut b = Builder::default();
    b.push_record(["target", "ship", "runs on", "SQNR dB", "why", "cheaper proven fix"]);
    for r in &m.recommendations {
        b.push_record([
            r.target.clone(),
            r.variant.clone().unwrap_or_else(|| "none".into()),
            r.run_on.clone().unwrap_or_else(|| "-".into()),
            db_opt(r.sqnr_db),
            r.reason.clone(),
            r.remedy.as_deref().map_or("-".into(), printable),
        ]);
    }
    b
}

fn failures(m: &Matrix) -> Vec<String> {
    m.cells
        .iter()
        .filter(|c| c.status != RunStatus::Ok)
        .map(|c| {
            let error = c.error.as_deref().map(printable).unwrap_or_default();
            format!(
                "{} on {}: {} {}",
                c.variant,
                c.target,
                c.status.as_str(),
                error.lines().next().unwrap_or("")
            )
        })
        .collect()
}

/// A remedy search's kind as its headings name it (`16-bit activations`), never the enum's name.
pub fn kind_name(k: RemedyKind) -> &'static str {
    match k {
        RemedyKind::Widen16 => "16-bit activations",
        RemedyKind::Float => "layers left in float",
    }
}

fn remedy_rows(s: &RemedySearch) -> Builder {
    let mut b = Builder::default();
    let mut head = vec![
        "#".to_string(),
        "layer".into(),
        "op".into(),
        "alone dB".into(),
        "kept".into(),
    ];
    head.extend(s.failing_targets.iter().map(|t| format!("{t} dB (gain)")));
    head.push("runs on".into());
    b.push_record(head);
    for (i, st) in s.steps.iter().enumerate() {
        let mut row = vec![
            (i + 1).to_string(),
            printable(&st.layer.tensor),
            st.layer.op_type.clone(),
            db(st.layer.introduced_sqnr_db.0),
            if st.kept { "yes" } else { "no" }.into(),
        ];
        for t in &s.failing_targets {
            let v = st.sqnr_db.get(t).map_or("-".into(), |v| db(v.0));
            let g = st
                .gained_db
                .get(t)
                .map_or(String::new(), |g| format!(" ({})", signed(g.0, 2)));
            row.push(v + &g);
        }
        // One value per failing target, in column order: a target without a placement did not run.
        let on: Vec<String> = s
            .failing_targets
            .iter()
            .map(|t| {
                st.placement
                    .get(t)
                    .map_or_else(|| "-".into(), |p| p.layer_runs_on.clone())
            })
            .collect();
        row.push(on.join(","));
        b.push_record(row);
    }
    b
}

/// What the recommendation's `runs on` column says, under the table in every rendering.
pub const SHIP_RUNS_ON_LEGEND: &str = "runs on: the target's id (the variant runs on that target), cpu (no variant \
     meets the policy on that target: the app runs the cpu column's choice on the CPU instead), - (no variant meets \
     the policy there or on the CPU)";

/// What a remedy step's `runs on` column says (terminal), one value per failing target.
pub const STEP_RUNS_ON_LEGEND: &str = "runs on: where the changed layer ran on each failing target, in the order of \
     the dB columns: npu (the target's EP took it), cpu (left to ONNX Runtime's CPU EP: a CPU target, or the EP \
     rejected it), - (the candidate did not run there)";

/// The terminal rendering.
pub fn table(m: &Matrix) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", bold(&format!("MATRIX ({})", measured_text(m))));
    // Too many targets for the terminal, the targets' columns continue in another table.
    let look = Look::grid(&grid_kinds(m.targets.len())).splittable(1, &[]);
    let _ = writeln!(out, "{}", table_with(grid(m), &look));
    let _ = writeln!(out, "policy: {}", policy_text(m));
    let _ = writeln!(out, "cost order: {}", m.cost_order.join(" < "));
    if let Some(n) = wrong_result_note(m) {
        let _ = writeln!(out, "note: {}", printable(&n));
    }
    out.push('\n');
    let _ = writeln!(out, "{}", bold("RECOMMENDATION"));
    let _ = writeln!(out, "{}", grid_text(recommendation_rows(m), &RECOMMENDATION_KINDS));
    let _ = writeln!(out, "{SHIP_RUNS_ON_LEGEND}");
    for s in &m.remedies {
        let _ = writeln!(
            out,
            "\n{}",
            bold(&format!("REMEDY: {} for {}", kind_name(s.kind), s.variant))
        );
        if !s.steps.is_empty() {
            // Too wide, the step and its layer keep the failing targets' figures and the rest
            // (the layer alone, kept, where it ran) follows in a second table.
            let n = s.failing_targets.len();
            let look = Look::grid(&remedy_kinds(n)).splittable(2, &[3, 4, 5 + n]);
            let _ = writeln!(out, "{}", table_with(remedy_rows(s), &look));
            let _ = writeln!(out, "{STEP_RUNS_ON_LEGEND}");
        }
        for (i, st) in s.steps.iter().enumerate() {
            if !st.did_not_run.is_empty() {
                let _ = writeln!(out, "candidate {}: did not run on {}", i + 1, st.did_not_run.join(", "));
            }
            if !st.regressions.is_empty() {
                let _ = writeln!(
                    out,
                    "candidate {}: no longer meets the policy on {}",
                    i + 1,
                    st.regressions.join(", ")
                );
            }
        }
        let _ = writeln!(out, "{}", printable(&s.outcome));
        if let Some(e) = &s.error {
            let _ = writeln!(out, "error: {}", printable(e));
        }
    }
    let failed = failures(m);
    if !failed.is_empty() {
        let _ = writeln!(out, "\n{}", bold("CELLS THAT DID NOT RUN"));
        for f in failed {
            let _ = writeln!(out, "  {f}");
        }
    }
    for n in &m.notes {
        let _ = writeln!(out, "note: {}", printable(n));
    }
    let _ = writeln!(out, "\n{} {}", bold("VERDICT"), verdict(m));
    super::grid::prose(&out)
}

/// The gate's verdict with its exit code: under limits, every target needs a variant that meets
/// them on the target itself.
pub fn verdict(m: &Matrix) -> String {
    let code = m.exit_code as i32;
    if m.policy.is_empty() {
        return format!("no limits set (exit {code})");
    }
    let short: Vec<String> = m
        .recommendations
        .iter()
        .filter(|r| !r.runs_on_itself())
        .map(|r| match r.run_on.as_deref() {
            Some(on) => format!("{} (only on {on})", r.target),
            None => format!("{} (none anywhere)", r.target),
        })
        .collect();
    if short.is_empty() {
        format!("PASS (exit {code}): every target has a variant that meets the policy on itself")
    } else {
        format!(
            "FAIL (exit {code}): no variant meets the policy on {}",
            short.join(", ")
        )
    }
}

fn policy_text(m: &Matrix) -> String {
    if m.policy.is_empty() {
        "none (every cell that runs meets it)".into()
    } else {
        m.policy.join(", ")
    }
}

fn md_row(cells: &[String]) -> String {
    format!(
        "| {} |",
        cells
            .iter()
            .map(|c| c.replace('|', "\\|"))
            .collect::<Vec<_>>()
            .join(" | ")
    )
}

/// The Markdown rendering (a pull-request comment).
pub fn markdown(m: &Matrix) -> String {
    let mut out = String::from("## npu-audit matrix\n\n");
    let mut head = vec!["variant".to_string(), "size".into()];
    head.extend(m.targets.iter().map(|t| format!("`{t}`")));
    out += &(md_row(&head) + "\n");
    out += &(md_row(&vec!["---".to_string(); head.len()]) + "\n");
    for (name, cells) in variant_rows(m) {
        let row: Vec<String> = std::iter::once(format!("**{name}**")).chain(cells).collect();
        out += &(md_row(&row) + "\n");
    }
    let _ = write!(out, "\n{} ({}).\n\n", measured_text(m), policy_text(m));
    if let Some(n) = wrong_result_note(m) {
        let _ = write!(out, "> {}\n\n", super::markdown::escape(&n));
    }
    out += "### What to ship where\n\n";
    out += &(md_row(&[
        "target".into(),
        "ship".into(),
        "runs on".into(),
        "SQNR dB".into(),
        "why".into(),
        "cheaper proven fix".into(),
    ]) + "\n");
    out += "| --- | --- | --- | --- | --- | --- |\n";
    for r in &m.recommendations {
        out += &(md_row(&[
            format!("`{}`", r.target),
            r.variant.clone().unwrap_or_else(|| "**none**".into()),
            r.run_on.clone().unwrap_or_else(|| "-".into()),
            db_opt(r.sqnr_db),
            r.reason.clone(),
            r.remedy.clone().unwrap_or_else(|| "-".into()),
        ]) + "\n");
    }
    let _ = write!(out, "\n_{SHIP_RUNS_ON_LEGEND}_\n\n**Verdict:** {}\n", verdict(m));
    for s in &m.remedies {
        let _ = write!(
            out,
            "\n### {} for {}\n\n{}\n\n",
            kind_name(s.kind),
            s.variant,
            s.outcome
        );
        for (i, st) in s.steps.iter().enumerate() {
            let gains: Vec<String> = s
                .failing_targets
                .iter()
                .filter_map(|t| st.gained_db.get(t).map(|g| format!("`{t}` {} dB", signed(g.0, 2))))
                .collect();
            let _ = writeln!(
                out,
                "{}. `{}` ({}, {} dB alone){}: {}",
                i + 1,
                st.layer.tensor,
                st.layer.op_type,
                db(st.layer.introduced_sqnr_db.0),
                if st.kept { "" } else { ", not kept" },
                gains.join(", ")
            );
            if !st.regressions.is_empty() {
                let _ = writeln!(out, "   no longer meets the policy on {}", st.regressions.join(", "));
            }
        }
    }
    let top1: Vec<String> = m
        .cells
        .iter()
        .filter(|c| c.top1_agreement.is_some_and(|t| t < 1.0))
        .map(|c| format!("{} on `{}` {}", c.variant, c.target, pct(c.top1_agreement)))
        .collect();
    if !top1.is_empty() {
        let _ = write!(out, "\nTop-1 agreement below 100%: {}.\n", top1.join(", "));
    }
    out
}

/// The dispatch table as JSON.
pub fn dispatch_json(m: &Matrix) -> String {
    serde_json::to_string_pretty(&m.dispatch).unwrap_or_default() + "\n"
}
