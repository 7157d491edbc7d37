//! The HTML report end to end: the real binary writes it (`compare --html`, and `render --html`
//! from the saved JSON report), and headless Chromium opens it. The page's own script measures
//! every plot and writes the result into the DOM (`data-rendered`, `data-marks` on each
//! `<svg data-plot>`, `data-plots-rendered` on `<body>`); the test reads Chromium's DOM dump and
//! compares the counts with what the JSON report implies, and checks a screenshot is not blank.
//!
//! Needs Chromium: `/usr/bin/chromium` (Debian: `apt-get install chromium`) or the binary named
//! by `NPU_AUDIT_CHROMIUM`; `scripts/test` installs Debian's package when neither is there.
//! Without it the test fails.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use regex::Regex;
use serde_json::Value;

/// Runs `compare` with `args`, writing `dir/report.json` and `dir/report.html`; returns the JSON
/// report (asserting the exit code it records is the process's).
fn audit(dir: &Path, args: &[&str]) -> Value {
    let json = dir.join("report.json");
    let html = dir.join("report.html");
    let mut cmd = bin();
    cmd.arg("compare")
        .args(args)
        .arg("--no-config")
        .arg("--out")
        .arg(&json)
        .arg("--html")
        .arg(&html);
    let out = cmd.output().expect("run npu-audit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap_or_else(|e| panic!("no report ({e}): {stderr}")))
            .expect("report is JSON");
    assert_eq!(
        out.status.code().map(i64::from),
        report["exit_code"].as_i64(),
        "{stderr}"
    );
    report
}

/// `render REPORT.json --html FILE`: the saved report rendered again must give the same page.
fn assert_render_matches(dir: &Path) {
    let again = dir.join("again.html");
    let out = run(&[
        "render",
        &dir.join("report.json").display().to_string(),
        "--html",
        &again.display().to_string(),
    ]);
    assert!(
        again.exists(),
        "render wrote no HTML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = std::fs::read_to_string(dir.join("report.html")).expect("compare's HTML");
    let second = std::fs::read_to_string(&again).expect("render's HTML");
    assert!(
        first == second,
        "render --html of the saved report differs from compare --html"
    );
}

/// The marks each plot must show, from the JSON report alone: a point per layer with a SQNR
/// (a number or ±inf), two cells per agreement entry (the matrix is symmetric), a bar per
/// placement partition.
fn expected_marks(report: &Value) -> BTreeMap<String, usize> {
    let mut want = BTreeMap::new();
    let targets = report["targets"].as_array().expect("targets");
    let points = targets
        .iter()
        .flat_map(|t| t["layers"].as_array().into_iter().flatten())
        .filter(|l| match &l["sqnr_db"] {
            Value::Number(_) => true,
            Value::String(s) => s == "inf" || s == "-inf",
            _ => false,
        })
        .count();
    if targets
        .iter()
        .any(|t| t["layers"].as_array().is_some_and(|l| !l.is_empty()))
    {
        want.insert("layers".to_string(), points);
    }
    for e in report["agreement"].as_array().expect("agreement") {
        let output = e["output"].as_str().expect("output");
        *want.entry(format!("agreement:{output}")).or_insert(0) += 2;
    }
    let bars: usize = targets
        .iter()
        .filter_map(|t| t["placement"]["partitions"].as_array())
        .map(Vec::len)
        .sum();
    if bars > 0 {
        want.insert("placement".to_string(), bars);
    }
    want
}

/// One attribute of an element's start tag.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// Opens the page, reads what its script measured, and compares it with the report.
fn assert_plots_rendered(browser: &Path, page: &Path, report: &Value) {
    let dom = headless(browser, page, &["--dump-dom".to_string()]);
    let body = Regex::new(r"<body[^>]*>").expect("regex");
    let body = body
        .find(&dom)
        .unwrap_or_else(|| panic!("no <body> in the DOM dump:\n{dom}"))
        .as_str();
    let want = expected_marks(report);
    let n = want.len();
    assert_eq!(
        attr(body, "data-plots-rendered"),
        Some(format!("{n} of {n}").as_str()),
        "{body}"
    );
    let svg = Regex::new(r"<svg\b[^>]*>").expect("regex");
    let mut got = BTreeMap::new();
    for tag in svg.find_iter(&dom).map(|m| m.as_str()) {
        let Some(plot) = attr(tag, "data-plot") else { continue };
        let plot = plot
            .replace("&amp;", "&")
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
        assert_eq!(attr(tag, "data-rendered"), Some("ok"), "{plot}: {tag}");
        let marks: usize = attr(tag, "data-marks")
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("{plot}: no mark count: {tag}"));
        got.insert(plot, marks);
    }
    assert_eq!(got, want, "marks drawn per plot (left) against the report (right)");
}

/// Pixel statistics of a PNG, decoded with Python's standard library (zlib): the fraction of
/// pixels that are not near-white, the number of distinct colours, and the pixels near `rgb`.
fn png_stats(png: &Path, rgb: [u8; 3]) -> Value {
    const SCRIPT: &str = r#"
import json, struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
pos, idat, w, h, ctype = 8, b'', 0, 0, 0
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    chunk = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR':
        w, h, depth, ctype = struct.unpack('>IIBB', chunk[:10])
        assert depth == 8 and ctype in (2, 6), (depth, ctype)
    elif kind == b'IDAT':
        idat += chunk
    pos += 12 + n
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, rows, i = bytearray(stride), [], 0
for _ in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b = prev[x]
        c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line))
    prev = line
target = [int(v) for v in sys.argv[2:5]]
nonwhite, near, colours = 0, 0, set()
for line in rows:
    for x in range(0, stride, bpp):
        r, g, b = line[x], line[x + 1], line[x + 2]
        if r < 235 or g < 235 or b < 235: nonwhite += 1
        if abs(r - target[0]) + abs(g - target[1]) + abs(b - target[2]) < 30: near += 1
        colours.add((r >> 3, g >> 3, b >> 3))
print(json.dumps({'width': w, 'height': h, 'nonwhite': nonwhite / (w * h), 'colours': len(colours), 'near': near}))
"#;
    let python = std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(png)
        .args(rgb.iter().map(|v| v.to_string()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stats are JSON")
}

/// Takes a 1400x3000 screenshot and checks it shows a page: plenty of drawn pixels, many
/// colours, and the verdict banner in its colour.
fn assert_screenshot_not_blank(browser: &Path, page: &Path, banner: [u8; 3]) {
    let png = page.with_extension("png");
    headless(
        browser,
        page,
        &[
            "--window-size=1400,3000".to_string(),
            format!("--screenshot={}", png.display()),
        ],
    );
    let stats = png_stats(&png, banner);
    assert_eq!(
        (stats["width"].as_u64(), stats["height"].as_u64()),
        (Some(1400), Some(3000)),
        "{stats}"
    );
    assert!(
        stats["nonwhite"].as_f64().unwrap_or(0.0) > 0.03,
        "screenshot nearly blank: {stats}"
    );
    assert!(
        stats["colours"].as_u64().unwrap_or(0) > 50,
        "screenshot has too few colours: {stats}"
    );
    assert!(
        stats["near"].as_u64().unwrap_or(0) > 10_000,
        "no verdict banner in the screenshot: {stats}"
    );
}

/// Static checks on the page against the JSON report.
fn assert_page_matches(page: &Path, report: &Value) {
    let html = std::fs::read_to_string(page).expect("HTML report");
    for needle in ["http:", "https:", "<script src", "<link", "@import"] {
        assert!(
            !html.contains(needle),
            "the page loads something from elsewhere: {needle:?}"
        );
    }
    let targets = report["targets"].as_array().expect("targets");
    let curves = targets
        .iter()
        .filter(|t| t["layers"].as_array().is_some_and(|l| !l.is_empty()))
        .count();
    assert_eq!(
        html.matches("<polyline").count(),
        curves,
        "one curve per target with layers"
    );
    for t in targets.iter().filter(|t| t["status"] != "ok") {
        let error = t["error"].as_str().unwrap_or_default();
        let first = error.lines().next().unwrap_or_default();
        let escaped = first
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#39;");
        assert!(html.contains(&escaped), "error of {} missing: {first}", t["id"]);
    }
    // A heatmap cell: the fraction of bit-identical elements, from the JSON alone.
    if let Some(e) = report["agreement"].as_array().and_then(|a| a.first()) {
        let (d, n) = (e["differing_elements"].as_u64(), e["elements"].as_u64().unwrap_or(0));
        let want = match d {
            Some(0) => "100%".to_string(),
            Some(d) if n > 0 => format!("{:.1}%", 100.0 * (n - d) as f64 / n as f64),
            _ => "n/a".to_string(),
        };
        let cell = format!(
            "class=\"cell-text\" data-a=\"{}\" data-b=\"{}\" data-output=\"{}\"",
            e["a"].as_str().unwrap_or_default(),
            e["b"].as_str().unwrap_or_default(),
            e["output"].as_str().unwrap_or_default()
        );
        let at = html.find(&cell).unwrap_or_else(|| panic!("no cell {cell}"));
        let text = &html[at..];
        let text = &text[text.find('>').expect("cell text") + 1..];
        assert_eq!(&text[..text.find('<').expect("cell end")], want);
    }
    let verdict = report["gate"]["verdict"].as_str().expect("verdict");
    assert!(html.contains(&format!("data-verdict=\"{verdict}\"")));
    assert!(html.contains(&format!("exit code {}", report["exit_code"])));
}

#[test]
fn cnn_report_with_layers_renders_in_chromium() {
    let dir = tempdir();
    let report = audit(
        dir.path(),
        &[
            &cnn(),
            "--reference",
            &cnn_fp32(),
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
            "-t",
            "qnn:sm8850",
            "-t",
            crate::common::REFUSED_TARGET,
            "--allow-failure",
            crate::common::REFUSED_PATTERN,
            "--layers",
            "all",
            "--min-sqnr",
            "20",
        ],
    );
    assert_eq!(report["gate"]["verdict"], "pass");
    assert_ne!(target(&report, crate::common::REFUSED_TARGET)["status"], "ok");
    let page = dir.path().join("report.html");
    assert_page_matches(&page, &report);
    assert_render_matches(dir.path());
    let browser = chromium();
    assert_plots_rendered(&browser, &page, &report);
    assert_screenshot_not_blank(&browser, &page, [0x1a, 0x7f, 0x37]);
}

#[test]
fn fallback_report_without_layers_renders_in_chromium() {
    let dir = tempdir();
    let model = repo("fixtures/models/fallback_qdq_u8.onnx").display().to_string();
    let report = audit(
        dir.path(),
        &[&model, "-t", "cpu", "-t", "qnn:sm8650", "--max-fallback-nodes", "0"],
    );
    assert_eq!(report["gate"]["verdict"], "fail");
    assert!(target(&report, "qnn:sm8650")["placement"]["compute_fallback_nodes"].as_u64() > Some(0));
    let page = dir.path().join("report.html");
    assert_page_matches(&page, &report);
    let html = std::fs::read_to_string(&page).expect("HTML report");
    assert!(
        html.contains("id=\"no-layers\""),
        "a report without layers says how to get them"
    );
    assert!(
        html.contains("class=\"mark fallback compute\""),
        "the Celu partition is a compute fallback"
    );
    assert_render_matches(dir.path());
    let browser = chromium();
    assert_plots_rendered(&browser, &page, &report);
    assert_screenshot_not_blank(&browser, &page, [0xc6, 0x28, 0x28]);
}
