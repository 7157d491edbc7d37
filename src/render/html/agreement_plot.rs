//! The agreement heat map of one output: targets by targets, the fraction of elements that are
//! bit-identical (`1 − differing_elements / elements`), hatched when two outputs cannot be
//! compared; symmetric, the diagonal is not a mark.

use std::fmt::Write as _;

use super::plot::{hatch_pattern, svg_open};
use crate::render::present::{escape_markup, num, shorten};
use crate::report::compare::{AgreementEntry, Report};

/// The agreement fraction of an entry, `None` when the outputs cannot be compared.
fn agreement_fraction(e: &AgreementEntry) -> Option<f64> {
    let d = e.differing_elements?;
    if e.elements == 0 {
        return None;
    }
    Some(1.0 - d as f64 / e.elements as f64)
}

/// The cell text of an agreement fraction: a percentage with one decimal, `100%` only when
/// every element agrees.
fn agreement_text(e: &AgreementEntry) -> String {
    match (agreement_fraction(e), e.differing_elements) {
        (Some(_), Some(0)) => "100%".into(),
        (Some(f), _) => {
            let text = format!("{:.1}%", f * 100.0);
            if text == "100.0%" {
                ">99.9%".into()
            } else {
                text
            }
        }
        _ => "n/a".into(),
    }
}

/// Red (0) through yellow (0.5) to green (1).
fn agreement_colour(f: f64) -> String {
    const STOPS: [(f64, [f64; 3]); 3] = [
        (0.0, [215.0, 48.0, 39.0]),
        (0.5, [254.0, 224.0, 139.0]),
        (1.0, [26.0, 152.0, 80.0]),
    ];
    let f = f.clamp(0.0, 1.0);
    let (a, b) = if f <= 0.5 {
        (STOPS[0], STOPS[1])
    } else {
        (STOPS[1], STOPS[2])
    };
    let t = (f - a.0) / (b.0 - a.0);
    let c: Vec<u8> = (0..3).map(|i| (a.1[i] + (b.1[i] - a.1[i]) * t).round() as u8).collect();
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

fn text_colour_on(f: f64) -> &'static str {
    if !(0.12..=0.85).contains(&f) {
        "#ffffff"
    } else {
        "#1f2328"
    }
}

/// The heatmap of one output: targets by targets, symmetric.
pub(super) fn agreement_plot(report: &Report, output: &str, k: usize) -> String {
    let entries: Vec<&AgreementEntry> = report.agreement.iter().filter(|e| e.output == output).collect();
    let ids: Vec<&str> = report
        .targets
        .iter()
        .map(|t| t.id.as_str())
        .filter(|id| entries.iter().any(|e| e.a == *id || e.b == *id))
        .collect();
    let find = |a: &str, b: &str| {
        entries
            .iter()
            .find(|e| (e.a == a && e.b == b) || (e.a == b && e.b == a))
            .copied()
    };
    let label_chars = ids.iter().map(|id| id.chars().count().min(28)).max().unwrap_or(4) as f64;
    let (cw, ch) = (92.0, 34.0);
    let left = 16.0 + label_chars * 7.2;
    let top = 20.0 + label_chars * 5.2;
    let n = ids.len() as f64;
    let width = (left + n * cw + 40.0).max(left + 440.0);
    let height = top + n * ch + 74.0;
    let pid = format!("agr{k}");
    let mut s = String::new();
    svg_open(
        &mut s,
        &format!("agreement:{output}"),
        width,
        height,
        &format!("bit agreement on {output}"),
    );
    s.push_str("<defs>\n");
    hatch_pattern(&mut s, &format!("{pid}-na"), "#f2f2f2", "#bdbdbd");
    let _ = writeln!(
        s,
        "<linearGradient id=\"{pid}-scale\"><stop offset=\"0\" stop-color=\"{}\"/><stop offset=\"0.5\" stop-color=\"{}\"/>\
         <stop offset=\"1\" stop-color=\"{}\"/></linearGradient>\n</defs>",
        agreement_colour(0.0),
        agreement_colour(0.5),
        agreement_colour(1.0)
    );
    for (i, id) in ids.iter().enumerate() {
        let y = top + i as f64 * ch + ch / 2.0 + 4.0;
        let x = left + i as f64 * cw + cw / 2.0;
        let short = escape_markup(&shorten(id, 28));
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{y:.1}\" text-anchor=\"end\">{short}<title>{}</title></text>\
             <text transform=\"translate({x:.1},{:.1}) rotate(-35)\" text-anchor=\"start\">{short}<title>{}</title></text>",
            left - 8.0,
            escape_markup(id),
            top - 8.0,
            escape_markup(id)
        );
    }
    for (i, a) in ids.iter().enumerate() {
        for (j, b) in ids.iter().enumerate() {
            let (x, y) = (left + j as f64 * cw, top + i as f64 * ch);
            agreement_cell(
                &mut s,
                &pid,
                (x, y, cw, ch),
                a,
                b,
                output,
                if i == j { None } else { Some(find(a, b)) },
            );
        }
    }
    agreement_legend(&mut s, &pid, left, top + n * ch + 22.0);
    s.push_str("</svg>\n");
    s
}

/// One cell: `entry` is `None` on the diagonal, `Some(None)` for a pair the report does not
/// compare.
fn agreement_cell(
    s: &mut String,
    pid: &str,
    (x, y, w, h): (f64, f64, f64, f64),
    a: &str,
    b: &str,
    output: &str,
    entry: Option<Option<&AgreementEntry>>,
) {
    let data = format!(
        "data-a=\"{}\" data-b=\"{}\" data-output=\"{}\"",
        escape_markup(a),
        escape_markup(b),
        escape_markup(output)
    );
    let (cx, cy) = (x + w / 2.0, y + h / 2.0 + 4.0);
    let (class, fill, text, text_fill, title) = match entry {
        None => (
            "diag",
            "#eeeeee".to_string(),
            "—".to_string(),
            "#777777",
            format!("{a}: itself"),
        ),
        Some(None) => (
            "missing",
            "#ffffff".to_string(),
            "?".to_string(),
            "#777777",
            format!("{a} vs {b}: not in the report"),
        ),
        Some(Some(e)) => {
            let text = agreement_text(e);
            let title = agreement_title(e);
            match agreement_fraction(e) {
                Some(f) => ("mark", agreement_colour(f), text, text_colour_on(f), title),
                None => ("mark na", format!("url(#{pid}-na)"), text, "#555555", title),
            }
        }
    };
    let _ = writeln!(
        s,
        "<g class=\"cell\" {data}><rect class=\"{class}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\" stroke=\"#ffffff\" stroke-width=\"2\">\
         <title>{}</title></rect><text class=\"cell-text\" {data} x=\"{cx:.1}\" y=\"{cy:.1}\" text-anchor=\"middle\" fill=\"{text_fill}\" \
         style=\"fill:{text_fill}\" pointer-events=\"none\">{}</text></g>",
        x,
        y,
        w,
        h,
        escape_markup(&title),
        escape_markup(&text)
    );
}

fn agreement_title(e: &AgreementEntry) -> String {
    let mut t = match e.differing_elements {
        Some(d) => format!(
            "{} vs {} on {}: {d} of {} elements differ, max |a−b| {}",
            e.a,
            e.b,
            e.output,
            e.elements,
            num(e.max_abs.0)
        ),
        None => format!(
            "{} vs {} on {}: not comparable (different types or shapes)",
            e.a, e.b, e.output
        ),
    };
    if let Some(c) = &e.code_differences {
        let _ = write!(
            t,
            "; in codes: ±1 {}, ±2 {}, more {}, max {} LSB",
            c.off_by_one, c.off_by_two, c.off_by_more, c.max_steps
        );
    }
    t
}

fn agreement_legend(s: &mut String, pid: &str, x: f64, y: f64) {
    let w = 220.0;
    let _ = writeln!(
        s,
        "<g class=\"legend\"><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"12\" fill=\"url(#{pid}-scale)\" stroke=\"#999\"/>\
         <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"start\">0%</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">50%</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">100% bit-identical</text>\
         <rect x=\"{:.1}\" y=\"{y:.1}\" width=\"24\" height=\"12\" fill=\"url(#{pid}-na)\" stroke=\"#999\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\">not comparable</text></g>",
        y + 28.0,
        x + w / 2.0,
        y + 28.0,
        x + w + 60.0,
        y + 28.0,
        x + w + 80.0,
        x + w + 110.0,
        y + 10.0,
    );
}
