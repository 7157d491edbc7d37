//! Writing a report in every format asked for. The paths are checked before the audit runs, so a
//! typo does not cost a whole audit; everything is then rendered in memory and staged with the
//! run's other outputs, which are committed together (see `userfile::Outputs`).

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{explorer, html, junit, markdown};
use crate::execution::exec::executor::sanitize;
use crate::foundation::error::bad_output;
use crate::foundation::userfile::{is_stdio, Outputs};
use crate::report::compare::Report;

/// The report files one command writes (`--out`, `--markdown`, `--junit`, `--html`,
/// `--node-data`).
#[derive(Debug, Clone, Default)]
pub struct OutputPaths {
    pub json: Option<PathBuf>,
    pub markdown: Option<PathBuf>,
    pub junit: Option<PathBuf>,
    pub html: Option<PathBuf>,
    /// A directory: one Model Explorer node-data file per target with per-layer figures.
    pub node_data: Option<PathBuf>,
}

impl OutputPaths {
    /// The flag a rendered file comes from (node data files are inside `--node-data`).
    fn flag_of(&self, path: &Path) -> &'static str {
        self.files()
            .into_iter()
            .find(|(_, p)| *p == path)
            .map_or("--node-data", |(f, _)| f)
    }

    fn files(&self) -> Vec<(&'static str, &Path)> {
        [
            ("--out", &self.json),
            ("--markdown", &self.markdown),
            ("--junit", &self.junit),
            ("--html", &self.html),
        ]
        .into_iter()
        .filter_map(|(flag, p)| p.as_deref().map(|p| (flag, p)))
        .collect()
    }

    /// Checks every path can be written, that no two flags name the same file, and that at most
    /// one is standard output (`-`).
    pub fn check(&self, outputs: &Outputs) -> Result<()> {
        let files = self.files();
        let stdout: Vec<&str> = files.iter().filter(|(_, p)| is_stdio(p)).map(|(f, _)| *f).collect();
        if stdout.len() > 1 {
            return Err(bad_output(format!(
                "{} all name standard output (-): only one can",
                stdout.join(", ")
            )));
        }
        if self.node_data.as_deref().is_some_and(is_stdio) {
            return Err(bad_output(
                "--node-data names a directory; it cannot be standard output",
            ));
        }
        for (i, (flag, path)) in files.iter().enumerate() {
            outputs.check(flag, path)?;
            if let Some((other, _)) = files[..i].iter().find(|(_, p)| p == path && !is_stdio(p)) {
                return Err(bad_output(format!(
                    "{other} and {flag} name the same file {}",
                    path.display()
                )));
            }
        }
        if let Some(dir) = &self.node_data {
            outputs.check_dir("--node-data", dir)?;
            if let Some((flag, _)) = files.iter().find(|(_, p)| p == dir) {
                return Err(bad_output(format!(
                    "{flag} and --node-data name the same path {}",
                    dir.display()
                )));
            }
        }
        Ok(())
    }

    /// Renders every requested format and stages each file in `outputs`. Returns the text of
    /// the one named `-`, for standard output.
    pub fn stage(&self, report: &Report, json_text: &str, outputs: &mut Outputs) -> Result<Option<String>> {
        let mut rendered: Vec<(PathBuf, String)> = Vec::new();
        if let Some(p) = &self.json {
            rendered.push((p.clone(), json_text.to_string()));
        }
        if let Some(p) = &self.markdown {
            rendered.push((p.clone(), markdown::render(report)));
        }
        if let Some(p) = &self.junit {
            rendered.push((p.clone(), junit::render(report)));
        }
        if let Some(p) = &self.html {
            rendered.push((p.clone(), html::render(report)));
        }
        if let Some(dir) = &self.node_data {
            // Per target: cumulative SQNR, and what each layer introduces run alone; over all
            // targets: the worst per node.
            for t in &report.targets {
                let name = sanitize(&t.id);
                if let Some(text) = explorer::render_target(report, &t.id) {
                    rendered.push((dir.join(format!("{name}.json")), text));
                }
                if let Some(text) = explorer::render_target_introduced(report, &t.id) {
                    rendered.push((dir.join(format!("{name}.introduced.json")), text));
                }
            }
            if report.targets.iter().any(|t| !t.layers.is_empty()) {
                rendered.push((dir.join("worst.json"), explorer::render(report)));
            }
            outputs.dir("--node-data", dir)?;
        }
        let mut stdout = None;
        for (path, text) in rendered {
            if is_stdio(&path) {
                stdout = Some(text);
            } else {
                outputs.file(self.flag_of(&path), &path, text.as_bytes())?;
            }
        }
        Ok(stdout)
    }
}
