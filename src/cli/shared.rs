//! What several commands share at the command line: the flag groups turned into the library's
//! options (each group destructured without `..`, so a new flag does not compile until it is
//! handled), the one guard that checks every file a command writes against every file it reads,
//! and printing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use super::args::{ExecArgs, GateArgs, InputArgs, ReferenceArgs, ReportFiles, ReportFormat, RuntimeEnv};
use crate::commands::compare::GoldenSource;
use crate::data::inputs::InputOptions;
use crate::execution::exec::ExecOptions;
use crate::execution::runtime::provision::RuntimeOverride;
use crate::execution::runtime::RuntimeChoice;
use crate::foundation::error::{bad_flag, bad_output, bad_policy};
use crate::foundation::userfile::{is_stdio, Outputs, Reads};
use crate::judge::policy::{Policy, Thresholds, DEFAULT_FILE as DEFAULT_POLICY_FILE};
use crate::render::outputs::OutputPaths;
use crate::render::{markdown, table};
use crate::report::compare::Report;
use crate::report::json;

/// The most intra-op threads a worker may be given: more only thrashes (and ONNX Runtime then
/// allocates per-thread state for each).
fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The runtimes the user pointed at: `--runtime KEY=PATH` and `NPU_AUDIT_RUNTIME_<KEY>`.
pub fn runtime_choice(flags: Vec<RuntimeOverride>, env: &RuntimeEnv) -> RuntimeChoice {
    RuntimeChoice {
        flags,
        env: env.given().into_iter().map(|(k, p)| (k.to_string(), p)).collect(),
    }
}

/// How workers run, checked.
pub fn exec_options(e: ExecArgs) -> Result<ExecOptions> {
    const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;
    let ExecArgs {
        timeout,
        jobs,
        threads,
        runtime,
        runtime_env,
        keep_work,
        no_context_cache,
        context_cache,
    } = e;
    if !(timeout.is_finite() && timeout > 0.0 && timeout <= MAX_TIMEOUT_S) {
        return Err(bad_flag(format!(
            "--timeout must be a number of seconds in (0, {MAX_TIMEOUT_S}], not {timeout}"
        )));
    }
    if jobs == Some(0) || threads == Some(0) {
        return Err(bad_flag("--jobs and --threads must be at least 1"));
    }
    if let Some(t) = threads.filter(|&t| t > max_threads()) {
        return Err(bad_flag(format!(
            "--threads {t} is more than 4 per core on this machine (at most {})",
            max_threads()
        )));
    }
    Ok(ExecOptions {
        timeout: Duration::from_secs_f64(timeout),
        jobs,
        threads,
        runtimes: runtime_choice(runtime, &runtime_env),
        keep_work,
        context_cache: context_cache && !no_context_cache,
    })
}

/// Where the inputs come from.
pub fn input_options(i: InputArgs) -> InputOptions {
    let InputArgs {
        npz,
        npy,
        gen,
        seed,
        samples,
        shapes,
    } = i;
    InputOptions {
        npz,
        npy,
        gen,
        seed,
        samples: samples as usize,
        shapes,
        ..InputOptions::default()
    }
}

/// Where the golden run comes from.
pub fn golden_source(r: ReferenceArgs) -> GoldenSource {
    let ReferenceArgs {
        reference,
        golden_dir,
        allow_golden_mismatch,
    } = r;
    GoldenSource {
        reference,
        stored: golden_dir,
        allow_mismatch: allow_golden_mismatch,
    }
}

/// The limits given as flags, checked. Every field of [`GateArgs`] is named here, so a flag added
/// there does not compile until it is read (the policy file's and the baseline report's flags
/// are read by [`gate_policy`]).
pub fn thresholds(g: &GateArgs) -> Result<Thresholds> {
    let GateArgs {
        min_sqnr,
        max_abs,
        min_top1,
        require_bit_exact,
        max_fallback_nodes,
        max_partitions,
        fail_on_fallback,
        max_layer_sqnr_loss,
        min_decision_agreement,
        max_divergence_step,
        config: _,
        no_config: _,
        baseline_report: _,
    } = g;
    if let Some(v) = min_sqnr.filter(|v| v.is_nan()) {
        return Err(bad_flag(format!("--min-sqnr {v} is not a number")));
    }
    if max_abs.is_some_and(|v| v.is_nan() || v < 0.0) {
        return Err(bad_flag("--max-abs must be a non-negative number"));
    }
    if min_top1.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
        return Err(bad_flag("--min-top1 must be a fraction between 0 and 1"));
    }
    if min_decision_agreement.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
        return Err(bad_flag("--min-decision-agreement must be a fraction between 0 and 1"));
    }
    if max_layer_sqnr_loss.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
        return Err(bad_flag("--max-layer-sqnr-loss must be a non-negative number of dB"));
    }
    Ok(Thresholds {
        min_sqnr_db: *min_sqnr,
        max_abs: *max_abs,
        min_top1: *min_top1,
        require_bit_exact: *require_bit_exact,
        max_fallback_nodes: *max_fallback_nodes,
        max_partitions: *max_partitions,
        fail_on_fallback: *fail_on_fallback,
        max_layer_sqnr_loss_db: *max_layer_sqnr_loss,
        min_decision_agreement: *min_decision_agreement,
        max_divergence_step: *max_divergence_step,
        min_accuracy: None,
        max_accuracy_drop: None,
        corpus: Default::default(),
    })
}

/// The signal limits given as flags (`--min-sqnr`, ...), by name: what `matrix` refuses on a
/// labelled set. Every field of [`GateArgs`] is named, as in [`thresholds`].
pub fn signal_limits_given(g: &GateArgs) -> Vec<&'static str> {
    let GateArgs {
        min_sqnr,
        max_abs,
        min_top1,
        require_bit_exact,
        max_fallback_nodes,
        max_partitions,
        fail_on_fallback,
        max_layer_sqnr_loss,
        min_decision_agreement,
        max_divergence_step,
        config: _,
        no_config: _,
        baseline_report,
    } = g;
    [
        ("--min-sqnr", min_sqnr.is_some()),
        ("--max-abs", max_abs.is_some()),
        ("--min-top1", min_top1.is_some()),
        ("--require-bit-exact", *require_bit_exact),
        ("--max-fallback-nodes", max_fallback_nodes.is_some()),
        ("--max-partitions", max_partitions.is_some()),
        ("--fail-on-fallback", *fail_on_fallback),
        ("--max-layer-sqnr-loss", max_layer_sqnr_loss.is_some()),
        ("--min-decision-agreement", min_decision_agreement.is_some()),
        ("--max-divergence-step", max_divergence_step.is_some()),
        ("--baseline-report", baseline_report.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect()
}

/// The release policy of the gate flags: the policy file (`--config`, `NPU_AUDIT_CONFIG`, else
/// the nearest `npu-audit.toml` unless `--no-config`) with the limit flags, the targets allowed
/// to fail and the previous report of baseline mode on top.
pub fn gate_policy(g: &GateArgs, allow_failure: &[crate::data::target::TargetPattern]) -> Result<Policy> {
    let flags = thresholds(g)?;
    policy_file(g.config.as_deref(), g.no_config)?.with_flags(&flags, allow_failure, g.baseline_report.as_deref())
}

/// The release policy of a command with its own limit flags (`eval`): the policy file as for
/// `compare`, with `flags` and the targets allowed to fail on top.
pub fn policy_with(
    config: Option<&Path>,
    no_config: bool,
    flags: &Thresholds,
    allow_failure: &[crate::data::target::TargetPattern],
) -> Result<Policy> {
    policy_file(config, no_config)?.with_flags(flags, allow_failure, None)
}

/// The policy file found by looking for `npu-audit.toml` in `start` and its parents, up to the
/// repository root (the directory holding `.git`); outside a repository only `start` is looked at.
pub fn find_policy(start: &Path) -> Option<PathBuf> {
    let in_repository = start.ancestors().any(|d| d.join(".git").exists());
    for dir in start.ancestors() {
        let candidate = dir.join(DEFAULT_POLICY_FILE);
        if candidate.is_file() {
            return Some(candidate);
        }
        if !in_repository || dir.join(".git").exists() {
            break;
        }
    }
    None
}

/// The policy: `--config` (or `NPU_AUDIT_CONFIG`), else the nearest `npu-audit.toml` (unless
/// `--no-config`).
fn policy_file(config: Option<&Path>, no_config: bool) -> Result<Policy> {
    match config {
        Some(path) if !is_stdio(path) && !path.is_file() => {
            Err(bad_policy(format!("--config {}: no such file", path.display())))
        }
        Some(path) => Policy::load(path),
        None if no_config => Ok(Policy::empty()),
        None => match std::env::current_dir().ok().as_deref().and_then(find_policy) {
            Some(found) => {
                crate::foundation::console::detail(format!("policy file {}", found.display()));
                Policy::load(&found)
            }
            None => Ok(Policy::empty()),
        },
    }
}

/// Prints on standard output; a closed pipe (`| head`) is not an error worth reporting.
pub fn print_stdout(text: &str) -> Result<()> {
    let mut out = anstream::stdout();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Prints a value as pretty JSON on standard output.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    print_stdout(&(serde_json::to_string_pretty(value)? + "\n"))
}

/// The report files the flags of `compare`, `merge` and `render` ask for.
pub fn report_paths(f: ReportFiles) -> OutputPaths {
    let ReportFiles {
        out,
        markdown,
        junit,
        html,
        node_data,
    } = f;
    OutputPaths {
        json: out,
        markdown,
        junit,
        html,
        node_data,
    }
}

/// The guarded outputs of a command that writes a report: every report file checked, before any
/// work, against every file the command reads (`options`).
pub fn report_outputs(options: &impl Reads, files: &OutputPaths) -> Result<Outputs> {
    let outputs = Outputs::new(&options.reads());
    files.check(&outputs)?;
    Ok(outputs)
}

/// Stages the report files with the run's other outputs, commits them all, then prints the
/// report on stdout (unless a file went there).
pub fn emit_report(report: &Report, format: ReportFormat, files: &OutputPaths, mut outputs: Outputs) -> Result<()> {
    let json_text = json::to_string(report)?;
    let to_stdout = files.stage(report, &json_text, &mut outputs)?;
    outputs.commit()?;
    if let Some(text) = to_stdout {
        return print_stdout(&text);
    }
    match format {
        ReportFormat::Json => print_stdout(&(json_text + "\n")),
        ReportFormat::Table => print_stdout(&table::render(report)),
        ReportFormat::Markdown => print_stdout(&markdown::render(report)),
    }
}

/// The forms one kind of findings report is written in besides its JSON: the renderer behind each
/// file flag it has (`None`: the kind has no such form) and its `--format` rendering on stdout.
/// The command that writes the kind and `render` share one, so a report rendered again is the
/// text its command wrote.
pub struct Forms<T> {
    pub markdown: Option<fn(&T) -> String>,
    pub html: Option<fn(&T) -> String>,
    /// A matrix's dispatch table.
    pub dispatch: Option<fn(&T) -> String>,
    /// The `--format` rendering on stdout (`json`: the JSON already rendered, given).
    pub stdout: fn(ReportFormat, &T, String) -> String,
}

/// A file a findings command (`runtime bisect`, `triage`, `matrix`, `pipeline`, `fingerprint`)
/// writes: the flag that names it, its path (`-`: standard output), and its renderer (`None`: the
/// JSON).
pub struct FindingsFile<T> {
    pub flag: &'static str,
    pub path: PathBuf,
    pub render: Option<fn(&T) -> String>,
}

/// A file flag as given: its name, the path (when given), the renderer (`None`: the JSON).
pub type FileFlag<T> = (&'static str, Option<PathBuf>, Option<fn(&T) -> String>);

/// The files given among the file flags.
pub fn findings_files<T>(given: Vec<FileFlag<T>>) -> Vec<FindingsFile<T>> {
    given
        .into_iter()
        .filter_map(|(flag, path, render)| path.map(|path| FindingsFile { flag, path, render }))
        .collect()
}

/// The guarded outputs of a findings command: every file it is asked to write checked, before any
/// work, against every file it reads (`options`): writable, not one of its inputs nor inside a
/// directory it reads, no two flags naming the same file, at most one naming standard output.
pub fn findings_outputs<T>(options: &impl Reads, files: &[FindingsFile<T>]) -> Result<Outputs> {
    let outputs = Outputs::new(&options.reads());
    let stdout: Vec<&str> = files.iter().filter(|f| is_stdio(&f.path)).map(|f| f.flag).collect();
    if stdout.len() > 1 {
        return Err(bad_output(format!(
            "{} all name standard output (-): only one can",
            stdout.join(", ")
        )));
    }
    for (i, f) in files.iter().enumerate() {
        outputs.check(f.flag, &f.path)?;
        if let Some(other) = files[..i].iter().find(|o| o.path == f.path && !is_stdio(&o.path)) {
            return Err(bad_output(format!(
                "{} and {} name the same file {}",
                other.flag,
                f.flag,
                f.path.display()
            )));
        }
    }
    Ok(outputs)
}

/// Renders every file a findings command was asked for, commits them together (all or none),
/// then prints the one named `-`, else `stdout(found, json)` (the `--format` rendering).
pub fn emit_findings<T: serde::Serialize>(
    found: &T,
    files: &[FindingsFile<T>],
    mut outputs: Outputs,
    stdout: impl FnOnce(&T, String) -> String,
) -> Result<()> {
    let json = serde_json::to_string_pretty(found)? + "\n";
    let mut to_stdout = None;
    for f in files {
        let text = f.render.map_or_else(|| json.clone(), |render| render(found));
        if is_stdio(&f.path) {
            to_stdout = Some(text);
        } else {
            outputs.file(f.flag, &f.path, text.as_bytes())?;
        }
    }
    outputs.commit()?;
    print_stdout(&to_stdout.unwrap_or_else(|| stdout(found, json)))
}

/// `eval`'s limits given as flags (`--min-accuracy`, `--max-accuracy-drop`, `--margin`), checked;
/// a generation audit checks its `--max-accuracy-drop` here too.
pub fn accuracy_thresholds(
    min_accuracy: Option<f64>,
    max_accuracy_drop: Option<f64>,
    margin: Option<f64>,
) -> Result<Thresholds> {
    if min_accuracy.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
        return Err(bad_flag("--min-accuracy must be a fraction between 0 and 1"));
    }
    if max_accuracy_drop.is_some_and(|v| !(v.is_finite() && (0.0..=100.0).contains(&v))) {
        return Err(bad_flag(
            "--max-accuracy-drop must be a number of points between 0 and 100",
        ));
    }
    if margin.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
        return Err(bad_flag("--margin must be a non-negative number of points"));
    }
    Ok(Thresholds {
        min_accuracy,
        max_accuracy_drop,
        ..Thresholds::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_found_upward_within_the_repository_only() {
        let root = tempfile::tempdir().expect("tempdir");
        let repo = root.path().join("repo");
        let deep = repo.join("a").join("b");
        std::fs::create_dir_all(&deep).expect("mkdir");
        std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
        // A policy above the repository is never picked up.
        std::fs::write(root.path().join(DEFAULT_POLICY_FILE), "").expect("write");
        assert_eq!(find_policy(&deep), None);
        std::fs::write(repo.join(DEFAULT_POLICY_FILE), "").expect("write");
        assert_eq!(find_policy(&deep), Some(repo.join(DEFAULT_POLICY_FILE)));
        std::fs::write(deep.join(DEFAULT_POLICY_FILE), "").expect("write");
        assert_eq!(find_policy(&deep), Some(deep.join(DEFAULT_POLICY_FILE)));
        // Outside a repository only the directory itself counts.
        let loose = root.path().join("loose").join("x");
        std::fs::create_dir_all(&loose).expect("mkdir");
        assert_eq!(find_policy(&loose), None);
    }
}
