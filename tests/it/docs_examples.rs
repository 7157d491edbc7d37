//! Every command shown in README.md and docs/**/*.md runs here as written, and the output shown
//! under it is checked against what it prints (the way `trycmd` checks a CLI's documentation).
//!
//! The conventions the documents follow:
//!
//! - Commands are in ```` ```console ```` blocks: a line starting with `$ ` is a command (a line
//!   ending with `\` continues it on the next), every other line up to the next `$ ` is output
//!   the command prints (stdout, then stderr). Shown output is an excerpt: its lines must appear
//!   in the output in that order, consecutive lines consecutively; a line that is only `...`
//!   stands for any number of lines, and `[..]` inside a line for any part of it (paths of the
//!   machine, timings). `[N±T]` stands for a number within T of N: a figure whose last digits
//!   depend on the host (a float path's SQNR above 100 dB, `docs/hosts.md`), which a document may
//!   not show exactly (refused). `sh`/`bash` blocks are refused: a command is shown one way.
//! - Each document runs top to bottom in an empty scratch directory of its own where the
//!   repository's `fixtures`, `golden`, `docs`, `tests` and `scripts` are linked, so a command
//!   can read them and everything it writes lands in the scratch directory (nothing under the
//!   repository may change: checked). `npu-audit` and `cargo run --release --` are the binary
//!   under test. A ```` ```toml ```` block whose first line is `# NAME.toml` is that file: written
//!   into the scratch directory before the commands after it run, or, when NAME is a file of the
//!   repository, checked to hold the same TOML.
//! - `pip install -r FILE` is not run: it makes `python`, `python3` and `pip` of the following
//!   commands those of a virtual environment with exactly FILE, made once under the tool's cache
//!   (as tests/it/capture.rs and tests/it/eval.rs make theirs).
//! - Every ```` ```toml ```` block is read by the tool's own parser for what it is: a pipeline
//!   (`[[stage]]` tables) by the pipeline loader, any other by `npu-audit check-config` (a
//!   policy file) in the scratch directory. Every ```` ```json ```` block must parse, and one that
//!   shows a JSON contract must be read by the tool's type for it (the dispatch table of
//!   `matrix --dispatch`) or validate against its published schema (docs/KIND.schema.json, by
//!   the block's `schema_version` and keys). A block that is a piece of a file, not a whole one,
//!   says so: `<!-- docs-test: fragment: REASON -->`; nothing is left unchecked silently.
//! - An HTML comment right before a block changes what happens to it:
//!   `<!-- docs-test: exit N -->` (every command of the block must end with N instead of 0),
//!   `<!-- docs-test: skip: REASON -->` (not run; the reason is required and printed) or, before
//!   a TOML or JSON block, `<!-- docs-test: fragment: REASON -->`.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use common::*;

/// The documents that show commands, TOML or JSON; `every_document_with_commands_is_run` keeps
/// this list complete.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "docs/capture/README.md",
    "docs/eval.md",
    "docs/generation.md",
    "docs/matrix.md",
    "docs/policy.md",
    "docs/repro.md",
    "docs/scale.md",
    "docs/streams.md",
];

/// What the commands may read, linked into each scratch directory.
const LINKED: &[&str] = &["fixtures", "golden", "docs", "tests", "scripts"];

/// The parts of the repository the commands must leave as they are.
const GUARDED: &[&str] = &["fixtures", "golden", "docs", "scripts", "tests/data"];

/// Info strings of shell blocks that must be written as `console` instead.
const REFUSED_INFO: &[&str] = &["sh", "bash", "shell", "zsh", "shell-session"];

/// One command of a console block and the output shown under it.
#[derive(Debug)]
struct Shown {
    /// 1-based line of the `$ ` in the document.
    line: usize,
    /// The command as written (continuation lines included), without the prompt.
    text: String,
    /// The output lines shown under it.
    output: Vec<String>,
}

/// What the harness does with one fenced block.
#[derive(Debug)]
enum Block {
    /// Commands to run, each expected to exit with `exit`.
    Console { exit: i32, commands: Vec<Shown> },
    /// A block marked `skip`, with its reason.
    Skip { line: usize, reason: String },
    /// A TOML file shown in full (`# NAME` on its first line, or unnamed).
    File {
        line: usize,
        name: Option<String>,
        text: String,
    },
    /// A JSON document shown in full.
    Json { line: usize, text: String },
}

/// A marker comment `<!-- docs-test: ... -->`, or `None` for any other line.
fn marker(line: &str) -> Option<&str> {
    let l = line.trim();
    l.strip_prefix("<!-- docs-test:")
        .and_then(|rest| rest.strip_suffix("-->"))
        .map(str::trim)
}

/// The file a TOML block stands for: its first line `# NAME.toml` (text after `:` or a space is
/// a comment).
fn toml_file_name(first: &str) -> Option<String> {
    let rest = first.trim().strip_prefix("# ")?;
    let name = rest.split([':', ' ']).next()?;
    name.ends_with(".toml").then(|| name.to_string())
}

/// Splits a console block's lines into commands and their shown output.
fn parse_console(doc: &str, first_line: usize, body: &[&str]) -> Result<Vec<Shown>, String> {
    let mut commands: Vec<Shown> = Vec::new();
    let mut continued = false;
    for (k, raw) in body.iter().enumerate() {
        let line = raw.trim_end();
        if continued {
            let c = commands.last_mut().expect("a command is continued");
            c.text.push('\n');
            c.text.push_str(line);
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            commands.push(Shown {
                line: first_line + k,
                text: cmd.to_string(),
                output: Vec::new(),
            });
        } else if let Some(c) = commands.last_mut() {
            let bound = host_bound_figures(line);
            if !bound.is_empty() {
                return Err(format!(
                    "{doc}:{}: {} shown exactly: a figure above {FLOAT_NOISE_DB} dB is float noise whose last \
                     digits depend on the host; show it as [N±T]",
                    first_line + k,
                    bound.join(", ")
                ));
            }
            c.output.push(line.to_string());
        } else {
            return Err(format!("{doc}:{}: output before any `$ ` command", first_line + k));
        }
        continued = line.ends_with('\\');
    }
    for c in &mut commands {
        while c.output.last().is_some_and(|l| l.is_empty()) {
            c.output.pop();
        }
    }
    if commands.is_empty() {
        return Err(format!("{doc}:{first_line}: a console block without a `$ ` command"));
    }
    Ok(commands)
}

/// The block a fence opens, given the marker before it (if any).
fn block(doc: &str, line: usize, info: &str, body: &[&str], mark: Option<&str>) -> Result<Option<Block>, String> {
    if REFUSED_INFO.contains(&info) {
        return Err(format!(
            "{doc}:{line}: a `{info}` block; show commands as `console` with `$ ` prompts"
        ));
    }
    let data = info == "toml" || info == "json";
    if let Some(m) = mark.filter(|m| m.starts_with("fragment")) {
        let reason = m.strip_prefix("fragment:").map(str::trim).unwrap_or("");
        if !data {
            return Err(format!("{doc}:{line}: a fragment marker before a `{info}` block"));
        }
        if reason.is_empty() {
            return Err(format!("{doc}:{line}: a fragment needs a reason (`fragment: REASON`)"));
        }
        return Ok(Some(Block::Skip {
            line,
            reason: format!("fragment: {reason}"),
        }));
    }
    if data && mark.is_some() {
        return Err(format!(
            "{doc}:{line}: only a fragment marker may stand before a `{info}` block"
        ));
    }
    let exit = match mark {
        Some(m) if m.starts_with("skip") => {
            let reason = m.strip_prefix("skip:").map(str::trim).unwrap_or("");
            if reason.is_empty() {
                return Err(format!("{doc}:{line}: a skipped block needs a reason (`skip: REASON`)"));
            }
            return Ok(Some(Block::Skip {
                line,
                reason: reason.to_string(),
            }));
        }
        Some(m) => match m.strip_prefix("exit ").and_then(|n| n.trim().parse::<i32>().ok()) {
            Some(n) => n,
            None => return Err(format!("{doc}:{line}: unknown marker `{m}`")),
        },
        None => 0,
    };
    if mark.is_some() && info != "console" {
        return Err(format!("{doc}:{line}: a docs-test marker before a `{info}` block"));
    }
    match info {
        "console" => {
            let commands = parse_console(doc, line + 1, body)?;
            Ok(Some(Block::Console { exit, commands }))
        }
        "toml" => Ok(Some(Block::File {
            line,
            name: body.first().and_then(|f| toml_file_name(f)),
            text: body.join("\n") + "\n",
        })),
        "json" => Ok(Some(Block::Json {
            line,
            text: body.join("\n") + "\n",
        })),
        _ => Ok(None),
    }
}

/// Every block of a document the harness acts on, in order, or every problem of its markup.
fn parse(doc: &str, text: &str) -> Result<Vec<Block>, Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut blocks, mut errors) = (Vec::new(), Vec::new());
    let mut pending: Option<(usize, &str)> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(info) = line.trim_start().strip_prefix("```") {
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].trim_start().starts_with("```"))
                .unwrap_or(lines.len());
            let mark = pending.take().map(|(_, m)| m);
            match block(doc, i + 1, info.trim(), &lines[i + 1..end], mark) {
                Ok(b) => blocks.extend(b),
                Err(e) => errors.push(e),
            }
            i = end + 1;
            continue;
        }
        if let Some(m) = marker(line) {
            if let Some((at, _)) = pending.replace((i + 1, m)) {
                errors.push(format!("{doc}:{at}: a docs-test marker not followed by a block"));
            }
        } else if !line.trim().is_empty() {
            if let Some((at, _)) = pending.take() {
                errors.push(format!("{doc}:{at}: a docs-test marker not followed by a block"));
            }
        }
        i += 1;
    }
    if errors.is_empty() {
        Ok(blocks)
    } else {
        Err(errors)
    }
}

/// Whether `actual` is the line `pattern` shows, `[..]` standing for any part of it and
/// `[N±T]` for a number within T of N (a figure whose last digits depend on the host).
fn line_matches(pattern: &str, actual: &str) -> bool {
    let (regex, tolerances) = line_pattern(pattern);
    let Some(caps) = regex.captures(actual) else {
        return false;
    };
    tolerances.iter().enumerate().all(|(i, (value, tolerance))| {
        caps.get(i + 1)
            .and_then(|m| m.as_str().parse::<f64>().ok())
            .is_some_and(|x| (x - value).abs() <= *tolerance)
    })
}

/// A shown line as an anchored regular expression, with the value and tolerance of each `[N±T]`
/// (its capture groups, in order).
fn line_pattern(pattern: &str) -> (regex::Regex, Vec<(f64, f64)>) {
    let marker = regex::Regex::new(r"\[\.\.\]|\[(-?[0-9]+(?:\.[0-9]+)?)±([0-9]+(?:\.[0-9]+)?)\]").expect("valid");
    let (mut out, mut tolerances, mut last) = (String::from("^"), Vec::new(), 0);
    for m in marker.captures_iter(pattern) {
        let whole = m.get(0).expect("group 0");
        out.push_str(&regex::escape(&pattern[last..whole.start()]));
        match (m.get(1), m.get(2)) {
            (Some(value), Some(tolerance)) => {
                out.push_str(r"(-?[0-9]+(?:\.[0-9]+)?)");
                let number = |s: &str| s.parse::<f64>().expect("the marker's pattern is a number");
                tolerances.push((number(value.as_str()), number(tolerance.as_str())));
            }
            _ => out.push_str("(?s:.*?)"),
        }
        last = whole.end();
    }
    out.push_str(&regex::escape(&pattern[last..]));
    out.push('$');
    (regex::Regex::new(&out).expect("escaped pattern"), tolerances)
}

/// The shown figures that would tie a document to one host: a dB figure (two decimals, as the
/// tool prints dB) above [`FLOAT_NOISE_DB`] outside a `[N±T]` marker (a float path's SQNR
/// against the golden run, whose last digits depend on the CPU EP's kernels: `docs/hosts.md`),
/// percentages aside.
fn host_bound_figures(line: &str) -> Vec<String> {
    let markers = regex::Regex::new(r"\[[^\]]*±[^\]]*\]").expect("valid");
    let bare = markers.replace_all(line, "");
    let figure = regex::Regex::new(r"(-?[0-9]+\.[0-9]{2})\b(%?)").expect("valid");
    figure
        .captures_iter(&bare)
        .filter(|c| c[2].is_empty() && c[1].parse::<f64>().is_ok_and(|x| x > FLOAT_NOISE_DB))
        .map(|c| c[1].to_string())
        .collect()
}

/// Above this SQNR (dB) a figure is float rounding noise, whose last digits move with the host's
/// instruction set (the bundled CNN's fp32 model with the CPU EP's rewrites: 128.07 dB on an
/// AVX-512 host, 133.39 dB on an AVX2-only one).
const FLOAT_NOISE_DB: f64 = 100.0;

/// Checks that the shown lines appear in `actual` in order (each run of lines between `...`
/// consecutively); the first shown line that does not, with its context, is the error.
fn check_output(shown: &[String], actual: &[String]) -> Result<(), String> {
    let mut cursor = 0;
    for chunk in shown.split(|l| l.trim() == "...") {
        if chunk.is_empty() {
            continue;
        }
        let fits = |start: usize| {
            start + chunk.len() <= actual.len() && chunk.iter().zip(&actual[start..]).all(|(p, a)| line_matches(p, a))
        };
        match (cursor..actual.len()).find(|&s| fits(s)) {
            Some(start) => cursor = start + chunk.len(),
            None => {
                let matched = |s: usize| {
                    chunk
                        .iter()
                        .zip(&actual[s..])
                        .take_while(|(p, a)| line_matches(p, a))
                        .count()
                };
                let best = (cursor..actual.len()).map(matched).max().unwrap_or(0);
                return Err(format!(
                    "shown output not printed (looked from line {} of the output on); first line not found in \
                     place:\n    {}",
                    cursor + 1,
                    chunk[best.min(chunk.len() - 1)]
                ));
            }
        }
    }
    Ok(())
}

/// The virtual environment `pip install -r FILE` stands for (see the module's documentation):
/// its `bin` directory.
fn pip_environment(command: &str) -> Option<PathBuf> {
    let words: Vec<&str> = command.split('#').next()?.split_whitespace().collect();
    let file = match words.as_slice() {
        ["pip" | "pip3", "install", "-r", file] => *file,
        ["python" | "python3", "-m", "pip", "install", "-r", file] => *file,
        _ => return None,
    };
    let path = Path::new(file);
    let stem = path
        .file_stem()?
        .to_str()?
        .trim_end_matches("requirements")
        .trim_end_matches('-');
    let name = if stem.is_empty() {
        path.parent()?.file_name()?.to_str()?
    } else {
        stem
    };
    let python = venv_python(file, name);
    Some(python.parent()?.to_path_buf())
}

/// Size and modification time of every file under the guarded parts of the repository.
fn snapshot() -> BTreeMap<PathBuf, (u64, SystemTime)> {
    fn walk(dir: &Path, into: &mut BTreeMap<PathBuf, (u64, SystemTime)>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                if e.file_name() != "__pycache__" {
                    walk(&path, into);
                }
            } else {
                into.insert(path, (meta.len(), meta.modified().expect("mtime")));
            }
        }
    }
    let mut files = BTreeMap::new();
    for d in GUARDED {
        walk(&repo(d), &mut files);
    }
    files
}

/// Where one document's commands run: the scratch directory, the binary's directory for
/// `PATH`, and a data directory for the user's stores.
struct Scratch {
    dir: tempfile::TempDir,
    tools: tempfile::TempDir,
    data: tempfile::TempDir,
    /// The `bin` directory of the environment a `pip install -r` line chose.
    python: Option<PathBuf>,
}

impl Scratch {
    fn new() -> Scratch {
        let (dir, tools, data) = (tempdir(), tempdir(), tempdir());
        for d in LINKED {
            std::os::unix::fs::symlink(repo(d), dir.path().join(d)).expect("link into the scratch directory");
        }
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_npu-audit"), tools.path().join("npu-audit"))
            .expect("link the binary");
        Scratch {
            dir,
            tools,
            data,
            python: None,
        }
    }

    /// Runs one command as written with `bash`; its exit code and output lines.
    fn run(&self, text: &str) -> (i32, Vec<String>) {
        let text = text.replace("cargo run --release --", "npu-audit");
        let mut path: Vec<PathBuf> = vec![self.tools.path().to_path_buf()];
        path.extend(self.python.clone());
        path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
        let out = std::process::Command::new("bash")
            .args(["-c", &text])
            .current_dir(self.dir.path())
            .env("PATH", std::env::join_paths(path).expect("PATH"))
            .env("NO_COLOR", "1")
            .env("XDG_DATA_HOME", self.data.path())
            // Progress lines at a steady interval would land between the lines a document shows.
            .env("NPU_AUDIT_PROGRESS_SECS", "0")
            .env_remove("NPU_AUDIT_FAULT_INJECT")
            .env_remove("NPU_AUDIT_CONFIG")
            .env_remove("NPU_AUDIT_DATA")
            .output()
            .expect("run bash");
        let mut lines: Vec<String> = Vec::new();
        for stream in [&out.stdout, &out.stderr] {
            lines.extend(
                String::from_utf8_lossy(stream)
                    .lines()
                    .map(|l| l.trim_end().to_string()),
            );
        }
        (out.status.code().unwrap_or(-1), lines)
    }

    /// A TOML block: written into the scratch directory (a named one stays for the commands
    /// after it), or compared with the repository's file; then read by the tool's parser.
    fn file(&self, doc: &str, line: usize, name: Option<&str>, text: &str) -> Result<(), String> {
        let shown_name = name.map_or_else(|| format!("{doc}:{line}"), str::to_string);
        let parse = |t: &str| {
            t.parse::<toml::Table>()
                .map_err(|e| format!("{doc}:{line}: {shown_name}: {e}"))
        };
        let shown = parse(text)?;
        let committed = name.map(repo).filter(|p| p.is_file());
        let path = match (&committed, name) {
            (Some(committed), Some(name)) => {
                let theirs = parse(&std::fs::read_to_string(committed).map_err(|e| e.to_string())?)?;
                if theirs != shown {
                    return Err(format!("{doc}:{line}: the block is not the TOML of {name}"));
                }
                committed.clone()
            }
            (_, Some(name)) => {
                let path = self.dir.path().join(name);
                std::fs::write(&path, text).map_err(|e| format!("{doc}:{line}: {name}: {e}"))?;
                path
            }
            (_, None) => {
                let path = self.dir.path().join(format!(".docs-block-{line}.toml"));
                std::fs::write(&path, text).map_err(|e| format!("{doc}:{line}: {e}"))?;
                path
            }
        };
        let checked = check_toml(self, &path, shown.contains_key("stage"));
        if name.is_none() {
            let _ = std::fs::remove_file(&path);
        }
        checked.map_err(|e| format!("{doc}:{line}: {shown_name} is not read by the tool: {e}"))
    }
}

/// Reads a TOML file with the tool's parser for it: a pipeline's loader, a generation spec's
/// (its `[generation]` table: the keys and parts, not the files it names), else `check-config`.
fn check_toml(scratch: &Scratch, path: &Path, pipeline: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    if text.parse::<toml::Table>().is_ok_and(|t| t.contains_key("generation")) {
        return npu_audit::commands::generation::spec::check_text(&text);
    }
    if pipeline {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        let base = path.parent().unwrap_or(Path::new("."));
        return npu_audit::commands::pipeline::file::parse(&text, base)
            .map(|_| ())
            .map_err(|e| format!("{e:#}"));
    }
    let (code, printed) = scratch.run(&format!("npu-audit check-config '{}'", path.display()));
    if code != 0 {
        return Err(printed.join("\n"));
    }
    Ok(())
}

/// The JSON contracts a document may show, by the keys that tell them apart: the schema each
/// validates against.
const JSON_CONTRACTS: &[(&str, &[&str])] = &[
    ("docs/report.schema.json", &["schema_version", "targets", "verdict"]),
    ("docs/triage.schema.json", &["schema_version", "reports", "fleet"]),
    (
        "docs/matrix.schema.json",
        &["schema_version", "cells", "recommendations"],
    ),
    ("docs/pipeline.schema.json", &["schema_version", "stages"]),
    ("docs/eval.schema.json", &["schema_version", "statistics"]),
    ("docs/repro.schema.json", &["schema_version", "window"]),
];

/// A JSON block: it parses, and it is read as the contract it shows.
fn check_json(doc: &str, line: usize, text: &str) -> Result<(), String> {
    let at = |e: String| format!("{doc}:{line}: {e}");
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| at(format!("not JSON: {e}")))?;
    let has = |keys: &[&str]| keys.iter().all(|k| value.get(k).is_some());
    if has(&["entries", "unresolved", "policy"]) {
        return serde_json::from_value::<npu_audit::report::matrix::Dispatch>(value)
            .map(|_| ())
            .map_err(|e| at(format!("not a dispatch table as `matrix --dispatch` writes it: {e}")));
    }
    for (schema, keys) in JSON_CONTRACTS {
        if has(keys) {
            let schema: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(repo(schema)).map_err(|e| at(e.to_string()))?)
                    .map_err(|e| at(e.to_string()))?;
            let validator = jsonschema::validator_for(&schema).map_err(|e| at(e.to_string()))?;
            let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
            return if errors.is_empty() {
                Ok(())
            } else {
                Err(at(format!("does not validate against {schema}: {}", errors.join("; "))))
            };
        }
    }
    Err(at(
        "a JSON block that is no known contract: mark it `<!-- docs-test: fragment: REASON -->`".into(),
    ))
}

/// Runs one command of `doc`; a line for the timing table, or what went wrong.
fn run_command(doc: &str, scratch: &mut Scratch, exit: i32, c: &Shown) -> Result<String, String> {
    let started = Instant::now();
    if let Some(bin) = pip_environment(&c.text) {
        scratch.python = Some(bin);
        return Ok(format!(
            "{doc}:{}  {:6.1} s  environment",
            c.line,
            started.elapsed().as_secs_f64()
        ));
    }
    let (code, actual) = scratch.run(&c.text);
    let took = started.elapsed().as_secs_f64();
    let excerpt = || actual.iter().take(200).cloned().collect::<Vec<_>>().join("\n");
    if code != exit {
        return Err(format!(
            "{doc}:{}: `{}` exited {code}, the document expects {exit}; it printed:\n{}",
            c.line,
            c.text,
            excerpt()
        ));
    }
    check_output(&c.output, &actual)
        .map_err(|e| format!("{doc}:{}: `{}`: {e}\nit printed:\n{}", c.line, c.text, excerpt()))?;
    Ok(format!("{doc}:{}  {took:6.1} s  pass", c.line))
}

/// Runs every block of one document in its own scratch directory; fails with every problem.
fn run_document(doc: &str) {
    let text = std::fs::read_to_string(repo(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let blocks = parse(doc, &text).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let before = snapshot();
    let mut scratch = Scratch::new();
    let (mut table, mut failures) = (Vec::new(), Vec::new());
    for b in &blocks {
        match b {
            Block::Skip { line, reason } => table.push(format!("{doc}:{line}  skipped: {reason}")),
            Block::File { line, name, text } => match scratch.file(doc, *line, name.as_deref(), text) {
                Ok(()) => table.push(format!("{doc}:{line}  toml read")),
                Err(e) => failures.push(e),
            },
            Block::Json { line, text } => match check_json(doc, *line, text) {
                Ok(()) => table.push(format!("{doc}:{line}  json read")),
                Err(e) => failures.push(e),
            },
            Block::Console { exit, commands, .. } => {
                for c in commands {
                    match run_command(doc, &mut scratch, *exit, c) {
                        Ok(row) => table.push(row),
                        Err(e) => {
                            table.push(format!("{doc}:{}  FAILED", c.line));
                            failures.push(e);
                        }
                    }
                }
            }
        }
    }
    println!("{}", table.join("\n"));
    let after = snapshot();
    let changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .map(|p| p.display().to_string())
        .collect();
    if !changed.is_empty() {
        failures.push(format!("{doc}: its commands changed the repository: {changed:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Every Markdown file the examples may be in: README.md and docs/**/*.md.
fn documents() -> Vec<String> {
    fn walk(dir: &Path, into: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("read docs").flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, into);
            } else if path.extension().is_some_and(|x| x == "md") {
                let rel = path.strip_prefix(repo("")).expect("inside the repository");
                into.push(rel.display().to_string());
            }
        }
    }
    let mut docs = vec!["README.md".to_string()];
    walk(&repo("docs"), &mut docs);
    docs.sort();
    docs
}

#[test]
fn every_document_with_commands_is_run_and_every_skip_says_why() {
    let mut problems = Vec::new();
    let mut skipped = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(repo(&doc)).expect("read document");
        match parse(&doc, &text) {
            Err(e) => problems.extend(e),
            Ok(blocks) => {
                let runs = blocks
                    .iter()
                    .any(|b| matches!(b, Block::Console { .. } | Block::File { .. } | Block::Json { .. }));
                if runs && !DOCUMENTS.contains(&doc.as_str()) {
                    problems.push(format!("{doc}: shows commands, TOML or JSON but is not in DOCUMENTS"));
                }
                for b in blocks {
                    if let Block::Skip { line, reason } = b {
                        skipped.push(format!("{doc}:{line}: {reason}"));
                    }
                }
            }
        }
    }
    // Every document of DOCUMENTS is run by a test of its own.
    let source = std::fs::read_to_string(repo("tests/it/docs_examples.rs")).expect("this file");
    for doc in DOCUMENTS {
        if !source.contains(&format!("run_document(\"{doc}\")")) {
            problems.push(format!("{doc}: in DOCUMENTS, but no test runs it (run_document)"));
        }
    }
    println!("skipped blocks:\n{}", skipped.join("\n"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn shown_output_is_matched_as_an_excerpt_with_elisions() {
    let actual: Vec<String> = ["a 1", "b 2", "c 3", "d 4"].map(String::from).to_vec();
    let shown = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(check_output(&shown(&["b 2", "c 3"]), &actual).is_ok());
    assert!(check_output(&shown(&["a [..]", "...", "d [..]"]), &actual).is_ok());
    assert!(
        check_output(&shown(&["a 1", "c 3"]), &actual).is_err(),
        "consecutive lines stay consecutive"
    );
    assert!(
        check_output(&shown(&["c 3", "...", "b 2"]), &actual).is_err(),
        "order counts"
    );
    assert!(line_matches("x [..] y [..] z", "x 1 y 2 z"));
    assert!(!line_matches("x [..] y", "x 1 z"));
    assert!(!line_matches("ab[..]ba", "aba"), "prefix and suffix may not overlap");
    assert!(line_matches("│ [130±10] ✓ │", "│ 133.39 ✓ │"));
    assert!(line_matches("│ [130±10] ✓ │", "│ 120 ✓ │"));
    assert!(!line_matches("│ [130±10] ✓ │", "│ 141.49 ✓ │"), "outside the tolerance");
    assert!(
        !line_matches("│ [130±10] ✓ │", "│ 133.39 x │"),
        "the text around it still counts"
    );
    assert!(line_matches("a [-1±0.5] [..] b", "a -0.95 c.d b"));
    assert!(line_matches("x (a)+[..]$", "x (a)+ y $"), "the shown text is literal");
    assert_eq!(host_bound_figures("│ 128.07 ✓ │ 25.06 │ 100.00% │ 287.5 │"), ["128.07"]);
    assert!(host_bound_figures("│ [128±10] ✓ │ 25.06 │").is_empty());
    assert!(
        parse("t.md", "```console\n$ a\n│ 128.07 │\n```\n").is_err(),
        "an exact float-noise figure is refused"
    );
}

#[test]
fn blocks_are_read_with_their_markers_and_bad_markup_is_refused() {
    let doc = "<!-- docs-test: exit 2 -->\n\n```console\n$ a \\\n  b\nout\n\n$ c\n```\n\
               ```toml\n# x.toml: a file\nk = 1\n```\n<!-- docs-test: skip: slow -->\n```console\n$ d\n```\n";
    let blocks = parse("t.md", doc).expect("parses");
    let Block::Console { exit, commands } = &blocks[0] else {
        panic!("{blocks:?}")
    };
    assert_eq!(*exit, 2);
    assert_eq!((commands[0].line, commands[0].text.as_str()), (4, "a \\\n  b"));
    assert_eq!(commands[0].output, ["out"], "trailing blank lines are not output");
    assert_eq!((commands[1].line, commands[1].output.len()), (8, 0));
    assert!(matches!(&blocks[1], Block::File { name, .. } if name.as_deref() == Some("x.toml")));
    assert!(matches!(&blocks[2], Block::Skip { reason, .. } if reason == "slow"));
    let data = "```toml\n[defaults]\n```\n<!-- docs-test: fragment: a piece -->\n```json\n{\n```\n```json\n{}\n```\n";
    let blocks = parse("t.md", data).expect("parses");
    assert!(matches!(&blocks[0], Block::File { name: None, .. }), "{blocks:?}");
    assert!(matches!(&blocks[1], Block::Skip { reason, .. } if reason == "fragment: a piece"));
    assert!(matches!(&blocks[2], Block::Json { .. }));
    let unknown = check_json("t.md", 1, "{}").expect_err("no contract");
    assert!(unknown.contains("fragment"), "{unknown}");
    assert!(check_json("t.md", 1, "{").expect_err("bad").contains("not JSON"));
    let dispatch = r#"{"schema_version": 1, "policy": [], "entries": [{"target": "cpu"}], "unresolved": []}"#;
    assert!(
        check_json("t.md", 1, dispatch).is_err(),
        "an entry without its fields is not a dispatch table"
    );
    for (bad, why) in [
        ("```sh\nnpu-audit x\n```\n", "a `sh` block"),
        ("<!-- docs-test: skip -->\n```console\n$ x\n```\n", "needs a reason"),
        (
            "<!-- docs-test: exit 1 -->\ntext\n```console\n$ x\n```\n",
            "not followed by a block",
        ),
        ("<!-- docs-test: later -->\n```console\n$ x\n```\n", "unknown marker"),
        ("```console\nout\n$ x\n```\n", "output before any"),
        (
            "<!-- docs-test: fragment: part -->\n```console\n$ x\n```\n",
            "a fragment marker before a `console` block",
        ),
        (
            "<!-- docs-test: fragment -->\n```toml\nk = 1\n```\n",
            "a fragment needs a reason",
        ),
        (
            "<!-- docs-test: skip: slow -->\n```json\n{}\n```\n",
            "only a fragment marker",
        ),
    ] {
        let errors = parse("t.md", bad).expect_err(bad);
        assert!(errors.iter().any(|e| e.contains(why)), "{bad}: {errors:?}");
    }
}

#[test]
fn readme() {
    run_document("README.md");
}

#[test]
fn capture_readme() {
    run_document("docs/capture/README.md");
}

#[test]
fn eval_doc() {
    run_document("docs/eval.md");
}

#[test]
fn generation_doc() {
    run_document("docs/generation.md");
}

#[test]
fn matrix_doc() {
    run_document("docs/matrix.md");
}

#[test]
fn policy_doc() {
    run_document("docs/policy.md");
}

#[test]
fn repro_doc() {
    run_document("docs/repro.md");
}

#[test]
fn scale_doc() {
    run_document("docs/scale.md");
}

#[test]
fn streams_doc() {
    run_document("docs/streams.md");
}

/// Every TOML and JSON block of every document is read by the tool (without running the
/// documents' commands; `run_document` checks them again in order).
#[test]
fn every_toml_and_json_block_is_read_by_the_tool() {
    let (mut checked, mut failures) = (0, Vec::new());
    for doc in documents() {
        let text = std::fs::read_to_string(repo(&doc)).expect("read document");
        let Ok(blocks) = parse(&doc, &text) else { continue };
        let scratch = Scratch::new();
        for b in &blocks {
            let result = match b {
                Block::File { line, name, text } => scratch.file(&doc, *line, name.as_deref(), text),
                Block::Json { line, text } => check_json(&doc, *line, text),
                _ => continue,
            };
            checked += 1;
            failures.extend(result.err());
        }
    }
    assert!(checked >= 6, "only {checked} blocks");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
