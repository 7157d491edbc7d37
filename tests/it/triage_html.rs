//! The triage page in a browser: the real binary triages the committed fleet
//! (`fixtures/device_reports/fleet/`, see `tests/it/triage_outputs.rs`) with `--out` and `--html`,
//! and headless Chromium opens the page. The page's script writes where it drew each mark,
//! tick and row (`data-x`, `data-y`, `data-y0`/`data-y1`) and how many report rows it shows
//! (`data-shown`); the test reads Chromium's DOM dump and checks against the JSON of the same
//! run, computed here independently:
//!
//! - one row per chipset, holding one dot per measured report of that chipset (copies once);
//! - each finite dot where the axis's own tick labels put its SQNR (a linear map read from the
//!   first and last tick as drawn), +inf right of the axis, −inf left of it;
//! - the verdict filter, the text filter and sorting, driven by the address fragment the page
//!   reads (`#verdict=...&q=...&sort=...`, the same code the controls call);
//! - the hostile device's `<script>` and `<img onerror>` in `device.json` never ran.
//!
//! Needs Chromium (`/usr/bin/chromium` or `NPU_AUDIT_CHROMIUM`; `scripts/test` installs it).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use regex::Regex;
use serde_json::Value;

/// Triages the committed fleet from the repository root; returns the JSON, and the page's path.
fn triage(dir: &Path) -> (Value, std::path::PathBuf) {
    let (json, page) = (dir.join("triage.json"), dir.join("triage.html"));
    let mut args: Vec<String> = [
        "triage",
        "fixtures/real/ppocr_cls_qdq_u8.onnx",
        "fixtures/device_reports/fleet",
        "--golden",
        "golden/ppocr_cls_fp32",
        "--no-db",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for c in ["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8450"] {
        args.extend(["-t".to_string(), c.to_string()]);
    }
    let out = bin()
        .current_dir(repo(""))
        .args(&args)
        .arg("--out")
        .arg(&json)
        .arg("--html")
        .arg(&page)
        .output()
        .expect("run npu-audit triage");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&json).expect("--out written");
    (serde_json::from_str(&text).expect("JSON"), page)
}

/// The DOM after the page's script ran, with `fragment` in the address.
fn dom(browser: &Path, page: &Path, fragment: &str) -> String {
    let url = format!("file://{}{fragment}", page.display());
    headless_url(browser, &url, &page.with_extension("dom"), &["--dump-dom".to_string()])
}

/// One attribute of an element's start tag.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    Some(&tag[start..start + tag[start..].find('"')?])
}

fn float(tag: &str, name: &str) -> f64 {
    attr(tag, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {name} in {tag}"))
}

/// SQNR of a report from the JSON: a number, ±inf, or None.
fn sqnr(r: &Value) -> Option<f64> {
    match &r["sqnr_db"] {
        Value::Null => None,
        v => Some(num(v)),
    }
}

/// Chipset -> report indices, for the measured reports that are not copies.
fn expected_rows(t: &Value) -> BTreeMap<String, Vec<usize>> {
    let mut rows: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in t["reports"].as_array().expect("reports").iter().enumerate() {
        if r["duplicate_of"].is_null() && sqnr(r).is_some() {
            let chip = r["identity"]["chipset"].as_str().unwrap_or("unidentified");
            rows.entry(chip.to_string()).or_default().push(i);
        }
    }
    rows
}

/// A dot as drawn: its report, centre, and class.
struct Dot {
    report: usize,
    x: f64,
    y: f64,
    class: String,
}

/// The plot's rows as drawn: chipset -> (band top, band bottom, dots).
fn drawn_rows(svg: &str) -> BTreeMap<String, (f64, f64, Vec<Dot>)> {
    let circle = Regex::new(r"<circle\b[^>]*>").expect("regex");
    let mut rows = BTreeMap::new();
    for part in svg.split("<g class=\"row\"").skip(1) {
        let tag = &part[..part.find('>').expect("row tag")];
        let dots = circle
            .find_iter(part)
            .map(|m| m.as_str())
            .filter(|c| attr(c, "class").is_some_and(|k| k.starts_with("mark")))
            .map(|c| Dot {
                report: float(c, "data-report") as usize,
                x: float(c, "data-x"),
                y: float(c, "data-y"),
                class: attr(c, "class").unwrap_or_default().to_string(),
            })
            .collect();
        let key = attr(tag, "data-chipset").expect("chipset").to_string();
        rows.insert(key, (float(tag, "data-y0"), float(tag, "data-y1"), dots));
    }
    rows
}

/// The axis as drawn: (value read from the tick's label, x of its line).
fn ticks(svg: &str) -> Vec<(f64, f64)> {
    let re =
        Regex::new(r#"<g class="tick"([^>]*)><line[^>]*>(?:</line>)?\s*<text[^>]*>([^<]+)</text>"#).expect("regex");
    re.captures_iter(svg)
        .map(|c| (c[2].trim().parse().expect("tick label"), float(&c[1], "data-x")))
        .collect()
}

fn the_svg(dom: &str) -> &str {
    let start = dom.find("data-plot=\"sqnr-by-chipset\"").expect("the SQNR plot");
    let start = dom[..start].rfind("<svg").expect("svg");
    &dom[start..start + dom[start..].find("</svg>").expect("end of svg")]
}

fn assert_plot_matches(dom: &str, t: &Value) {
    let body = Regex::new(r"<body[^>]*>")
        .expect("regex")
        .find(dom)
        .expect("body")
        .as_str();
    assert_eq!(attr(body, "data-plots-rendered"), Some("1 of 1"), "{body}");
    assert_eq!(attr(body, "data-pwned"), None, "a device's markup ran: {body}");
    let svg = the_svg(dom);
    let open = &svg[..svg.find('>').expect("svg tag")];
    assert_eq!(attr(open, "data-rendered"), Some("ok"));
    let want = expected_rows(t);
    let n: usize = want.values().map(Vec::len).sum();
    assert_eq!(attr(open, "data-marks"), Some(n.to_string().as_str()));
    let rows = drawn_rows(svg);
    let got: BTreeMap<String, Vec<usize>> = rows
        .iter()
        .map(|(k, (_, _, dots))| {
            let mut v: Vec<usize> = dots.iter().map(|d| d.report).collect();
            v.sort_unstable();
            (k.clone(), v)
        })
        .collect();
    assert_eq!(got, want, "reports per chipset row (drawn, left; JSON, right)");
    let axis = ticks(svg);
    assert!(axis.len() >= 2, "ticks: {axis:?}");
    let ((v0, x0), (v1, x1)) = (axis[0], axis[axis.len() - 1]);
    let reports = t["reports"].as_array().expect("reports");
    let outliers: Vec<&str> = t["fleet"]["outliers"]
        .as_array()
        .expect("outliers")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut seen = [false; 3];
    for (key, (y0, y1, dots)) in &rows {
        for d in dots {
            assert!(
                *y0 <= d.y && d.y <= *y1,
                "{key}: report {} at y {} outside its row {y0}..{y1}",
                d.report,
                d.y
            );
            let r = &reports[d.report];
            let v = sqnr(r).expect("a drawn report has a figure");
            if v.is_finite() {
                let want_x = x0 + (v - v0) / (v1 - v0) * (x1 - x0);
                assert!(
                    (d.x - want_x).abs() < 0.6,
                    "report {} ({v} dB) at x {} instead of {want_x:.2}",
                    d.report,
                    d.x
                );
                seen[0] = true;
            } else if v > 0.0 {
                assert!(
                    d.x > x1 + 10.0,
                    "+inf report {} at x {} not right of the axis ({x1})",
                    d.report,
                    d.x
                );
                seen[1] = true;
            } else {
                assert!(
                    d.x < x0 - 10.0,
                    "-inf report {} at x {} not left of the axis ({x0})",
                    d.report,
                    d.x
                );
                seen[2] = true;
            }
            let path = r["path"].as_str().expect("path");
            assert_eq!(
                d.class.contains("outlier"),
                outliers.contains(&path),
                "{path}: {}",
                d.class
            );
        }
    }
    assert_eq!(seen, [true; 3], "the fleet has finite, +inf and -inf figures");
}

/// The report rows of the list as drawn: (report index, verdict, hidden).
fn list_rows(dom: &str) -> Vec<(usize, String, bool)> {
    let table = &dom[dom.find("id=\"reports\"").expect("report list")..];
    let body = &table[table.find("<tbody").expect("tbody")..table.find("</tbody>").expect("end")];
    Regex::new(r"<tr\b[^>]*>")
        .expect("regex")
        .find_iter(body)
        .map(|m| m.as_str())
        .map(|tr| {
            (
                float(tr, "data-report") as usize,
                attr(tr, "data-verdict").expect("verdict").to_string(),
                tr.contains(" hidden"),
            )
        })
        .collect()
}

fn shown_attr(dom: &str) -> usize {
    let tag = Regex::new(r#"<table[^>]*id="reports"[^>]*>"#)
        .expect("regex")
        .find(dom)
        .expect("table")
        .as_str();
    float(tag, "data-shown") as usize
}

#[test]
fn the_triage_page_draws_the_fleet_filters_sorts_and_runs_no_device_markup() {
    let dir = tempdir();
    let (t, page) = triage(dir.path());
    let reports = t["reports"].as_array().expect("reports");
    let browser = chromium();

    // As opened: every report listed, the plot where the JSON puts each report.
    let plain = dom(&browser, &page, "");
    assert_plot_matches(&plain, &t);
    assert_eq!(list_rows(&plain).len(), reports.len());
    assert_eq!(shown_attr(&plain), reports.len());
    let title = Regex::new(r"<title>([^<]*)</title>").expect("regex");
    assert!(title.captures(&plain).expect("title")[1].starts_with("npu-audit triage: "));
    assert!(
        plain.contains("&lt;script&gt;document.body.setAttribute"),
        "the device model shown as text"
    );

    // The verdict filter: only that verdict's rows shown, the other dots dimmed.
    for verdict in ["unexplained", "reproduced"] {
        let filtered = dom(&browser, &page, &format!("#verdict={verdict}"));
        let want = reports.iter().filter(|r| r["verdict"]["kind"] == verdict).count();
        let rows = list_rows(&filtered);
        assert!(
            rows.iter().all(|(_, v, hidden)| *hidden == (v != verdict)),
            "{verdict}: {rows:?}"
        );
        assert_eq!(shown_attr(&filtered), want);
        let svg = the_svg(&filtered);
        for (_, (_, _, dots)) in drawn_rows(svg) {
            for d in dots {
                let kind = reports[d.report]["verdict"]["kind"].as_str().expect("kind");
                assert_eq!(
                    d.class.contains("dim"),
                    kind != verdict,
                    "report {}: {}",
                    d.report,
                    d.class
                );
            }
        }
    }
    // Verdict and text together.
    let both = dom(&browser, &page, "#verdict=reproduced&q=S22");
    let want: Vec<usize> = reports
        .iter()
        .enumerate()
        .filter(|(_, r)| r["verdict"]["kind"] == "reproduced" && r["device"]["device_model"] == "Galaxy S22")
        .map(|(i, _)| i)
        .collect();
    let shown: Vec<usize> = list_rows(&both).into_iter().filter(|r| !r.2).map(|r| r.0).collect();
    assert_eq!(shown, want);

    // Sorting by SQNR, highest first; reports without a figure last.
    let sorted = dom(&browser, &page, "#sort=sqnr:desc");
    let order: Vec<usize> = list_rows(&sorted).into_iter().map(|r| r.0).collect();
    let figure = |i: &usize| sqnr(&reports[*i]).filter(|v| !v.is_nan());
    for w in order.windows(2) {
        match (figure(&w[0]), figure(&w[1])) {
            (Some(a), Some(b)) => assert!(a >= b, "{order:?}: {a} before {b}"),
            (None, Some(_)) => panic!("{order:?}: a report without a figure before one with"),
            _ => {}
        }
    }
    assert_eq!(order.len(), reports.len());

    // Nothing a device said ran, whatever the view.
    for d in [&plain, &both, &sorted] {
        assert!(!d.contains("data-pwned=\""), "a device's markup ran");
        assert!(!d.contains("<img"), "a device's <img> became an element");
    }
}
