//! `repro`'s findings on the terminal and in Markdown: how the search went, the minimal window and
//! its figures, why it is minimal, and the bundle (what its `run.py` prints is the same sentence
//! per output as here).

use std::fmt::Write as _;

use super::present::count;
use crate::report::repro::{CandidateReport, LayerRef, OutputFigures, ReproReport, ReproStatus};

/// `12 windows tried in 14 sessions`.
fn tried(r: &ReproReport) -> String {
    format!(
        "{} tried in {}",
        count(r.candidates_tried, "window"),
        count(r.sessions, "session")
    )
}

/// A layer as one phrase.
fn layer(l: &LayerRef) -> String {
    format!("#{} {} ({})", l.position, l.node, l.op_type)
}

/// A window as one phrase.
fn span(first: &LayerRef, last: &LayerRef, layers: usize) -> String {
    if layers == 1 {
        layer(first)
    } else {
        format!("{} .. {}, {layers} layers", layer(first), layer(last))
    }
}

/// The outcome in one line.
fn headline(r: &ReproReport) -> String {
    let who = format!("{} against {}", r.target.id, r.against.id);
    match r.status {
        ReproStatus::Reproduced => format!("REPRODUCED: {who}"),
        ReproStatus::NotReproduced => format!("NOT REPRODUCED: {who} departs inside the model, not in a bundle alone"),
        ReproStatus::NoDeparture => format!("NO DEPARTURE: {who}"),
        ReproStatus::TargetDidNotRun => format!("DID NOT RUN: {who}"),
    }
}

fn outputs(s: &mut String, indent: &str, figures: &[OutputFigures]) {
    for f in figures {
        let _ = writeln!(s, "{indent}{}", f.sentence());
    }
}

fn candidate(c: &CandidateReport) -> String {
    let what = if c.target_fails {
        "the target fails on it".to_string()
    } else if let Some(e) = &c.error {
        format!("not judged: {e}")
    } else if c.departs {
        "departs".into()
    } else {
        "does not depart".into()
    };
    format!("{}: {what}", span(&c.first, &c.last, c.layers))
}

/// The terminal rendering.
pub fn table_text(r: &ReproReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", headline(r));
    let _ = writeln!(s, "model {} (sha256 {})", r.model, r.model_sha256);
    let _ = writeln!(s, "departing: {}", r.criterion.text);
    if let Some(st) = &r.start {
        let _ = writeln!(s, "started at {} ({})", layer(&st.layer), st.reason.replace('_', " "));
    }
    let _ = writeln!(s, "{}", tried(r));
    if let Some(w) = &r.window {
        let _ = writeln!(
            s,
            "WINDOW {} ({}; inputs {})",
            span(&w.first, &w.last, w.layers.len()),
            count(w.nodes, "node"),
            w.inputs.join(", ")
        );
        if let Some(e) = w.error.as_ref().filter(|_| w.target_fails) {
            let _ = writeln!(s, "  the target fails on it: {e}");
        }
        outputs(&mut s, "  ", &w.outputs);
    }
    for m in &r.minimality {
        let _ = writeln!(s, "  one layer smaller, {}", candidate(m));
    }
    if let Some(c) = &r.closest {
        let _ = writeln!(s, "CLOSEST {}", candidate(c));
        outputs(&mut s, "  ", &c.outputs);
    }
    if let Some(b) = &r.bundle {
        let _ = writeln!(
            s,
            "BUNDLE {}: model {} bytes (source {} bytes), {}; alone it {}",
            if b.path.is_empty() {
                "(not written: --out DIR|FILE.zip writes it)"
            } else {
                b.path.as_str()
            },
            b.model_bytes,
            b.source_model_bytes,
            count(b.files.len() + 1, "file"),
            if b.reproduces {
                "reproduces"
            } else {
                "does not reproduce"
            }
        );
        outputs(&mut s, "  ", &b.outputs);
        if !b.target_placement.is_empty() {
            let eps: Vec<String> = b
                .target_placement
                .iter()
                .map(|p| format!("{} {} node(s)", p.ep, p.nodes.len()))
                .collect();
            let _ = writeln!(s, "  on {}: {}", r.target.id, eps.join(", "));
        }
        if let Some(sc) = &b.scrubbed {
            let outcome = match (&sc.note, sc.reproduces) {
                (Some(note), _) => note.as_str(),
                (None, true) => "the departure still reproduces; the bundle carries them (no SQNR: the golden run is of the real weights)",
                (None, false) => "the departure does not reproduce with them; the bundle keeps the real weights",
            };
            let _ = writeln!(
                s,
                "  scrubbed weights (seed {}, {}): {outcome}",
                sc.seed,
                count(sc.replaced.len(), "tensor")
            );
            outputs(&mut s, "    ", &sc.outputs);
        }
    }
    let _ = writeln!(s, "host {} ({})", r.host.cpu, r.host.isa.join(" "));
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(s, "exit code {}", r.exit_code as i32);
    super::grid::prose(&s)
}

/// Markdown: a support case's first comment.
pub fn markdown(r: &ReproReport) -> String {
    let mut s = format!("### npu-audit repro · {}\n\n", headline(r));
    let _ = writeln!(
        s,
        "Model `{}` (sha256 `{}`); departing means {}.\n",
        r.model, r.model_sha256, r.criterion.text
    );
    if let Some(w) = &r.window {
        let _ = writeln!(
            s,
            "Minimal window: **{}**, {}.\n",
            span(&w.first, &w.last, w.layers.len()),
            count(w.nodes, "node")
        );
        for f in &w.outputs {
            let _ = writeln!(s, "- {}", f.sentence());
        }
        for m in &r.minimality {
            let _ = writeln!(s, "- one layer smaller, {}", candidate(m));
        }
        s.push('\n');
    }
    if let Some(c) = &r.closest {
        let _ = writeln!(s, "Closest: {}\n", candidate(c));
    }
    if let Some(b) = &r.bundle {
        let path = if b.path.is_empty() {
            "(not written)"
        } else {
            b.path.as_str()
        };
        let _ = writeln!(
            s,
            "Bundle `{path}`: model {} bytes of {}; alone it {}.\n",
            b.model_bytes,
            b.source_model_bytes,
            if b.reproduces {
                "reproduces"
            } else {
                "does not reproduce"
            }
        );
    }
    let _ = writeln!(s, "{}; host {} ({}).", tried(r), r.host.cpu, r.host.isa.join(" "));
    for n in &r.notes {
        let _ = writeln!(s, "\n> {n}");
    }
    s
}
