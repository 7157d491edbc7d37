//! The terminal rendering of a fingerprint: probes × targets, then the evidence behind every
//! verdict that is not a clean rule, and controls that came out wrong.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{paragraph, prose, table_with, ColumnKind, Frame, Look};

use super::present::{exact_num, shorten};
use crate::analyses::fingerprint::result::{FingerprintReport, ProbeResult};

/// Whether a control came out other than a working harness must make it (a control the target
/// refused or left to the CPU says nothing about the harness).
fn control_failed(p: &ProbeResult) -> bool {
    let classified = p.error.is_none() && p.verdict != "cpu_fallback";
    classified && p.expected.as_ref().is_some_and(|e| *e != p.verdict)
}

/// Verdicts whose evidence a reader needs to see.
fn needs_evidence(p: &ProbeResult) -> bool {
    matches!(p.verdict.as_str(), "other" | "approximate" | "non_deterministic")
        || p.tie_window.is_some()
        || control_failed(p)
}

/// Renders the report for a terminal.
pub fn render(r: &FingerprintReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "FINGERPRINT  probe set v{}, {} run(s) per probe",
        r.probe_set_version, r.repeat
    );
    let _ = writeln!(out, "{}", verdict_table(r));
    failed_controls(&mut out, r);
    not_run(&mut out, r);
    let evidence = evidence(r);
    if !evidence.is_empty() {
        let _ = writeln!(
            out,
            "\nEVIDENCE (points where the candidates disagree, or the target missed)"
        );
        out.push_str(&evidence);
    }
    let _ = writeln!(
        out,
        "\n{}",
        paragraph(
            "RULES  half-even: ties to even (ONNX QuantizeLinear); half-away: ties away from zero; half-up: ties toward +inf;\n       floor: toward -inf; truncation: toward zero. A rule is named only when it predicts every point; n/m counts\n       the points where the rules disagree (the deciding ones) that it got right. exact / ±1 LSB / ≤k LSB: codes of a\n       nonlinear function against the correctly rounded ones. fp32 / fp16 / fp16-ftz: the float arithmetic that\n       reproduces every output (ftz: subnormals flushed to zero)."
        )
    );
    prose(&out)
}

/// Probes by targets, each cell the verdict in short, and where each target's fingerprint came
/// from.
fn verdict_table(r: &FingerprintReport) -> String {
    let mut ids: Vec<(String, String)> = Vec::new();
    for p in r.targets.iter().flat_map(|t| &t.probes) {
        if !ids.iter().any(|(id, _)| *id == p.probe) {
            ids.push((p.probe.clone(), p.op.clone()));
        }
    }
    let mut b = Builder::default();
    let mut header = vec!["probe".to_string(), "op".to_string()];
    header.extend(r.targets.iter().map(|t| t.target.clone()));
    b.push_record(header);
    for (id, op) in &ids {
        let mut row = vec![id.clone(), op.clone()];
        for t in &r.targets {
            row.push(t.verdict(id).map(ProbeResult::cell).unwrap_or_else(|| "-".into()));
        }
        b.push_record(row);
    }
    let mut status = vec!["(target)".to_string(), String::new()];
    status.extend(r.targets.iter().map(|t| {
        if t.status != "ok" {
            t.status.clone()
        } else if t.cached {
            "cached".into()
        } else {
            "ran now".into()
        }
    }));
    b.push_record(status);
    // Probe ids and each target's verdict words: read whole; the op's description wraps. Too
    // many targets for the terminal, the verdicts continue in another table by probe.
    let mut kinds = vec![ColumnKind::Key; 2 + r.targets.len()];
    kinds[1] = ColumnKind::Words;
    table_with(b, &Look::plain(Frame::Psql, &kinds).splittable(1, &[1]))
}

/// Targets that could not be fingerprinted, and controls that came out wrong.
fn failed_controls(out: &mut String, r: &FingerprintReport) {
    for t in &r.targets {
        if let Some(e) = &t.error {
            let _ = writeln!(out, "\n{}: {}", t.target, e);
        }
        for p in &t.probes {
            if let Some(expected) = p.expected.as_ref().filter(|_| control_failed(p)) {
                let _ = writeln!(
                    out,
                    "\nCONTROL FAILED {} on {}: expected {expected}, got {} (the harness or this target's Floor is off)",
                    p.probe, t.target, p.verdict
                );
            }
        }
    }
}

/// Probes a target refused, crashed on or timed out on, with the first line of the error.
fn not_run(out: &mut String, r: &FingerprintReport) {
    let mut refused: Vec<String> = Vec::new();
    for t in &r.targets {
        for p in &t.probes {
            if let Some(e) = &p.error {
                let first = e.lines().next().unwrap_or("");
                refused.push(format!(
                    "  {} {} ({}): {}",
                    t.target,
                    p.probe,
                    p.verdict,
                    shorten(first, 160)
                ));
            }
        }
    }
    if !refused.is_empty() {
        let _ = writeln!(out, "\nPROBES THAT DID NOT RUN");
        for line in refused {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// The evidence of every verdict a reader needs to see: each candidate's prediction and what the
/// target returned, at the deciding points.
fn evidence(r: &FingerprintReport) -> String {
    let mut evidence = String::new();
    for t in &r.targets {
        for p in t.probes.iter().filter(|p| needs_evidence(p)) {
            let _ = writeln!(
                evidence,
                "\n  {} {} ({}): {}; candidates: {}",
                t.target,
                p.probe,
                p.op,
                p.summary,
                p.candidates
                    .iter()
                    .map(|c| format!("{} {}/{}", c.candidate, c.matching, p.points))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if p.evidence.is_empty() {
                continue;
            }
            let mut b = Builder::default();
            let mut header = vec!["input".to_string(), "ideal".to_string()];
            header.extend(p.evidence[0].predicted.iter().map(|(n, _)| n.clone()));
            header.push("target".into());
            b.push_record(header);
            for e in &p.evidence {
                let mut row = vec![e.input.clone(), exact_num(e.ideal)];
                row.extend(e.predicted.iter().map(|(_, v)| exact_num(*v)));
                row.push(exact_num(e.observed));
                b.push_record(row);
            }
            let kinds = vec![ColumnKind::Figure; 3 + p.evidence[0].predicted.len()];
            let table = table_with(b, &Look::plain(Frame::Blank, &kinds).indented(4));
            for line in table.lines() {
                let _ = writeln!(evidence, "    {line}");
            }
        }
    }
    evidence
}
