//! A generation report in the terminal and in Markdown: per target the WER against the labels
//! and against the reference's, where its text first departs, how each step's logits drift; per
//! sample the first divergent token with both texts.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, prose, table_with, Kind, Look};
use super::present::count;
use crate::report::compare::Num;
use crate::report::generation::{GenerationReport, GenerationTarget, TargetSample, TextScores};

/// A rate as a percentage with one decimal ("12.5%"), `-` when it could not be computed.
fn percent(v: Num) -> String {
    if v.0.is_finite() {
        format!("{:.1}%", 100.0 * v.0)
    } else {
        "-".into()
    }
}

/// A WER or CER with its 95% interval: "12.5% (8.1–17.0)".
fn rate(v: Num, interval: [Num; 2]) -> String {
    let p = |x: Num| {
        if x.0.is_finite() {
            format!("{:.1}", 100.0 * x.0)
        } else {
            "-".into()
        }
    };
    format!("{} ({}–{})", percent(v), p(interval[0]), p(interval[1]))
}

/// The change of the WER in points with its interval: "+4.2 (+0.0 to +9.1)".
fn delta(t: &GenerationTarget) -> String {
    match (t.summary.wer_delta_points, t.summary.wer_delta_interval) {
        (Some(d), Some([lo, hi])) if d.0.is_finite() => {
            format!("{} ({} to {})", signed1(d.0), signed1(lo.0), signed1(hi.0))
        }
        _ => "-".into(),
    }
}

fn signed1(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let v = if v.abs() < 0.05 { 0.0 } else { v };
    format!("{v:+.1}")
}

fn db(v: Num) -> String {
    match v.0 {
        x if x == f64::INFINITY => "inf".into(),
        x if x.is_finite() => format!("{x:.2}"),
        _ => "-".into(),
    }
}

fn kl(v: Num) -> String {
    if v.0.is_finite() {
        format!("{:.4}", v.0)
    } else {
        "-".into()
    }
}

/// A text in quotes, its control characters escaped.
fn quoted(text: &str) -> String {
    format!("\"{}\"", crate::foundation::console::printable(text))
}

/// Where a sample's text first departed, in words: "step 3: \" cat\" → \" hat\"".
pub fn departure(s: &TargetSample) -> String {
    match &s.first_divergence {
        None => "none".into(),
        Some(d) => format!(
            "step {}: {} → {}",
            d.step,
            quoted(&d.reference_piece),
            quoted(&d.target_piece)
        ),
    }
}

fn scores_words(s: &Option<TextScores>) -> String {
    match s {
        Some(s) => format!(
            "WER {}, CER {}, {} of {} exact",
            rate(s.wer, s.wer_interval),
            rate(s.cer, s.cer_interval),
            s.exact,
            s.samples
        ),
        None => "no labels".into(),
    }
}

fn header(s: &mut String, r: &GenerationReport) {
    let _ = writeln!(
        s,
        "{} {} generation · {}\nspec      {} ({} parts: {}; max {} new tokens{})\nset       {} ({}; labels: {})\ntask      {}\nreference {} on the CPU EP: {}",
        bold("npu-audit"),
        r.tool.version,
        r.spec.path,
        format_args!("{}, {}", r.spec.layout, r.spec.form),
        r.spec.parts.len(),
        r.spec.parts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
        r.spec.max_new_tokens,
        r.spec.kv_length.map_or(String::new(), |k| format!(", KV buffers of {k}")),
        r.dataset.path,
        count(r.dataset.samples, "sample"),
        r.dataset.labels_from.as_deref().unwrap_or("none"),
        r.task,
        r.reference.path,
        scores_words(&r.reference_scores)
    );
}

fn targets_table(r: &GenerationReport) -> String {
    let mut b = Builder::default();
    b.push_record([
        "target",
        "status",
        "samples",
        "WER (95% CI)",
        "WER change, points (95% CI)",
        "same text",
        "diverged",
        "median first step",
        "top-1 per step",
        "mean KL",
        "median SQNR dB",
        "s/token",
    ]);
    for t in &r.targets {
        let m = &t.summary;
        b.push_record([
            t.id.clone(),
            t.status.as_str().to_string(),
            m.samples.to_string(),
            m.scores.as_ref().map_or("-".into(), |s| rate(s.wer, s.wer_interval)),
            delta(t),
            format!("{}/{}", m.same_text, m.samples),
            format!("{}/{}", m.diverged, m.samples),
            m.median_divergence_step.map_or("-".into(), |v| format!("{v}")),
            percent(m.top1_agreement),
            kl(m.mean_kl),
            db(m.median_sqnr_db),
            m.seconds_per_token.map_or("-".into(), |v| format!("{v:.3}")),
        ]);
    }
    use Kind::{Figure, Key};
    let kinds = [
        Key, Key, Figure, Figure, Figure, Figure, Figure, Figure, Figure, Figure, Figure, Figure,
    ];
    table_with(b, &Look::grid(&kinds).splittable(1, &[7, 8, 9, 10, 11]))
}

fn samples_table(t: &GenerationTarget) -> String {
    let mut b = Builder::default();
    b.push_record([
        "sample",
        "first divergence",
        "later differing",
        "word edits",
        "stop",
        "text",
    ]);
    for s in &t.samples {
        b.push_record([
            s.id.clone(),
            departure(s),
            s.later_differing.to_string(),
            s.words.map_or("-".into(), |w| format!("{}/{}", w.edits, w.of)),
            stop_word(s.stop).into(),
            match &s.error {
                Some(e) => format!("error: {e}"),
                None => quoted(&s.text),
            },
        ]);
    }
    use Kind::{Figure, Key, Words};
    table_with(b, &Look::grid(&[Key, Words, Figure, Figure, Key, Words]))
}

fn stop_word(s: crate::report::generation::StopReason) -> &'static str {
    use crate::report::generation::StopReason::*;
    match s {
        EndToken => "end",
        Limit => "limit",
        NoNumber => "NaN",
        Failed => "failed",
    }
}

fn reference_table(r: &GenerationReport) -> String {
    let mut b = Builder::default();
    b.push_record(["sample", "word edits", "stop", "reference text", "label"]);
    for s in &r.reference_samples {
        b.push_record([
            s.id.clone(),
            s.words.map_or("-".into(), |w| format!("{}/{}", w.edits, w.of)),
            stop_word(s.stop).into(),
            quoted(&s.text),
            s.label.as_deref().map_or("-".into(), quoted),
        ]);
    }
    use Kind::{Figure, Key, Words};
    table_with(b, &Look::grid(&[Key, Figure, Key, Words, Words]))
}

/// The report for a terminal.
pub fn table_text(r: &GenerationReport) -> String {
    let mut s = String::new();
    header(&mut s, r);
    let _ = writeln!(s, "\n{}", bold("TARGETS"));
    let _ = writeln!(s, "{}", targets_table(r));
    let _ = writeln!(s, "\n{}", bold("REFERENCE"));
    let _ = writeln!(s, "{}", reference_table(r));
    for t in &r.targets {
        let _ = writeln!(s, "\n{} {}", bold(&t.id), t.runtime.as_deref().unwrap_or(""));
        if let Some(e) = &t.error {
            let _ = writeln!(s, "error: {e}");
        }
        for p in &t.parts {
            let _ = writeln!(s, "  {}", part_words(p));
        }
        if !t.samples.is_empty() {
            let _ = writeln!(s, "{}", samples_table(t));
        }
        for x in &t.samples {
            if let Some(l) = &x.layers {
                let _ = writeln!(s, "  {}: {}", x.id, layers_words(l));
            }
        }
    }
    if !r.gate.is_empty() {
        let _ = writeln!(s, "\n{}", bold("GATE"));
        for g in &r.gate {
            let _ = writeln!(s, "{}", rule_words(g));
        }
        let failed: Vec<&str> = r.gate.iter().filter(|g| !g.pass).map(|g| g.target.as_str()).collect();
        let verdict = if failed.is_empty() {
            "PASS".to_string()
        } else {
            format!("FAIL ({})", failed.join(", "))
        };
        let _ = writeln!(s, "{} {verdict}", bold("VERDICT"));
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    prose(&s)
}

/// The per-layer audit of a divergent step in words: the layer that introduces the most error
/// by itself, then the first layer that departs from the baseline at each level.
pub fn layers_words(x: &crate::report::generation::StepExplanation) -> String {
    if let Some(e) = &x.error {
        return format!(
            "the per-layer audit of part {} at its first divergence failed: {e}",
            x.part
        );
    }
    let at = |p: &Option<crate::report::compare::LayerPointer>| {
        p.as_ref()
            .map_or("none".into(), |p| format!("#{} {} ({})", p.index, p.node, p.op_type))
    };
    let worst = x.worst_introduced.as_ref().map_or("no layer measured".into(), |w| {
        format!(
            "#{} {} ({}) introduces the most error alone, {} dB",
            w.index,
            w.node,
            w.op_type,
            db(w.introduced_sqnr_db)
        )
    });
    format!(
        "part {} at its first divergence: {worst}; against cpu:noopt, first code difference {}, first beyond rounding {}, first SQNR loss {}",
        x.part,
        at(&x.first_code_difference),
        at(&x.first_beyond_rounding),
        at(&x.first_sqnr_loss)
    )
}

/// A gate rule in words: what was measured, its upper bound against the limit, the outcome.
pub fn rule_words(g: &crate::report::generation::GenerationRule) -> String {
    let what = if g.measure == "wer_increase" {
        "WER increase"
    } else {
        "texts unlike the reference's"
    };
    format!(
        "{}: {what} {} points, one-sided 95% upper bound {} {} the limit {} ({}): {}",
        g.target,
        signed1(g.estimate.0),
        signed1(g.upper.0),
        if g.pass { "within" } else { "beyond" },
        g.limit,
        g.origin,
        if g.pass { "pass" } else { "FAIL" }
    )
}

/// One part's session in words: how it was made, its steps and their time, its placement.
pub fn part_words(p: &crate::report::generation::PartRun) -> String {
    let mut w = format!("part {}: session {:.0} ms", p.part, p.session_create_ms);
    if let Some(c) = &p.qnn_context {
        let _ = write!(w, " (context {c})");
    }
    let _ = write!(w, ", {} runs", p.runs);
    if let Some(ms) = p.mean_run_ms {
        let _ = write!(w, " of {ms:.1} ms");
    }
    if let Some([on, all]) = p.nodes_on_ep {
        let _ = write!(w, ", {on} of {all} nodes on the EP");
    }
    w
}

/// The report as Markdown (a pull-request comment).
pub fn markdown(r: &GenerationReport) -> String {
    let esc = |t: &str| t.replace('|', "\\|").replace('\n', " ");
    let mut s = String::new();
    let _ = writeln!(s, "### npu-audit generation · `{}`\n", esc(&r.spec.path));
    let _ = writeln!(
        s,
        "{} of `{}`, task `{}`; reference `{}`: {}\n",
        count(r.dataset.samples, "sample"),
        esc(&r.dataset.path),
        r.task,
        esc(&r.reference.path),
        scores_words(&r.reference_scores)
    );
    let _ = writeln!(
        s,
        "| target | status | WER (95% CI) | WER change, points | same text | diverged | median first step | top-1 per step | mean KL | median SQNR dB |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for t in &r.targets {
        let m = &t.summary;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {}/{} | {}/{} | {} | {} | {} | {} |",
            esc(&t.id),
            t.status.as_str(),
            m.scores.as_ref().map_or("-".into(), |x| rate(x.wer, x.wer_interval)),
            delta(t),
            m.same_text,
            m.samples,
            m.diverged,
            m.samples,
            m.median_divergence_step.map_or("-".into(), |v| format!("{v}")),
            percent(m.top1_agreement),
            kl(m.mean_kl),
            db(m.median_sqnr_db)
        );
    }
    for t in &r.targets {
        diverged_markdown(&mut s, r, t);
    }
    if !r.gate.is_empty() {
        let _ = writeln!(s);
        for g in &r.gate {
            let _ = writeln!(s, "- {}", esc(&rule_words(g)));
        }
    }
    for n in &r.notes {
        let _ = writeln!(s, "\n> {}", esc(n));
    }
    s
}

/// A target's diverged samples as a folded Markdown table: both texts and where they part.
fn diverged_markdown(s: &mut String, r: &GenerationReport, t: &GenerationTarget) {
    let esc = |t: &str| t.replace('|', "\\|").replace('\n', " ");
    let diverged: Vec<&TargetSample> = t.samples.iter().filter(|x| x.first_divergence.is_some()).collect();
    if diverged.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n<details><summary>{}: {} diverged</summary>\n",
        esc(&t.id),
        count(diverged.len(), "sample")
    );
    let _ = writeln!(s, "| sample | first divergence | reference text | target text |");
    let _ = writeln!(s, "| --- | --- | --- | --- |");
    for x in diverged {
        let reference = r
            .reference_samples
            .iter()
            .find(|p| p.id == x.id)
            .map_or("", |p| p.text.as_str());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            esc(&x.id),
            esc(&departure(x)),
            esc(reference),
            esc(&x.text)
        );
        if let Some(l) = &x.layers {
            let _ = writeln!(s, "| | {} | | |", esc(&layers_words(l)));
        }
    }
    let _ = writeln!(s, "\n</details>");
}
