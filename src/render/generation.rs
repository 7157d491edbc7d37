//! A generation report in the terminal and in Markdown: per target first its agreement with the
//! reference (same text, first divergence), then how each step's logits drift, and the WER only
//! when the set has labels; per sample the first divergent token with both texts; the gate.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, prose, table_with, ColumnKind, Look};
use super::present::{count, db, exact_num, num, pct, rate_with_interval, signed};
use crate::report::common::Num;
use crate::report::gate::{Rule, RuleResult, Verdict};
use crate::report::generation::{
    GenerationReport, GenerationTarget, LengthDeparture, PromptSweep, StopReason, TargetSample, TextScores,
};

/// The change of the WER in points with its interval: "+4.2 (+0.0 to +9.1)"; "+0.0 (no
/// interval)" when the sample cannot bound it.
fn delta(t: &GenerationTarget) -> String {
    let m = &t.summary;
    match (m.wer_delta_points, m.wer_delta_interval) {
        (Some(d), Some([lo, hi])) => format!("{} ({} to {})", signed(d.0, 1), signed(lo.0, 1), signed(hi.0, 1)),
        (Some(d), None) => format!("{} (no interval)", signed(d.0, 1)),
        _ => "-".into(),
    }
}

/// The mean KL of a target's steps, with the share of steps it is over when some were not
/// finite: "0.0044 (6 of 38 steps)".
fn mean_kl(t: &GenerationTarget) -> String {
    let m = &t.summary;
    if m.nonfinite_steps == 0 {
        num(m.mean_kl.0)
    } else {
        format!(
            "{} ({} of {} steps)",
            num(m.mean_kl.0),
            m.steps - m.nonfinite_steps,
            m.steps
        )
    }
}

/// Samples scored, and of how many when some did not finish: "5 of 6".
fn samples(t: &GenerationTarget, total: usize) -> String {
    if t.summary.samples == total {
        total.to_string()
    } else {
        format!("{} of {total}", t.summary.samples)
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
            rate_with_interval(s.wer, s.wer_interval),
            rate_with_interval(s.cer, s.cer_interval),
            s.exact,
            s.samples
        ),
        None => "no labels".into(),
    }
}

fn header(s: &mut String, r: &GenerationReport) {
    let scored = r.dataset.samples - r.unscored.len();
    let set = if r.unscored.is_empty() {
        count(r.dataset.samples, "sample")
    } else {
        format!("{} of which {scored} scored", count(r.dataset.samples, "sample"))
    };
    let _ = writeln!(
        s,
        "{} {} generation · {}\nspec      {} ({}: {}; max {} new tokens{})\nset       {} ({set}; labels: {})\ntask      {}\nreference {} on the CPU EP: {}",
        bold("npu-audit"),
        r.tool.version,
        r.spec.path,
        format_args!("{}, {}", r.spec.layout, r.spec.form),
        count(r.spec.parts.len(), "part"),
        r.spec.parts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
        r.spec.max_new_tokens,
        r.spec.kv_length.map_or(String::new(), |k| format!(", KV buffers of {k}")),
        r.dataset.path,
        r.dataset.labels_from.as_deref().unwrap_or("none"),
        r.task.name(),
        r.reference.path,
        scores_words(&r.reference_scores)
    );
}

/// Whether the set has labels (the WER columns are shown only then).
fn labelled(r: &GenerationReport) -> bool {
    r.reference_scores.is_some()
}

fn targets_table(r: &GenerationReport) -> String {
    let with_wer = labelled(r);
    let mut head = vec![
        "target",
        "status",
        "samples",
        "same text",
        "diverged",
        "median first step",
        "top-1 per step",
        "mean KL",
        "median SQNR dB",
        "s/token",
    ];
    if with_wer {
        head.extend(["WER (95% CI)", "WER change, points (95% CI)"]);
    }
    let mut b = Builder::default();
    b.push_record(head.clone());
    for t in &r.targets {
        let m = &t.summary;
        let mut row = vec![
            t.id.clone(),
            t.status.as_str().to_string(),
            samples(t, r.dataset.samples),
            format!("{}/{}", m.same_text, m.samples),
            format!("{}/{}", m.diverged, m.samples),
            m.median_divergence_step.map_or("-".into(), |v| format!("{v}")),
            pct(Some(m.top1_agreement.0).filter(|v| !v.is_nan())),
            mean_kl(t),
            db(m.median_sqnr_db.0),
            m.seconds_per_token.map_or("-".into(), |v| format!("{v:.3}")),
        ];
        if with_wer {
            row.push(
                m.scores
                    .as_ref()
                    .map_or("-".into(), |s| rate_with_interval(s.wer, s.wer_interval)),
            );
            row.push(delta(t));
        }
        b.push_record(row);
    }
    let mut kinds = vec![ColumnKind::Key, ColumnKind::Key];
    kinds.resize(head.len(), ColumnKind::Figure);
    let secondary: Vec<usize> = (6..head.len()).collect();
    table_with(b, &Look::grid(&kinds).splittable(1, &secondary))
}

fn samples_table(t: &GenerationTarget) -> String {
    let mut b = Builder::default();
    b.push_record(["sample", "first divergence", "SDT", "word edits", "stop", "text"]);
    for s in &t.samples {
        b.push_record([
            s.id.clone(),
            departure(s),
            s.sdt.to_string(),
            s.words.map_or("-".into(), |w| format!("{}/{}", w.edits, w.of)),
            stop_word(s.stop).into(),
            match &s.error {
                Some(e) => format!("not scored: {e}"),
                None if !s.scored => format!("not scored: {}", quoted(&s.text)),
                None => quoted(&s.text),
            },
        ]);
    }
    use ColumnKind::{Figure, Key, Words};
    table_with(b, &Look::grid(&[Key, Words, Figure, Figure, Key, Words]))
}

/// who_what_benchmark's means in words: "FDT 3.2, SDT 4.1 (22.0% of its tokens) on average".
pub fn divergent_words(t: &GenerationTarget) -> Option<String> {
    let m = &t.summary;
    let (fdt, sdt, norm) = (m.fdt_mean?, m.sdt_mean?, m.sdt_norm_mean?);
    Some(format!(
        "divergent tokens per sample (who_what_benchmark): FDT {}, SDT {} ({} of its tokens) on average",
        num(fdt.0),
        num(sdt.0),
        pct(Some(norm.0))
    ))
}

/// A target's figures per prompt length.
fn sweep_table(r: &GenerationReport, sweep: &PromptSweep) -> String {
    let mut b = Builder::default();
    b.push_record([
        "prompt length",
        "samples",
        "first token same",
        "first token KL",
        "diverged",
        "median first step",
        "prompt",
    ]);
    for row in &sweep.rows {
        b.push_record([
            row.length.to_string(),
            row.samples.to_string(),
            format!("{}/{}", row.first_token_same, row.samples),
            num(row.first_token_kl.0),
            format!("{}/{}", row.diverged, row.samples),
            row.median_divergence_step.map_or("-".into(), |v| format!("{v}")),
            length_words(r, row.length),
        ]);
    }
    use ColumnKind::{Figure, Key, Words};
    table_with(b, &Look::grid(&[Key, Figure, Figure, Figure, Figure, Figure, Words]))
}

/// Where a prompt of `length` tokens falls against the spec's prefill chunks and KV buffers:
/// "fills 8 chunks of 4", "1 token into chunk 9", "fills the KV buffers"; empty when nowhere
/// particular.
pub fn length_words(r: &GenerationReport, length: usize) -> String {
    let total = r.spec.start_tokens.len() + length;
    let mut words = Vec::new();
    if let Some(n) = r.spec.prefill_length.filter(|n| *n > 0) {
        if total.is_multiple_of(n) {
            words.push(format!("fills {} of {n}", count(total / n, "chunk")));
        } else if total % n == 1 && total > n {
            words.push(format!("1 token into chunk {}", total / n + 1));
        }
    }
    if let Some(k) = r.spec.kv_length {
        if total + r.spec.max_new_tokens.saturating_sub(1) == k {
            words.push("its decode fills the KV buffers".into());
        }
    }
    words.join("; ")
}

/// A length where a target departs, in words.
fn departure_at_length(r: &GenerationReport, d: &LengthDeparture) -> String {
    let at = length_words(r, d.length);
    let at = if at.is_empty() {
        String::new()
    } else {
        format!(" ({at})")
    };
    format!(
        "the first new token departs at prompt length {}{at} on {} whose shorter cuts all agreed: {}",
        d.length,
        count(d.prompts.len(), "prompt"),
        crate::foundation::words::listed(&d.prompts, 6)
    )
}

fn stop_word(s: StopReason) -> &'static str {
    match s {
        StopReason::EndToken => "end",
        StopReason::Limit => "limit",
        StopReason::NoNumber => "NaN",
        StopReason::Failed => "failed",
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
    use ColumnKind::{Figure, Key, Words};
    table_with(b, &Look::grid(&[Key, Figure, Key, Words, Words]))
}

/// The report for a terminal.
pub fn table_text(r: &GenerationReport) -> String {
    let mut s = String::new();
    header(&mut s, r);
    let _ = writeln!(s, "\n{}", bold("TARGETS"));
    let _ = writeln!(s, "{}", targets_table(r));
    let swept = !r.prompt_lengths.is_empty();
    if swept {
        let _ = writeln!(
            s,
            "\nprompt lengths {}: {} cuts decoded (each cut's row in the JSON)",
            crate::foundation::words::listed(&r.prompt_lengths.iter().map(|l| l.to_string()).collect::<Vec<_>>(), 12),
            r.reference_samples.len()
        );
    } else {
        let _ = writeln!(s, "\n{}", bold("REFERENCE"));
        let _ = writeln!(s, "{}", reference_table(r));
    }
    for t in &r.targets {
        let _ = writeln!(s, "\n{} {}", bold(&t.id), t.runtime.as_deref().unwrap_or(""));
        if let Some(e) = &t.error {
            let _ = writeln!(s, "error: {e}");
        }
        for p in &t.parts {
            let _ = writeln!(s, "  {}", part_words(p));
        }
        if let Some(w) = divergent_words(t) {
            let _ = writeln!(s, "  {w}");
        }
        if let Some(sweep) = &t.sweep {
            let _ = writeln!(s, "{}", sweep_table(r, sweep));
            for d in &sweep.departs_at {
                let _ = writeln!(s, "  {}", departure_at_length(r, d));
            }
        } else if !t.samples.is_empty() {
            let _ = writeln!(s, "{}", samples_table(t));
        }
        for x in &t.samples {
            if let Some(l) = &x.layers {
                let _ = writeln!(s, "  {}: {}", x.id, layers_words(l));
            }
        }
    }
    gate_text(&mut s, r);
    for n in report_notes(r) {
        let _ = writeln!(s, "note: {n}");
    }
    prose(&s)
}

/// The report's notes, and what a reader needs to read its WER: a sample with more word edits
/// than its label has words (a decode that loops, or runs past a short label) takes a WER past
/// 100%, which is insertions, not a broken figure.
pub fn report_notes(r: &GenerationReport) -> Vec<String> {
    let mut notes = r.notes.clone();
    let over: Vec<String> = r
        .targets
        .iter()
        .flat_map(|t| {
            t.samples
                .iter()
                .filter(|s| s.scored && s.words.is_some_and(|w| w.edits > w.of))
                .map(move |s| {
                    let w = s
                        .words
                        .unwrap_or(crate::report::generation::EditCounts { edits: 0, of: 0 });
                    format!(
                        "{} {} has {} against a {}-word label",
                        t.id,
                        s.id,
                        count(w.edits, "word edit"),
                        w.of
                    )
                })
        })
        .collect();
    if !over.is_empty() {
        notes.push(format!(
            "a WER can pass 100%: it counts every word a text adds beyond its label ({})",
            crate::foundation::words::listed(&over, 3)
        ));
    }
    notes
}

/// The gate's lines: each limit with its estimate, its bound and the limit; a target that did
/// not run to the end; the verdict.
fn gate_text(s: &mut String, r: &GenerationReport) {
    let lines = gate_lines(r);
    if lines.is_empty() && r.gate.verdict == Verdict::None {
        return;
    }
    let _ = writeln!(s, "\n{}", bold("GATE"));
    for l in lines {
        let _ = writeln!(s, "{l}");
    }
    let _ = writeln!(s, "{} {}", bold("VERDICT"), verdict_words(r));
}

/// The gate's lines, one per rule worth a line (a limit, a target that did not run to the end).
pub fn gate_lines(r: &GenerationReport) -> Vec<String> {
    r.gate.rules.iter().filter_map(|g| rule_words(r, g)).collect()
}

/// The verdict with the targets that failed it and those it did not gate: `FAIL (cpu)`,
/// `PASS (not gated: qnn:sm8650)`, `no limits set`.
pub fn verdict_words(r: &GenerationReport) -> String {
    let targets = |pick: &dyn Fn(&RuleResult) -> bool| {
        let mut ids: Vec<&str> = r
            .gate
            .rules
            .iter()
            .filter(|g| pick(g))
            .map(|g| g.target.as_str())
            .collect();
        ids.dedup();
        ids.join(", ")
    };
    let ungated = targets(&|g| g.ungated);
    let ungated = if ungated.is_empty() {
        String::new()
    } else {
        format!(" (not gated: {ungated})")
    };
    match r.gate.verdict {
        Verdict::None => format!("no limits set{ungated}"),
        Verdict::Pass => format!("PASS{ungated}"),
        Verdict::Fail => format!("FAIL ({}){ungated}", targets(&|g| !g.pass)),
    }
}

/// A gate rule in words (`None` for a `ran` rule that passed: every target that ran says so
/// in its row): what was measured, its bound against the limit, the outcome.
pub fn rule_words(r: &GenerationReport, g: &RuleResult) -> Option<String> {
    if g.rule == Rule::Ran {
        return match (g.pass, g.ungated) {
            (true, false) => None,
            (_, true) => Some(format!("{}: {}", g.target, g.origin)),
            (false, false) => Some(format!("{}: {}: FAIL", g.target, g.origin)),
        };
    }
    let what = g.measure.map_or(g.rule.as_str(), |m| m.words());
    let points = g.rule == Rule::MaxAccuracyDrop;
    let plain = matches!(g.rule, Rule::MaxKldMean | Rule::MaxKldP99 | Rule::MaxPplRatio);
    let value = |v: Num| {
        if points {
            signed(v.0, 1)
        } else if plain {
            num(v.0)
        } else {
            pct(Some(v.0).filter(|x| !x.is_nan()))
        }
    };
    let limit = if points || plain {
        exact_num(g.limit.0)
    } else {
        pct(Some(g.limit.0))
    };
    let bound = match g.bound {
        Some(b) if !g.measured.0.is_nan() => format!("{} {}", b.words(), value(g.measured)),
        Some(b) => format!("{} not measured: {}", b.words(), unmeasured_reason(r, g)),
        None => value(g.measured),
    };
    let estimate = g.estimate.map_or(String::new(), |e| format!(" {}", value(e)));
    let unit = match g.rule {
        Rule::MaxAccuracyDrop => " points",
        Rule::MaxKldMean | Rule::MaxKldP99 => " nats",
        _ => "",
    };
    let side = if g.pass { "within" } else { "beyond" };
    Some(format!(
        "{}: {what}{estimate}{unit}, {bound}, {side} the limit {limit}{unit} ({}): {}",
        g.target,
        g.origin,
        if g.pass { "pass" } else { "FAIL" }
    ))
}

/// Why a rule's bound is not a number, from the target's figures.
fn unmeasured_reason(r: &GenerationReport, g: &RuleResult) -> String {
    let t = r.targets.iter().find(|t| t.id == g.target);
    t.and_then(|t| {
        t.summary
            .wer_delta_unbounded
            .clone()
            .or_else(|| t.corpus.as_ref().and_then(|c| c.bounds.unbounded.clone()))
    })
    .unwrap_or_else(|| "the set cannot bound it".into())
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
            db(w.introduced_sqnr_db.0)
        )
    });
    let overflow = x.first_overflow.as_ref().map_or(String::new(), |o| {
        format!(
            "first overflow {} (the cause); ",
            crate::render::present::overflow_at(o)
        )
    });
    format!(
        "part {} at its first divergence: {overflow}{worst}; against cpu:noopt, first code difference {}, first beyond rounding {}, first SQNR loss {}",
        x.part,
        at(&x.first_code_difference),
        at(&x.first_beyond_rounding),
        at(&x.first_sqnr_loss)
    )
}

/// One part's session in words: how it was made, its steps and their time, its placement.
pub fn part_words(p: &crate::report::generation::PartRun) -> String {
    let mut w = format!("part {}: session {:.0} ms", p.part, p.session_create_ms);
    if let Some(c) = &p.qnn_context {
        let _ = write!(w, " (context {c})");
    }
    let _ = write!(w, ", {}", count(p.runs, "run"));
    if let Some(ms) = p.mean_run_ms {
        let _ = write!(w, " of {ms:.1} ms");
    }
    if let Some(threads) = p.intra_op_threads {
        let _ = write!(w, ", {}", count(threads, "thread"));
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
        r.task.name(),
        esc(&r.reference.path),
        scores_words(&r.reference_scores)
    );
    let with_wer = labelled(r);
    let _ = writeln!(
        s,
        "| target | status | samples | same text | diverged | median first step | top-1 per step | mean KL | median SQNR dB |{}",
        if with_wer { " WER (95% CI) | WER change, points |" } else { "" }
    );
    let _ = writeln!(
        s,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |{}",
        if with_wer { " --- | --- |" } else { "" }
    );
    for t in &r.targets {
        let m = &t.summary;
        let wer = if with_wer {
            format!(
                " {} | {} |",
                m.scores
                    .as_ref()
                    .map_or("-".into(), |x| rate_with_interval(x.wer, x.wer_interval)),
                delta(t)
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}/{} | {}/{} | {} | {} | {} | {} |{wer}",
            esc(&t.id),
            t.status.as_str(),
            samples(t, r.dataset.samples),
            m.same_text,
            m.samples,
            m.diverged,
            m.samples,
            m.median_divergence_step.map_or("-".into(), |v| format!("{v}")),
            pct(Some(m.top1_agreement.0).filter(|v| !v.is_nan())),
            mean_kl(t),
            db(m.median_sqnr_db.0)
        );
    }
    for t in &r.targets {
        if let Some(w) = divergent_words(t) {
            let _ = writeln!(s, "\n{}: {w}", esc(&t.id));
        }
        match &t.sweep {
            Some(sweep) => sweep_markdown(&mut s, r, t, sweep),
            None => diverged_markdown(&mut s, r, t),
        }
    }
    markdown_verdict_and_notes(&mut s, r);
    s
}

/// The Markdown tail of a generation or corpus report: the verdict with its gate lines, then the
/// notes.
pub fn markdown_verdict_and_notes(s: &mut String, r: &GenerationReport) {
    let esc = |t: &str| t.replace('|', "\\|").replace('\n', " ");
    let lines = gate_lines(r);
    if !lines.is_empty() || r.gate.verdict != Verdict::None {
        let _ = writeln!(s, "\n**Verdict: {}**\n", verdict_words(r));
        for l in lines {
            let _ = writeln!(s, "- {}", esc(&l));
        }
    }
    for n in report_notes(r) {
        let _ = writeln!(s, "\n> {}", esc(&n));
    }
}

/// A target's prompt-length sweep as a Markdown table, then the lengths where it departs.
fn sweep_markdown(s: &mut String, r: &GenerationReport, t: &GenerationTarget, sweep: &PromptSweep) {
    let _ = writeln!(s, "\n**{}** by prompt length\n", t.id.replace('|', "\\|"));
    let _ = writeln!(
        s,
        "| prompt length | first token same | first token KL | diverged | prompt |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- |");
    for row in &sweep.rows {
        let _ = writeln!(
            s,
            "| {} | {}/{} | {} | {}/{} | {} |",
            row.length,
            row.first_token_same,
            row.samples,
            num(row.first_token_kl.0),
            row.diverged,
            row.samples,
            length_words(r, row.length)
        );
    }
    for d in &sweep.departs_at {
        let _ = writeln!(s, "\n- {}", departure_at_length(r, d));
    }
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
