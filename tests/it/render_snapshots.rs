//! Every renderer on every committed real report (`fixtures/reports/`, see
//! `tests/it/committed_reports.rs`), through the real binary's `render` command, against reviewed
//! snapshots in `tests/snapshots/`: the terminal (without colour), Markdown, JUnit XML, HTML and
//! Model Explorer node data. A change of wording or layout shows up as a snapshot diff to review
//! (`INSTA_UPDATE=always cargo test --test it render_snapshots::` rewrites them).

use crate::common;

use std::path::Path;

use common::{bin, repo};

const REPORTS: &[&str] = &["cnn", "cnn_layers", "fallback", "transformer", "ladder_bisect"];

fn render(report: &str, extra: &[&str]) -> String {
    let path = repo(&format!("fixtures/reports/{report}.json"));
    assert!(path.is_file(), "{} is missing", path.display());
    let out = bin()
        .current_dir(repo(""))
        .arg("render")
        .arg(&path)
        .args(extra)
        .output()
        .expect("run npu-audit render");
    assert_eq!(
        out.status.code(),
        Some(0),
        "render {report}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every node-data file of a directory, in name order, each under its name.
fn node_data(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("node data dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| format!("=== {n}\n{}", read(&dir.join(n))))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn terminal_and_markdown() {
    for name in REPORTS {
        insta::assert_snapshot!(format!("{name}.table"), render(name, &[]));
        insta::assert_snapshot!(format!("{name}.md"), render(name, &["--format", "markdown"]));
    }
}

#[test]
fn junit_html_and_node_data_files() {
    for name in REPORTS {
        let dir = common::tempdir();
        let (xml, html, nodes) = (
            dir.path().join("r.xml"),
            dir.path().join("r.html"),
            dir.path().join("nodes"),
        );
        let args = [
            "--junit",
            xml.to_str().expect("utf-8"),
            "--html",
            html.to_str().expect("utf-8"),
            "--node-data",
            nodes.to_str().expect("utf-8"),
        ];
        render(name, &args);
        insta::assert_snapshot!(format!("{name}.junit"), read(&xml));
        insta::assert_snapshot!(format!("{name}.html"), read(&html));
        insta::assert_snapshot!(format!("{name}.node-data"), node_data(&nodes));
    }
}
