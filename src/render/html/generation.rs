//! A generation report as one HTML page: the targets' figures, then every sample with the
//! reference's text and each target's lined up, the text after the first divergence marked.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::{SELF_CHECK_JS, STYLE};
use crate::render::generation::{departure, length_words, part_words};
use crate::render::present::num;
use crate::report::generation::{GenerationReport, GenerationTask, TargetSample};

/// A target's text with what follows the shared prefix marked.
fn marked(sample: &TargetSample) -> Markup {
    let Some(d) = &sample.first_divergence else {
        return html! { (sample.text) };
    };
    let common = d.common_text.as_str();
    match sample.text.strip_prefix(common) {
        Some(rest) => html! { (common) mark title=(format!("first divergence: {}", departure(sample))) { (rest) } },
        None => html! { mark title=(format!("first divergence: {}", departure(sample))) { (sample.text) } },
    }
}

/// The page (a corpus drift report's own: `corpus`).
pub fn render(r: &GenerationReport) -> String {
    if r.task == GenerationTask::Score {
        return super::corpus::render(r);
    }
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "npu-audit generation: " (r.spec.path) } style { (PreEscaped(STYLE)) } }
            body {
                h1 { "npu-audit generation" }
                p { "Spec " code { (r.spec.path) } " (" (r.spec.layout) ", " (r.spec.form) "), reference " code { (r.reference.path) }
                    ", set " code { (r.dataset.path) } " (" (r.dataset.samples) " samples), task " (r.task.name()) "." }
                (targets(r))
                (sweeps(r))
                h2 { "Texts" }
                p.muted { "Each target's text after its first divergent token is marked; hover for the tokens." }
                table {
                    tr { th { "sample" } th { "label" } th { "reference" } @for t in &r.targets { th { (t.id) } } }
                    @for (k, s) in r.reference_samples.iter().enumerate() {
                        tr {
                            td { code { (s.id) } }
                            td { (s.label.as_deref().unwrap_or("")) }
                            td { (s.text) }
                            @for t in &r.targets {
                                td { @match t.samples.get(k) { Some(x) => (marked(x)), None => span.muted { "not run" } } }
                            }
                        }
                    }
                }
                @for n in &r.notes { p.note { (n) } }
                p.muted { "npu-audit " (r.tool.version) }
                (PreEscaped(format!("<script>{SELF_CHECK_JS}</script>\n")))
            }
        }
    };
    page.into_string()
}

/// Each target's prompt-length sweep, a table per target.
fn sweeps(r: &GenerationReport) -> Markup {
    html! {
        @for t in &r.targets {
            @if let Some(sweep) = &t.sweep {
                h2 { (t.id) " by prompt length" }
                table {
                    tr { th { "prompt length" } th { "first token same" } th { "first token KL" } th { "diverged" } th { "prompt" } }
                    @for row in &sweep.rows {
                        tr {
                            td.num { (row.length) }
                            td.num { (row.first_token_same) "/" (row.samples) }
                            td.num { (num(row.first_token_kl.0)) }
                            td.num { (row.diverged) "/" (row.samples) }
                            td { (length_words(r, row.length)) }
                        }
                    }
                }
                @for d in &sweep.departs_at {
                    p { "Departs at prompt length " (d.length) ": " (d.prompts.join(", ")) }
                }
            }
        }
    }
}

fn targets(r: &GenerationReport) -> Markup {
    let pct = |v: f64| {
        if v.is_finite() {
            format!("{:.1}%", 100.0 * v)
        } else {
            "-".into()
        }
    };
    html! {
        h2 { "Targets" }
        table {
            tr { th { "target" } th { "status" } th { "WER" } th { "same text" } th { "diverged" } th { "top-1 per step" } th { "parts" } }
            @for t in &r.targets {
                tr {
                    td { (t.id) } td { (t.status.as_str()) @if let Some(e) = &t.error { br; span.muted { (e) } } }
                    td.num { (t.summary.scores.as_ref().map_or("-".into(), |s| pct(s.wer.0))) }
                    td.num { (t.summary.same_text) "/" (t.summary.samples) }
                    td.num { (t.summary.diverged) "/" (t.summary.samples) }
                    td.num { (pct(t.summary.top1_agreement.0)) }
                    td { @for p in &t.parts { (part_words(p)) br; } }
                }
            }
        }
    }
}
