//! A corpus drift report (`eval SPEC.toml --task score`) in the terminal and in Markdown: per
//! target llama.cpp's figures (mean KLD ± its standard error, percentiles, the same top token,
//! Δp, both perplexities and their ratio), then the curve by position in the window with the
//! positions where it jumps (a prefill chunk's first token named), and the windows that strayed
//! most; the gate as every generation report states it.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::generation::{gate_lines, markdown_verdict_and_notes, part_words, report_notes, verdict_words};
use super::grid::{bold, prose, table_with, ColumnKind, Look};
use super::present::{count, num, pct, rate_with_interval};
use crate::report::common::Num;
use crate::report::gate::Verdict;
use crate::report::generation::{CorpusFigures, GenerationReport, GenerationTarget, WindowFigures};

/// Windows listed per target, the worst first.
const WORST_WINDOWS: usize = 3;

/// Jumps named per target.
const JUMPS_NAMED: usize = 5;

/// "0.02581 ± 0.005287".
fn with_se(v: Num, se: Num) -> String {
    format!("{} ± {}", num(v.0), num(se.0))
}

/// A signed percentage of a fraction: "-0.79%".
fn signed_pct(v: f64) -> String {
    super::present::signed(100.0 * v, 2) + "%"
}

/// The perplexity ratio with its 95% interval: "0.917 (0.724–1.161)".
fn ratio(c: &CorpusFigures) -> String {
    let p = &c.perplexity;
    let [lo, hi] = p.ln_ratio_interval;
    if lo.0.is_nan() || hi.0.is_nan() {
        format!("{} (no interval)", num(p.ln_ratio.0.exp()))
    } else {
        format!("{} ({}–{})", num(p.ln_ratio.0.exp()), num(lo.0.exp()), num(hi.0.exp()))
    }
}

/// The row of one target in the table of figures, under [`HEAD`] (`-` where it scored nothing).
pub fn figures_row(t: &GenerationTarget, windows: usize) -> Vec<String> {
    let m = &t.summary;
    let shown = |f: &dyn Fn(&CorpusFigures) -> String| t.corpus.as_ref().map_or("-".into(), f);
    vec![
        t.id.clone(),
        t.status.as_str().to_string(),
        if m.samples == windows {
            windows.to_string()
        } else {
            format!("{} of {windows}", m.samples)
        },
        shown(&|c| with_se(c.kld.mean, c.kld.mean_se)),
        shown(&|c| num(c.kld.median.0)),
        shown(&|c| num(c.kld.p99.0)),
        shown(&|c| num(c.kld.max.0)),
        shown(&|c| rate_with_interval(c.same_top.share, c.same_top.interval)),
        shown(&|c| signed_pct(c.delta_p.mean.0)),
        shown(&|c| pct(Some(c.delta_p.rms.0).filter(|v| !v.is_nan()))),
        shown(&|c| num(c.perplexity.target.0)),
        shown(&ratio),
        m.seconds_per_token.map_or("-".into(), num),
    ]
}

/// The columns of the table of figures.
pub const HEAD: [&str; 13] = [
    "target",
    "status",
    "windows",
    "KLD mean ± SE",
    "median",
    "p99",
    "max",
    "same top (95% CI)",
    "Δp mean",
    "RMS Δp",
    "PPL",
    "PPL ratio (95% CI)",
    "s/token",
];

fn header(s: &mut String, r: &GenerationReport) {
    let c = r.reference_corpus.as_ref();
    let parts: Vec<&str> = r.spec.parts.iter().map(|p| p.name.as_str()).collect();
    let chunks = r
        .spec
        .prefill_length
        .map_or(String::new(), |n| format!("; prefill in chunks of {n}"));
    let _ = writeln!(
        s,
        "{} {} corpus drift · {}\nspec      {} ({}, {}: {}{chunks}{})\nset       {} ({}, {} scored)\nreference {} on the CPU EP: perplexity {}",
        bold("npu-audit"),
        r.tool.version,
        r.spec.path,
        r.spec.path,
        r.spec.layout,
        r.spec.form,
        parts.join(", "),
        r.spec.kv_length.map_or(String::new(), |k| format!(", KV buffers of {k}")),
        r.dataset.path,
        count(r.dataset.samples, "window"),
        count(c.map_or(0, |c| c.positions), "position"),
        r.reference.path,
        c.map_or("-".into(), |c| num(c.perplexity.0))
    );
}

/// The mean KLD by position as a row of eighth blocks, scaled to its largest value.
fn sparkline(c: &CorpusFigures) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let top = c
        .by_position
        .iter()
        .map(|p| p.mean_kld.0)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    c.by_position
        .iter()
        .map(|p| match p.mean_kld.0 {
            v if !v.is_finite() => ' ',
            _ if top == 0.0 => BARS[0],
            v => BARS[((v / top * 7.0).round() as usize).min(7)],
        })
        .collect()
}

/// Whether window position `j` is the first token of a prefill chunk (its logits come from a new
/// chunk's first row), with `start` start tokens before the window.
pub fn chunk_start(r: &GenerationReport, j: usize) -> bool {
    let start = r.spec.start_tokens.len();
    r.spec
        .prefill_length
        .is_some_and(|n| n > 0 && (start + j).is_multiple_of(n))
}

/// The positions where a target's curve jumps, in words.
pub fn jump_lines(r: &GenerationReport, c: &CorpusFigures) -> Vec<String> {
    c.jumps
        .iter()
        .take(JUMPS_NAMED)
        .filter_map(|&j| {
            let here = c.by_position.get(j)?;
            let before = c.by_position.get(j.checked_sub(1)?)?;
            let chunk = if chunk_start(r, j) {
                ", the first token of a prefill chunk"
            } else {
                ""
            };
            Some(format!(
                "mean KLD jumps at position {j}: {} nats, {} at the position before{chunk}; same top {}",
                num(here.mean_kld.0),
                num(before.mean_kld.0),
                pct(Some(here.same_top.0).filter(|v| !v.is_nan()))
            ))
        })
        .collect()
}

/// A window's worst position in words: `position 3: " on" came; reference "the", target "cat"`.
pub fn worst_words(w: &WindowFigures) -> String {
    let q = |t: &str| format!("\"{}\"", crate::foundation::console::printable(t));
    match (&w.error, &w.worst) {
        (Some(e), _) => format!("not scored: {e}"),
        (None, Some(p)) => format!(
            "position {}: KLD {}, {} came; top {} on the reference, {} here",
            p.position,
            num(p.kld.0),
            q(&p.next_piece),
            q(&p.reference_top_piece),
            q(&p.target_top_piece)
        ),
        (None, None) => "no position scored".into(),
    }
}

/// A target's windows, those that strayed most first.
pub fn worst_windows(c: &CorpusFigures) -> Vec<&WindowFigures> {
    let mut rows: Vec<&WindowFigures> = c.rows.iter().collect();
    rows.sort_by(|a, b| {
        let key = |w: &WindowFigures| if w.error.is_some() { f64::INFINITY } else { w.mean_kld.0 };
        key(b).total_cmp(&key(a))
    });
    rows
}

fn target_section(s: &mut String, r: &GenerationReport, t: &GenerationTarget) {
    let _ = writeln!(s, "\n{} {}", bold(&t.id), t.runtime.as_deref().unwrap_or(""));
    if let Some(e) = &t.error {
        let _ = writeln!(s, "error: {e}");
    }
    for p in &t.parts {
        let _ = writeln!(s, "  {}", part_words(p));
    }
    let Some(c) = &t.corpus else { return };
    if c.positions == 0 {
        return;
    }
    let _ = writeln!(
        s,
        "  KLD p90 {}, p99.9 {}; Δp p1 {}, p99 {}; PPL {} → {}",
        num(c.kld.p90.0),
        num(c.kld.p999.0),
        signed_pct(c.delta_p.p1.0),
        signed_pct(c.delta_p.p99.0),
        num(c.perplexity.reference.0),
        num(c.perplexity.target.0)
    );
    let _ = writeln!(
        s,
        "  mean KLD by position 0–{}: {} (top {})",
        c.by_position.len().saturating_sub(1),
        sparkline(c),
        num(c.by_position.iter().map(|p| p.mean_kld.0).fold(f64::NAN, f64::max))
    );
    for j in jump_lines(r, c) {
        let _ = writeln!(s, "  {j}");
    }
    let mut b = Builder::default();
    b.push_record(["window", "mean KLD", "same top", "worst position"]);
    for w in worst_windows(c).into_iter().take(WORST_WINDOWS) {
        b.push_record([
            w.id.clone(),
            num(w.mean_kld.0),
            pct(Some(w.same_top.0).filter(|v| !v.is_nan())),
            worst_words(w),
        ]);
    }
    use ColumnKind::{Figure, Key, Words};
    let _ = writeln!(s, "{}", table_with(b, &Look::grid(&[Key, Figure, Figure, Words])));
}

/// The report for a terminal.
pub fn table_text(r: &GenerationReport) -> String {
    let mut s = String::new();
    header(&mut s, r);
    let _ = writeln!(s, "\n{}", bold("TARGETS"));
    let mut b = Builder::default();
    b.push_record(HEAD);
    for t in &r.targets {
        b.push_record(figures_row(t, r.dataset.samples));
    }
    let mut kinds = vec![ColumnKind::Key, ColumnKind::Key];
    kinds.resize(HEAD.len(), ColumnKind::Figure);
    let secondary: Vec<usize> = (4..HEAD.len()).collect();
    let _ = writeln!(s, "{}", table_with(b, &Look::grid(&kinds).splittable(3, &secondary)));
    for t in &r.targets {
        target_section(&mut s, r, t);
    }
    let lines = gate_lines(r);
    if !lines.is_empty() || r.gate.verdict != Verdict::None {
        let _ = writeln!(s, "\n{}", bold("GATE"));
        for l in lines {
            let _ = writeln!(s, "{l}");
        }
        let _ = writeln!(s, "{} {}", bold("VERDICT"), verdict_words(r));
    }
    for n in report_notes(r) {
        let _ = writeln!(s, "note: {n}");
    }
    prose(&s)
}

/// The report as Markdown (a pull-request comment).
pub fn markdown(r: &GenerationReport) -> String {
    let esc = |t: &str| t.replace('|', "\\|").replace('\n', " ");
    let mut s = String::new();
    let _ = writeln!(s, "### npu-audit corpus drift · `{}`\n", esc(&r.spec.path));
    let c = r.reference_corpus.as_ref();
    let _ = writeln!(
        s,
        "{} of `{}` ({} scored); reference `{}`: perplexity {}\n",
        count(r.dataset.samples, "window"),
        esc(&r.dataset.path),
        count(c.map_or(0, |c| c.positions), "position"),
        esc(&r.reference.path),
        c.map_or("-".into(), |c| num(c.perplexity.0))
    );
    let _ = writeln!(s, "| {} |", HEAD.join(" | "));
    let _ = writeln!(s, "|{}", " --- |".repeat(HEAD.len()));
    for t in &r.targets {
        let row: Vec<String> = figures_row(t, r.dataset.samples).iter().map(|c| esc(c)).collect();
        let _ = writeln!(s, "| {} |", row.join(" | "));
    }
    for t in &r.targets {
        let Some(c) = t.corpus.as_ref().filter(|c| c.positions > 0) else {
            continue;
        };
        let _ = writeln!(
            s,
            "\n<details><summary>{}: mean KLD by position, the windows that strayed most</summary>\n",
            esc(&t.id)
        );
        let _ = writeln!(s, "`{}`\n", sparkline(c));
        for j in jump_lines(r, c) {
            let _ = writeln!(s, "- {}", esc(&j));
        }
        let _ = writeln!(
            s,
            "\n| window | mean KLD | same top | worst position |\n| --- | --- | --- | --- |"
        );
        for w in worst_windows(c).into_iter().take(WORST_WINDOWS) {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                esc(&w.id),
                num(w.mean_kld.0),
                pct(Some(w.same_top.0).filter(|v| !v.is_nan())),
                esc(&worst_words(w))
            );
        }
        let _ = writeln!(s, "\n</details>");
    }
    markdown_verdict_and_notes(&mut s, r);
    s
}
