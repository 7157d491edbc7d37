//! The placement strip: each target's partitions along the runtime graph's execution order,
//! coloured by execution provider, fallback partitions hatched (red when a compute op the EP
//! rejected is among them).

use std::fmt::Write as _;

use super::plot::{ep_colour, hatch_pattern, svg_open, Scale};
use crate::render::present::{count, ep_short, escape_markup, shorten};
use crate::report::compare::{Partition, PlacementSummary, TargetReport};

/// What a partition of a target is: nodes on the target's own EP (or any EP of a CPU target),
/// nodes of a non-CPU target that fell back to the CPU, or such nodes that include a compute op
/// the EP rejected (a `compute` entry of `placement.fallback` named at either end of the
/// partition or of one of its op types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartitionKind {
    Own,
    Fallback,
    ComputeFallback,
}

fn partition_kind(t: &TargetReport, p: &PlacementSummary, part: &Partition) -> PartitionKind {
    if t.ep.starts_with("CPU") || part.ep == t.ep {
        return PartitionKind::Own;
    }
    let compute = p
        .fallback
        .iter()
        .filter(|f| f.kind == "compute")
        .any(|f| f.name == part.first_node || f.name == part.last_node || part.op_types.contains_key(&f.op_type));
    if compute {
        PartitionKind::ComputeFallback
    } else {
        PartitionKind::Fallback
    }
}

const PP_WIDTH: f64 = 1180.0;

const PP_LABEL: f64 = 190.0;

const PP_STRIP: f64 = 800.0;

const PP_ROW: f64 = 52.0;

/// The placement strips of the targets that recorded a placement.
pub(super) fn placement_plot(placed: &[(&TargetReport, &PlacementSummary)]) -> String {
    let rows: Vec<&(&TargetReport, &PlacementSummary)> =
        placed.iter().filter(|(_, p)| !p.partitions.is_empty()).collect();
    let height = 20.0 + rows.len() as f64 * PP_ROW + 40.0;
    let mut s = String::new();
    svg_open(&mut s, "placement", PP_WIDTH, height, "node placement per target");
    s.push_str("<defs>\n");
    hatch_pattern(&mut s, "plc-compute", "#f6c9c4", "#c62828");
    hatch_pattern(&mut s, "plc-fallback", "#e4e4e4", "#8a8a8a");
    s.push_str("</defs>\n");
    for (i, (t, p)) in rows.iter().enumerate() {
        placement_row(&mut s, t, p, 14.0 + i as f64 * PP_ROW);
    }
    placement_legend(&mut s, &rows, 20.0 + rows.len() as f64 * PP_ROW);
    s.push_str("</svg>\n");
    s
}

fn placement_row(s: &mut String, t: &TargetReport, p: &PlacementSummary, y: f64) {
    let n = p
        .partitions
        .iter()
        .map(|x| x.last_index + 1)
        .max()
        .unwrap_or(0)
        .max(p.total_nodes)
        .max(1) as f64;
    let x = Scale {
        d0: 0.0,
        d1: n,
        p0: PP_LABEL,
        p1: PP_LABEL + PP_STRIP,
    };
    let _ = writeln!(
        s,
        "<g class=\"strip\" data-target=\"{}\"><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}<title>{}</title></text>",
        escape_markup(&t.id),
        PP_LABEL - 10.0,
        y + 16.0,
        escape_markup(&shorten(&t.id, 24)),
        escape_markup(&t.id)
    );
    for part in &p.partitions {
        partition_bar(s, t, part, partition_kind(t, p, part), &x, y);
    }
    let fallback = match p.compute_fallback_nodes {
        0 if t.ep.starts_with("CPU") => String::new(),
        0 => "no compute op on CPU".to_string(),
        c => count(c, "compute op") + " on CPU",
    };
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#666\" style=\"font-size:11px\">#0</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" style=\"font-size:11px\">#{}</text>\
         <text x=\"{:.1}\" y=\"{:.1}\">{}/{} on {}</text><text x=\"{:.1}\" y=\"{:.1}\" class=\"{}\">{}</text></g>",
        PP_LABEL,
        y + 37.0,
        PP_LABEL + PP_STRIP,
        y + 37.0,
        n as usize - 1,
        PP_LABEL + PP_STRIP + 12.0,
        y + 10.0,
        p.target_ep_nodes,
        p.total_nodes,
        escape_markup(ep_short(&t.ep)),
        PP_LABEL + PP_STRIP + 12.0,
        y + 26.0,
        if p.compute_fallback_nodes > 0 {
            "fallback-count bad"
        } else {
            "fallback-count"
        },
        fallback
    );
}

fn partition_bar(s: &mut String, t: &TargetReport, part: &Partition, kind: PartitionKind, x: &Scale, y: f64) {
    let x0 = x.at(part.first_index as f64);
    let x1 = x.at(part.last_index as f64 + 1.0);
    let w = (x1 - x0).max(2.0);
    let (class, fill, stroke, what) = match kind {
        PartitionKind::Own => ("mark", ep_colour(&part.ep).to_string(), "#ffffff", ""),
        PartitionKind::Fallback => (
            "mark fallback",
            "url(#plc-fallback)".to_string(),
            "#6e6e6e",
            " (fallback)",
        ),
        PartitionKind::ComputeFallback => (
            "mark fallback compute",
            "url(#plc-compute)".to_string(),
            "#c62828",
            " (fallback: compute op)",
        ),
    };
    let ops: Vec<String> = part.op_types.iter().map(|(op, c)| format!("{op}×{c}")).collect();
    let title = format!(
        "{}: #{}–{} on {}{what}: {}, {} .. {}; ops: {}",
        t.id,
        part.first_index,
        part.last_index,
        ep_short(&part.ep),
        count(part.nodes, "node"),
        part.first_node,
        part.last_node,
        ops.join(", ")
    );
    let _ = writeln!(
        s,
        "<rect class=\"{class}\" data-ep=\"{}\" x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"24\" fill=\"{fill}\" \
         stroke=\"{stroke}\" stroke-width=\"{}\"><title>{}</title></rect>",
        escape_markup(&part.ep),
        if kind == PartitionKind::Own { 1.0 } else { 1.5 },
        escape_markup(&title)
    );
    let label = format!("{} {}", ep_short(&part.ep), part.nodes);
    if w > label.chars().count() as f64 * 7.0 + 8.0 {
        let colour = if kind != PartitionKind::Own || part.ep.starts_with("CPU") || part.ep == "unknown" {
            "#1f2328"
        } else {
            "#ffffff"
        };
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{colour}\" style=\"fill:{colour}\" \
             pointer-events=\"none\">{}</text>",
            x0 + w / 2.0,
            y + 16.0,
            escape_markup(&label)
        );
    }
}

fn placement_legend(s: &mut String, rows: &[&(&TargetReport, &PlacementSummary)], y: f64) {
    let mut eps: Vec<&str> = Vec::new();
    let mut kinds: Vec<PartitionKind> = Vec::new();
    for (t, p) in rows {
        for part in &p.partitions {
            let kind = partition_kind(t, p, part);
            if kind == PartitionKind::Own && !eps.contains(&part.ep.as_str()) {
                eps.push(&part.ep);
            }
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    let mut items: Vec<(String, &str, String)> = eps
        .iter()
        .map(|ep| (ep_colour(ep).to_string(), "#999999", ep_short(ep).to_string()))
        .collect();
    if kinds.contains(&PartitionKind::ComputeFallback) {
        items.push(("url(#plc-compute)".into(), "#c62828", "CPU fallback: compute op".into()));
    }
    if kinds.contains(&PartitionKind::Fallback) {
        items.push((
            "url(#plc-fallback)".into(),
            "#6e6e6e",
            "CPU fallback: boundary Q/DQ, shape, inserted".into(),
        ));
    }
    let mut x = PP_LABEL;
    s.push_str("<g class=\"legend\">\n");
    for (fill, stroke, label) in items {
        let _ = writeln!(
            s,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"18\" height=\"12\" fill=\"{fill}\" stroke=\"{stroke}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 24.0,
            y + 11.0,
            escape_markup(&label)
        );
        x += 44.0 + label.chars().count() as f64 * 6.8;
    }
    s.push_str("</g>\n");
}
