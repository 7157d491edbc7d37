//! The structure docs/ARCHITECTURE.md promises, checked on the source: top-level modules import
//! only modules below them (no cycles, no climb back up the layering), and no function outside
//! tests is longer than a screen.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every layer, lowest first, as the tree holds it: a layer of several modules is a folder of
/// `src/` (`src/foundation/error.rs`), a layer of one module is that module (`src/report/`). A
/// module may use only modules listed before it (within its layer too). The layers
/// (docs/ARCHITECTURE.md): foundation, data, execution, report model, report boundary (where the
/// execution layer's and the device parser's types become the reports'), analyses, judge,
/// commands, renderers, command line, and the fuzz harnesses (which reach every parser).
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "error",
            "timings",
            "hash",
            "console",
            "interrupt",
            "pattern",
            "process",
            "userfile",
            "words",
            "host",
        ],
    ),
    ("data", &["tensor", "model", "target", "inputs", "dataset", "device"]),
    ("execution", &["runtime", "exec", "golden"]),
    ("report", &[]),
    ("into_report", &[]),
    (
        "analyses",
        &[
            "metrics",
            "accuracy",
            "placement",
            "outcome",
            "fingerprint",
            "drift",
            "layers",
            "stream",
        ],
    ),
    ("judge", &["policy", "gate"]),
    (
        "commands",
        &[
            "shard",
            "compare",
            "explain_failure",
            "eval",
            "generation",
            "matrix",
            "merge",
            "availability",
            "runtime_cache",
            "pipeline",
            "bisect",
            "triage",
            "repro",
        ],
    ),
    ("render", &[]),
    ("cli", &[]),
    ("fuzzing", &[]),
];

/// Whether `name` is a layer folder (a layer of several modules).
fn is_layer_folder(name: &str) -> bool {
    LAYERS.iter().any(|(layer, mods)| *layer == name && !mods.is_empty())
}

/// Every module in layer order: `layer::module` for a layer folder's, the layer's name for a
/// layer of one module.
fn units() -> Vec<String> {
    LAYERS
        .iter()
        .flat_map(|(layer, mods)| {
            if mods.is_empty() {
                vec![layer.to_string()]
            } else {
                mods.iter().map(|m| format!("{layer}::{m}")).collect()
            }
        })
        .collect()
}

/// The longest a function outside tests may be, in lines.
const MAX_FUNCTION_LINES: usize = 80;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") && !p.to_string_lossy().ends_with(".pb.rs") {
            // Generated code (`*.pb.rs`) is the generator's, not ours to shape.
            out.push(p);
        }
    }
}

/// The module a file belongs to (`src/analyses/layers/run.rs` -> `analyses::layers`,
/// `src/render/table.rs` -> `render`); `None` for the crate's root and a layer folder's `mod.rs`.
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).expect("under src");
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    let first = parts.first()?.clone();
    if matches!(first.as_str(), "lib" | "main") {
        return None;
    }
    if !is_layer_folder(&first) {
        return Some(first);
    }
    match parts.get(1).map(String::as_str) {
        None | Some("mod") => None,
        Some(m) => Some(format!("{first}::{m}")),
    }
}

/// The source with comments, string and character literals blanked (same length and lines), so
/// that neither a path in a doc comment nor a brace in a string counts.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            let end = {
                let mut close = vec![b'"'];
                close.extend(std::iter::repeat_n(b'#', hashes));
                let body = i + 2 + hashes + usize::from(rest[0] == b'b');
                b[body..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| body + p + close.len())
            };
            out.extend(b[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                let step = if b[i] == b'\\' { 2 } else { 1 };
                for k in 0..step.min(b.len() - i) {
                    out.push(blank(b[i + k]));
                }
                i += step;
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            let n = char_literal_len(rest).unwrap_or(1);
            out.extend(std::iter::repeat_n(b' ', n));
            i += n;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `r"`, `r#"`, `br"`...: the number of `#`.
fn raw_string_start(rest: &[u8]) -> Option<usize> {
    let s = if rest.starts_with(b"br") {
        &rest[2..]
    } else {
        rest.strip_prefix(b"r")?
    };
    let hashes = s.iter().take_while(|&&c| c == b'#').count();
    (s.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The length of a character literal at the start (`'a'`, `'\n'`, `'\u{1b}'`), or `None` for a
/// lifetime.
fn char_literal_len(rest: &[u8]) -> Option<usize> {
    if rest.get(1) == Some(&b'\\') {
        let close = rest[2..].iter().position(|&c| c == b'\'')?;
        return Some(close + 3);
    }
    let text = std::str::from_utf8(&rest[1..rest.len().min(6)]).unwrap_or("");
    let c = text.chars().next()?;
    let len = c.len_utf8();
    (rest.get(1 + len) == Some(&b'\'')).then_some(len + 2)
}

/// The modules a file's code refers to through `crate::` (`analyses::layers`, `report`), with
/// the line of each use.
fn uses(code: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let names: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
                group_heads(group, code, n)
            } else {
                let head = ident(rest);
                match rest[head.len()..].strip_prefix("::") {
                    Some(inner) if is_layer_folder(&head) => match inner.strip_prefix('{') {
                        Some(group) => group_heads(group, code, n)
                            .into_iter()
                            .map(|m| format!("{head}::{m}"))
                            .collect(),
                        None => vec![format!("{head}::{}", ident(inner))],
                    },
                    _ => vec![head],
                }
            };
            found.extend(names.into_iter().filter(|s| !s.is_empty()).map(|s| (s, n + 1)));
        }
    }
    found
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> String {
    text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The first segment of every path in `use crate::{a::b, c}` (which may span lines).
fn group_heads(first_line_rest: &str, code: &str, line: usize) -> Vec<String> {
    let mut text = first_line_rest.to_string();
    for l in code.lines().skip(line + 1) {
        if text.contains('}') {
            break;
        }
        text.push_str(l);
    }
    let mut depth = 0;
    let mut heads = Vec::new();
    let mut at_start = true;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_start = true,
            c if at_start && (c.is_alphanumeric() || c == '_') => current.push(c),
            c if at_start && !c.is_whitespace() => {
                heads.push(std::mem::take(&mut current));
                at_start = false;
            }
            _ if at_start && !current.is_empty() => {
                heads.push(std::mem::take(&mut current));
                at_start = false;
            }
            _ => {}
        }
    }
    if !current.is_empty() {
        heads.push(current);
    }
    heads
}

fn rank(module: &str) -> Option<usize> {
    units().iter().position(|m| m == module)
}

#[test]
fn modules_import_only_modules_below_them() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    let mut graph: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let own = rank(&module).unwrap_or_else(|| panic!("{module} is not in LAYERS: place it in a layer"));
        let code = code_only(&std::fs::read_to_string(file).expect("read"));
        for (used, line) in uses(&code) {
            if used == module || used == "self" || used == "super" {
                continue;
            }
            let Some(r) = rank(&used) else {
                violations.push(format!(
                    "{}:{line}: crate::{used} is not a known module",
                    file.display()
                ));
                continue;
            };
            *graph
                .entry(module.clone())
                .or_default()
                .entry(used.clone())
                .or_default() += 1;
            if r >= own {
                violations.push(format!(
                    "{}:{line}: {module} uses {used}, which is not below it",
                    file.display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "upward or sideways imports:\n{}",
        violations.join("\n")
    );
    assert!(graph.len() > 20, "the scan found too few modules: {graph:?}");
}

/// What the report contracts may use besides serde and schemars: their own types and the
/// foundation's errors, file reading and hashes (to read a report). Never a type of the layers
/// that make the figures: those are converted at the boundary (`src/into_report.rs`).
const REPORT_MAY_USE: &[&str] = &["foundation::error", "foundation::userfile", "foundation::hash"];

#[test]
fn the_report_contracts_own_their_types() {
    let mut files = Vec::new();
    rust_files(&src().join("report"), &mut files);
    assert!(files.len() >= 8, "the scan found too few report files: {files:?}");
    let mut used_anything = false;
    for file in &files {
        let code = code_only(&std::fs::read_to_string(file).expect("read"));
        for (used, line) in uses(&code) {
            if matches!(used.as_str(), "report" | "self" | "super") {
                continue;
            }
            used_anything = true;
            assert!(
                REPORT_MAY_USE.contains(&used.as_str()),
                "{}:{line}: the report model uses crate::{used}; convert at the boundary (src/into_report.rs)",
                file.display()
            );
        }
    }
    assert!(used_anything, "the scanner saw no use of another module in report/");
}

/// The `pub mod NAME;` lines of a Rust file, in order.
fn declared_modules(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ")?.strip_suffix(';').map(str::to_string))
        .collect()
}

#[test]
fn the_tree_is_the_layering() {
    let mut top = declared_modules(&src().join("lib.rs"));
    let mut layers: Vec<String> = LAYERS.iter().map(|(l, _)| l.to_string()).collect();
    top.sort();
    layers.sort();
    assert_eq!(
        top, layers,
        "src/lib.rs declares one module per layer, as LAYERS lists them"
    );
    for (layer, mods) in LAYERS.iter().filter(|(_, m)| !m.is_empty()) {
        let mut declared = declared_modules(&src().join(layer).join("mod.rs"));
        let mut listed: Vec<String> = mods.iter().map(|m| m.to_string()).collect();
        declared.sort();
        listed.sort();
        assert_eq!(
            declared, listed,
            "src/{layer}/mod.rs declares the layer's modules as LAYERS lists them"
        );
    }
    let loose: Vec<String> = std::fs::read_dir(src())
        .expect("read src")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
        .filter(|n| !matches!(n.as_str(), "lib.rs" | "main.rs" | "into_report.rs" | "fuzzing.rs"))
        .collect();
    assert!(
        loose.is_empty(),
        "files at the top of src/ outside any layer: {loose:?}"
    );
}

/// Function lengths (lines from `fn` to its closing brace) outside `#[cfg(test)]` modules.
fn function_lengths(code: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = code.lines().collect();
    let end = lines
        .iter()
        .position(|l| l.trim_start().starts_with("#[cfg(test)]"))
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for (i, line) in lines[..end].iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let mut depth = 0i64;
        let mut opened = false;
        for (j, l) in lines[i..].iter().enumerate() {
            if !opened && l.trim_end().ends_with(';') && !l.contains('{') {
                break;
            }
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth == 0 {
                out.push((i + 1, j + 1, name.clone()));
                break;
            }
        }
    }
    out
}

fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        match w {
            "pub" | "const" | "async" | "unsafe" | "extern" => continue,
            w if w.starts_with("pub(") => continue,
            "fn" => {
                let name = words.next()?;
                return Some(name.split(['(', '<']).next()?.to_string());
            }
            _ => return None,
        }
    }
    None
}

#[test]
fn no_function_outside_tests_is_longer_than_a_screen() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut long = Vec::new();
    let mut counted = 0;
    for file in &files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(file).expect("read"));
        for (line, len, name) in function_lengths(&code) {
            counted += 1;
            if len > MAX_FUNCTION_LINES {
                long.push(format!("{}:{line}: {name} has {len} lines", file.display()));
            }
        }
    }
    assert!(counted > 300, "the scan found only {counted} functions");
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The code of every file of `src/` outside tests (`#[cfg(test)]` modules and `tests.rs`), with
/// comments and strings blanked, and the file's path from the repository.
fn non_test_code() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files
        .iter()
        .filter(|f| f.file_name().is_none_or(|n| n != "tests.rs"))
        .map(|f| {
            let code = code_only(&std::fs::read_to_string(f).expect("read"));
            let end = code.find("#[cfg(test)]").unwrap_or(code.len());
            let rel = f.strip_prefix(src().parent().unwrap()).unwrap().display().to_string();
            (rel, code[..end].to_string())
        })
        .collect()
}

/// One rule per concept: each small helper has one home, and one gate serves every kind of audit.
/// Each (what, where it may appear) pair lists the only files whose code (comments and strings
/// aside, tests aside) holds the text.
#[test]
fn each_concept_has_one_home() {
    let homes: &[(&str, &[&str])] = &[
        // The one median (NumPy's, NaN skipped).
        ("fn median(", &["src/analyses/accuracy/stats.rs"]),
        // One mapping of a verdict and the targets to an exit code (the gate module also reads
        // stored codes back in `rejudge`).
        (
            "ExitCode::DriftExceeded",
            &[
                "src/foundation/error.rs",
                "src/judge/gate/mod.rs",
                "src/judge/gate/rejudge.rs",
            ],
        ),
        // One gate type: no kind of report has its own rule type.
        ("struct GenerationRule", &[]),
        ("struct EvalGate", &[]),
        // One size-capped read of a user's file.
        ("take(max + 1)", &[]),
        ("MAX_READ_BYTES + 1", &[]),
    ];
    let code = non_test_code();
    assert!(code.len() > 200, "the scan found {} files", code.len());
    let mut misplaced = Vec::new();
    for (what, allowed) in homes {
        for (file, text) in &code {
            if text.contains(what) && !allowed.contains(&file.as_str()) {
                misplaced.push(format!("{file}: {what} (its home: {})", allowed.join(", ")));
            }
        }
    }
    // The one SQNR formula, 10·log10(signal / noise): a line that takes a log10 and scales it by
    // ten (number formatting and plot axes take log10s too, never times ten).
    for (file, text) in &code {
        let formula = text.lines().any(|l| l.contains("log10") && l.contains("10.0 *"));
        if formula && file != "src/analyses/metrics/mod.rs" {
            misplaced.push(format!(
                "{file}: an SQNR formula (its home: src/analyses/metrics/mod.rs)"
            ));
        }
    }
    assert!(misplaced.is_empty(), "a second home:\n{}", misplaced.join("\n"));
}

/// Every command's options are destructured whole where they are read: no `..` in a pattern
/// of an `...Args` struct or `Command` variant in `src/cli/` (a new flag does not compile until it
/// is handled).
#[test]
fn command_options_are_destructured_without_rest_patterns() {
    let code = non_test_code();
    let mut rest = Vec::new();
    for (file, text) in code.iter().filter(|(f, _)| f.starts_with("src/cli/")) {
        for (n, line) in text.lines().enumerate() {
            let t = line.trim();
            if (t == ".." || t.ends_with(" .. }") || t.ends_with(", .. } =") || t.contains("{ .. }"))
                && !t.starts_with("//")
            {
                rest.push(format!("{file}:{}: {t}", n + 1));
            }
        }
    }
    assert!(
        rest.is_empty(),
        "rest patterns in command options:\n{}",
        rest.join("\n")
    );
}

#[test]
fn the_scanner_sees_through_strings_comments_and_groups() {
    let code = code_only("// crate::cli\nlet s = \"crate::render {\";\nuse crate::{model::pb, tensor::{Tensor, DType}};\nlet c = '{'; fn f<'a>() {}\nuse crate::data::{model::pb, tensor};\nlet x = crate::analyses::layers::run();\n");
    let found: Vec<String> = uses(&code).into_iter().map(|(m, _)| m).collect();
    assert_eq!(
        found,
        vec!["model", "tensor", "data::model", "data::tensor", "analyses::layers"]
    );
    assert!(!code.contains('"'));
    let lengths = function_lengths(&code_only("fn a() {\n    let x = \"}\";\n}\nfn b();\n"));
    assert_eq!(lengths, vec![(1, 3, "a".to_string())]);
}

/// The sibling modules a file of module `parent` refers to, through `super::x` (a file beside
/// it) or `crate::<parent path>::x`, with the line of each use.
fn sibling_uses(code: &str, parent_path: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let prefixes = ["super::".to_string(), format!("crate::{parent_path}::")];
    for (n, line) in code.lines().enumerate() {
        for prefix in &prefixes {
            let mut rest = line;
            while let Some(at) = rest.find(prefix.as_str()) {
                // `crate::analyses::layers::` must not match inside `crate::render::layers::`.
                let before = &rest[..at];
                rest = &rest[at + prefix.len()..];
                if before.ends_with("::") || before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let names: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
                    group_heads(group, code, n)
                } else {
                    vec![rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()]
                };
                found.extend(names.into_iter().filter(|s| !s.is_empty()).map(|s| (s, n + 1)));
            }
        }
    }
    found
}

/// A circle in `graph`, as the names along it, if there is one.
fn find_circle(graph: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph.keys().find_map(|k| visit(k, graph, &mut Vec::new(), &mut done))
}

/// Every directory module of `src/` (a directory with `mod.rs`), with its path as `a::b`.
fn directory_modules(dir: &Path, path: &str, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    entries.sort();
    for d in entries {
        let name = d.file_name().expect("name").to_string_lossy().to_string();
        let sub = if path.is_empty() {
            name
        } else {
            format!("{path}::{name}")
        };
        if d.join("mod.rs").is_file() {
            out.push((d.clone(), sub.clone()));
        }
        directory_modules(&d, &sub, out);
    }
}

#[test]
fn files_within_a_module_import_each_other_without_circles() {
    let mut modules = Vec::new();
    directory_modules(&src(), "", &mut modules);
    assert!(
        modules.len() > 15,
        "the scan found only {} directory modules",
        modules.len()
    );
    let mut circles = Vec::new();
    for (dir, path) in &modules {
        // The module's files and subdirectories, its face (`mod.rs`) aside: it declares them.
        let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let siblings: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
            .expect("read module")
            .map(|e| e.expect("entry").path())
            .filter_map(|p| {
                let stem = p.file_stem()?.to_string_lossy().to_string();
                let file = if p.is_dir() { p.join("mod.rs") } else { p.clone() };
                let rust = p.extension().is_some_and(|e| e == "rs") && !p.to_string_lossy().ends_with(".pb.rs");
                (stem != "mod" && stem != "tests" && (rust || file.is_file())).then_some((stem, file))
            })
            .collect();
        for (name, file) in &siblings {
            // A subdirectory is every file in it: `render/html/generation.rs` is `html`'s.
            let mut files = vec![file.clone()];
            if file.ends_with("mod.rs") {
                files.clear();
                rust_files(file.parent().expect("a directory"), &mut files);
            }
            let code: String = files
                .iter()
                .map(|f| code_only(&std::fs::read_to_string(f).expect("read")))
                .collect::<Vec<_>>()
                .join("\n");
            let mut used: Vec<String> = sibling_uses(&code, path)
                .into_iter()
                .map(|(m, _)| m)
                .filter(|m| m != name && siblings.iter().any(|(s, _)| s == m))
                .collect();
            used.sort();
            used.dedup();
            graph.insert(name.clone(), used);
        }
        if let Some(circle) = find_circle(&graph) {
            circles.push(format!("{path}: {}", circle.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles within modules:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_circles_and_only_them() {
    let graph = |edges: &[(&str, &str)]| -> BTreeMap<String, Vec<String>> {
        let mut g: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().push(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(find_circle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    assert_eq!(
        find_circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".to_string(), "b".into(), "c".into(), "a".into()])
    );
    let code = code_only(
        "use super::{plan::X, state};\nlet y = crate::analyses::layers::run::f();\nuse crate::render::layers::x;\n",
    );
    let found: Vec<String> = sibling_uses(&code, "analyses::layers")
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(found, vec!["plan", "state", "run"]);
}
