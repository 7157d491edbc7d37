//! Each command: its arguments turned into the library's options, the command run, its report
//! printed and written, and the exit code it ends with.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use clap::CommandFactory;

use super::args::{
    CheckConfigArgs, Cli, ColorChoice, Command, ExecArgs, ExplainArgs, FingerprintArgs, Format, GlobalArgs,
    GoldenCommand, InputArgs, ReportFiles, ReportFormat, RuntimeEnv, SchemaKind,
};
use crate::audit::golden::{run_golden_create, GoldenOptions};
use crate::audit::run_compare;
use crate::console::Verbosity;
use crate::error::ExitCode;
use crate::error::{bad_flag, bad_output, bad_report};
use crate::exec::{ExecOptions, RunStatus};
use crate::fingerprint::{FingerprintCommand, FingerprintOptions};
use crate::inputs::InputOptions;
use crate::listing;
use crate::policy::{Policy, Thresholds, DEFAULT_FILE as DEFAULT_POLICY_FILE};
use crate::render::outputs::OutputPaths;
use crate::render::{markdown, table};
use crate::report::json;
use crate::report::model::Report;
use crate::runtime::RuntimeChoice;
use crate::userfile::{is_stdio, Outputs};

/// Applies the options every command takes: verbosity, colour, the cache and the Python used.
pub fn configure(g: &GlobalArgs) {
    crate::console::set(match (g.quiet, g.verbose) {
        (true, _) => Verbosity::Quiet,
        (_, true) => Verbosity::Verbose,
        _ => Verbosity::Normal,
    });
    anstream::ColorChoice::write_global(match g.color {
        ColorChoice::Auto => anstream::ColorChoice::Auto,
        ColorChoice::Always => anstream::ColorChoice::Always,
        ColorChoice::Never => anstream::ColorChoice::Never,
    });
    crate::runtime::configure(crate::runtime::Settings {
        cache_dir: g.cache_dir.clone(),
        python: g.python.clone(),
    });
}

/// The most intra-op threads a worker may be given: more only thrashes (and ONNX Runtime then
/// allocates per-thread state for each).
fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The runtimes the user pointed at: `--runtime KEY=PATH` and `NPU_AUDIT_RUNTIME_<KEY>`.
pub(super) fn runtime_choice(flags: &[String], env: &RuntimeEnv) -> RuntimeChoice {
    RuntimeChoice {
        flags: flags.to_vec(),
        env: env.given().into_iter().map(|(k, p)| (k.to_string(), p)).collect(),
    }
}

/// How workers run, checked.
pub fn exec_options(e: &ExecArgs) -> Result<ExecOptions> {
    const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;
    if !(e.timeout.is_finite() && e.timeout > 0.0 && e.timeout <= MAX_TIMEOUT_S) {
        return Err(bad_flag(format!(
            "--timeout must be a number of seconds in (0, {MAX_TIMEOUT_S}], not {}",
            e.timeout
        )));
    }
    if e.jobs == Some(0) || e.threads == Some(0) {
        return Err(bad_flag("--jobs and --threads must be at least 1"));
    }
    if let Some(t) = e.threads.filter(|&t| t > max_threads()) {
        return Err(bad_flag(format!(
            "--threads {t} is more than 4 per core on this machine (at most {})",
            max_threads()
        )));
    }
    Ok(ExecOptions {
        timeout: Duration::from_secs_f64(e.timeout),
        jobs: e.jobs,
        threads: e.threads,
        runtimes: runtime_choice(&e.runtime, &e.runtime_env),
        keep_work: e.keep_work,
    })
}

/// Where the inputs come from.
pub fn input_options(i: &InputArgs) -> InputOptions {
    InputOptions {
        npz: i.npz.clone(),
        npy: i.npy.clone(),
        gen: i.gen.clone(),
        seed: i.seed,
        samples: i.samples as usize,
        shapes: i.shapes.clone(),
        ..InputOptions::default()
    }
}

pub(super) fn print_stdout(text: &str) -> Result<()> {
    let mut out = anstream::stdout();
    // A closed pipe (`| head`) is not an error worth reporting.
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

pub(super) fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    print_stdout(&(serde_json::to_string_pretty(value)? + "\n"))
}

/// The report files the flags ask for.
pub fn output_paths(f: &ReportFiles) -> OutputPaths {
    OutputPaths {
        json: f.out.clone(),
        markdown: f.markdown.clone(),
        junit: f.junit.clone(),
        html: f.html.clone(),
        node_data: f.node_data.clone(),
    }
}

/// Stages the report files with the run's other outputs, commits them all, then prints the
/// report on stdout (unless a file went there).
fn emit(report: &Report, format: ReportFormat, files: &OutputPaths, mut outputs: Outputs) -> Result<()> {
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

fn compare(a: super::args::CompareArgs, layers_command: bool) -> Result<ExitCode> {
    let format = a.reports.format;
    if a.reports.timings {
        crate::timings::enable();
    }
    let (opts, files, mut outputs) = super::compare::options(a, layers_command)?;
    let report = run_compare(&opts, &mut outputs)?;
    // An interruption after the workers finished still means: write nothing.
    crate::interrupt::check()?;
    {
        let _stage = crate::timings::stage("report");
        let _span = crate::timings::span(crate::timings::Phase::Render);
        emit(&report, format, &files, outputs)?;
    }
    if crate::timings::enabled() {
        // The full account, rendering included (the JSON's stops at the report's assembly).
        let all = crate::audit::assemble::audit_timings(&crate::timings::snapshot());
        eprint!("{}", crate::render::timings::render(&all));
    }
    // One line for all required targets that did not run; the report has the full errors.
    let failed: Vec<String> = report
        .targets
        .iter()
        .filter(|t| t.required && t.status != RunStatus::Ok)
        .map(|t| format!("{} ({})", t.id, t.status.as_str()))
        .collect();
    if !failed.is_empty() {
        crate::console::error(&format!("required target(s) did not run: {}", failed.join(", ")));
    }
    Ok(report.exit_code)
}

/// `check-config`: parses and checks the policy (and its previous report), then prints the
/// limits each target gets.
fn check_config(a: CheckConfigArgs) -> Result<ExitCode> {
    let file = match a.file {
        Some(f) => f,
        None => std::env::current_dir()
            .ok()
            .as_deref()
            .and_then(super::compare::find_policy)
            .unwrap_or_else(|| DEFAULT_POLICY_FILE.into()),
    };
    if !is_stdio(&file) && !file.is_file() {
        let what = if file.is_dir() {
            "is a directory, not a policy file"
        } else {
            "no such file"
        };
        return Err(bad_flag(format!("{}: {what}", file.display())));
    }
    let policy = Policy::load(&file)?.with_flags(&Thresholds::default(), &[], None)?;
    if let Some((path, at)) = &policy.baseline_report {
        json::read(path).map_err(|e| bad_report(format!("{at}: previous report {e:#}")))?;
    }
    let wanted = if a.targets.is_empty() {
        &policy.targets
    } else {
        &a.targets
    };
    let targets: Vec<String> = if wanted.is_empty() {
        crate::target::all_known().into_iter().map(|s| s.id).collect()
    } else {
        crate::target::parse_targets(wanted)?
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    let shown = crate::userfile::shown(&file);
    print_stdout(&format!("{shown}: valid\n{}", policy.describe(&targets)))?;
    Ok(ExitCode::Success)
}

fn fingerprint(a: FingerprintArgs) -> Result<ExitCode> {
    if let Some(out) = &a.out {
        Outputs::default().check("--out", out)?;
    }
    let report = crate::fingerprint::run_command(&FingerprintCommand {
        targets: a.targets,
        probes: a.probes,
        options: FingerprintOptions {
            repeat: a.repeat as usize,
            refresh: a.refresh,
            use_cache: !a.no_cache,
        },
        exec: exec_options(&a.exec)?,
    })?;
    crate::interrupt::check()?;
    let json_text = serde_json::to_string_pretty(&report)?;
    if let Some(out) = &a.out {
        crate::userfile::write_atomic("--out", out, json_text.as_bytes())?;
    }
    match a.format {
        Format::Json => print_stdout(&(json_text + "\n"))?,
        Format::Table => print_stdout(&crate::render::fingerprint::render(&report))?,
    }
    Ok(ExitCode::Success)
}

fn explain(a: ExplainArgs) -> Result<ExitCode> {
    let found = crate::explain::run(&crate::explain::ExplainOptions {
        model: a.model,
        targets: a.targets,
        inputs: input_options(&a.inputs),
        exec: exec_options(&a.exec)?,
    })?;
    crate::interrupt::check()?;
    match a.format {
        Format::Json => print_json(&found)?,
        Format::Table => print_stdout(&crate::render::explain::render(&found))?,
    }
    Ok(ExitCode::Success)
}

fn golden(command: GoldenCommand) -> Result<ExitCode> {
    let GoldenCommand::Create {
        model,
        out,
        force,
        layers,
        inputs,
        exec,
    } = command;
    let dir = run_golden_create(&GoldenOptions {
        model,
        out,
        force,
        layers,
        inputs: input_options(&inputs),
        exec: exec_options(&exec)?,
    })?;
    crate::console::note(format!("golden run written to {}", dir.display()));
    Ok(ExitCode::Success)
}

/// `man`: the page of the whole tool on stdout, or one page per command into a directory.
fn man(dir: Option<&Path>) -> Result<ExitCode> {
    let cmd = Cli::command();
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| bad_output(format!("--dir {}: {e}", dir.display())))?;
            clap_mangen::generate_to(cmd, dir).map_err(|e| bad_output(format!("--dir {}: {e}", dir.display())))?;
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            print_stdout(&String::from_utf8_lossy(&page))?;
        }
    }
    Ok(ExitCode::Success)
}

/// Runs one parsed command.
pub fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Compare(a) => compare(*a, false),
        Command::Layers(a) => compare(*a, true),
        Command::ExplainFailure(a) => explain(a),
        Command::Fingerprint(a) => fingerprint(a),
        Command::CheckConfig(a) => check_config(a),
        Command::Merge(a) => {
            let files = output_paths(&a.files);
            let outputs = Outputs::new(&a.reports);
            files.check(&outputs)?;
            let report = crate::merge::merge(&a.reports, &a.outputs, a.allow_other_threads)?;
            emit(&report, a.format, &files, outputs)?;
            Ok(report.exit_code)
        }
        Command::Render(a) => {
            let files = output_paths(&a.files);
            let outputs = Outputs::new(std::slice::from_ref(&a.report));
            files.check(&outputs)?;
            let report = json::read(&a.report)?;
            emit(&report, a.format, &files, outputs)?;
            Ok(ExitCode::Success)
        }
        Command::Targets(a) => {
            let rows = listing::availability(&runtime_choice(&a.runtime, &a.runtime_env))?;
            match a.format {
                Format::Json => print_json(&rows)?,
                Format::Table => print_stdout(&(crate::render::listing::targets_table(&rows) + "\n"))?,
            }
            Ok(ExitCode::Success)
        }
        Command::Runtime(c) => super::runtime::run(c),
        Command::Triage(a) => super::triage::run(&a),
        Command::Matrix(a) => super::matrix::run(&a),
        Command::Pipeline(a) => super::pipeline::run(&a),
        Command::Golden(c) => golden(c),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "npu-audit", &mut script);
            print_stdout(&String::from_utf8_lossy(&script))?;
            Ok(ExitCode::Success)
        }
        Command::Man { dir } => man(dir.as_deref()),
        Command::Schema { kind } => {
            print_stdout(&match kind {
                SchemaKind::Report => crate::report::schema::report_schema_text(),
                SchemaKind::Triage => crate::triage::triage_schema_text(),
                SchemaKind::Matrix => crate::matrix::matrix_schema_text(),
                SchemaKind::Pipeline => crate::pipeline::schema_text(),
            })?;
            Ok(ExitCode::Success)
        }
        Command::Worker { .. } => Ok(ExitCode::Success),
    }
}

/// A file a findings command (`runtime bisect`, `triage`) writes: the flag that names it, its
/// path (`-`: standard output), and its renderer (`None`: the JSON).
pub struct FindingsFile<'a, T> {
    pub flag: &'static str,
    pub path: &'a PathBuf,
    pub render: Option<fn(&T) -> String>,
}

/// A findings command's `--out FILE`, when given: its JSON.
pub fn json_out<T>(out: Option<&PathBuf>) -> Vec<FindingsFile<'_, T>> {
    out.map(|path| FindingsFile {
        flag: "--out",
        path,
        render: None,
    })
    .into_iter()
    .collect()
}

/// The files a findings command reads, as the inputs of its `Outputs`, with every file it is
/// asked to write checked before any work: writable, not one of its inputs, no two flags naming
/// the same file, at most one naming standard output.
pub fn findings_outputs<T>(files: &[FindingsFile<'_, T>], reads: Vec<PathBuf>) -> Result<Outputs> {
    let outputs = Outputs::new(&reads);
    let stdout: Vec<&str> = files.iter().filter(|f| is_stdio(f.path)).map(|f| f.flag).collect();
    if stdout.len() > 1 {
        return Err(bad_output(format!(
            "{} all name standard output (-): only one can",
            stdout.join(", ")
        )));
    }
    for (i, f) in files.iter().enumerate() {
        outputs.check(f.flag, f.path)?;
        if let Some(other) = files[..i].iter().find(|o| o.path == f.path && !is_stdio(o.path)) {
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
    files: &[FindingsFile<'_, T>],
    mut outputs: Outputs,
    stdout: impl FnOnce(&T, String) -> String,
) -> Result<ExitCode> {
    let json = serde_json::to_string_pretty(found)? + "\n";
    let mut to_stdout = None;
    for f in files {
        let text = f.render.map_or_else(|| json.clone(), |render| render(found));
        if is_stdio(f.path) {
            to_stdout = Some(text);
        } else {
            outputs.file(f.flag, f.path, text.as_bytes())?;
        }
    }
    outputs.commit()?;
    print_stdout(&to_stdout.unwrap_or_else(|| stdout(found, json)))?;
    Ok(ExitCode::Success)
}
