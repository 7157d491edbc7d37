//! Each command: its arguments turned into the library's options, the command run, its report
//! printed and written, and the exit code it ends with.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use super::args::{
    CheckConfigArgs, Command, CompareArgs, ExecArgs, FingerprintArgs, FingerprintChoice, Format, GoldenCommand,
    InputArgs, LayerArgs, LayersChoice, ReportFiles, ReportFormat, RuntimeCommand,
};
use crate::audit::golden::{run_golden_create, GoldenOptions};
use crate::audit::shard::Shard;
use crate::audit::{run_compare, CompareOptions, SavedOutputs};
use crate::drift::FingerprintMode;
use crate::error::{usage, ExitCode};
use crate::exec::ExecOptions;
use crate::fingerprint::{FingerprintCommand, FingerprintOptions};
use crate::inputs::InputOptions;
use crate::layers::select::Selection;
use crate::layers::{LayerMode, LayerOptions};
use crate::listing;
use crate::outfile::check_writable;
use crate::pattern::Pattern;
use crate::policy::Thresholds;
use crate::policy::{Policy, DEFAULT_FILE as DEFAULT_POLICY_FILE};
use crate::render::outputs::OutputPaths;
use crate::render::{markdown, table};
use crate::report::json;
use crate::report::model::Report;
use crate::runtime::Provisioner;

/// The most intra-op threads a worker may be given: more only thrashes (and ONNX Runtime then
/// allocates per-thread state for each).
fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn exec_options(e: &ExecArgs) -> Result<ExecOptions> {
    const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;
    if !(e.timeout.is_finite() && e.timeout > 0.0 && e.timeout <= MAX_TIMEOUT_S) {
        return Err(usage(format!(
            "--timeout must be a number of seconds in (0, {MAX_TIMEOUT_S}], not {}",
            e.timeout
        )));
    }
    if e.jobs == Some(0) || e.threads == Some(0) {
        return Err(usage("--jobs and --threads must be at least 1"));
    }
    if let Some(t) = e.threads.filter(|&t| t > max_threads()) {
        return Err(usage(format!(
            "--threads {t} is more than 4 per core on this machine (at most {})",
            max_threads()
        )));
    }
    Ok(ExecOptions {
        timeout: Duration::from_secs_f64(e.timeout),
        jobs: e.jobs,
        threads: e.threads,
        runtime_flags: e.runtime.clone(),
        keep_work: e.keep_work,
    })
}

fn input_options(i: &InputArgs) -> InputOptions {
    InputOptions {
        npz: i.npz.clone(),
        npy: i.npy.clone(),
        gen: i.gen.clone(),
        seed: i.seed,
        samples: i.samples as usize,
        shapes: i.shapes.clone(),
    }
}

fn print_stdout(text: &str) -> Result<()> {
    let mut out = anstream::stdout();
    // A closed pipe (`| head`) is not an error worth reporting.
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// `report.json` -> `report.logs` (or another extension); never the report itself.
fn logs_beside(out: &Path, extension: &str) -> PathBuf {
    let dir = out.with_extension(extension);
    if dir == out {
        let mut name = out.as_os_str().to_os_string();
        name.push(".d");
        PathBuf::from(name)
    } else {
        dir
    }
}

/// The report files the flags ask for.
fn output_paths(f: &ReportFiles) -> OutputPaths {
    OutputPaths {
        json: f.out.clone(),
        markdown: f.markdown.clone(),
        junit: f.junit.clone(),
        html: f.html.clone(),
        node_data: f.node_data.clone(),
    }
}

/// Writes the report files, then prints the report on stdout.
fn emit(report: &Report, format: ReportFormat, files: &OutputPaths) -> Result<()> {
    let json_text = json::to_string(report)?;
    files.write(report, &json_text)?;
    match format {
        ReportFormat::Json => print_stdout(&(json_text + "\n")),
        ReportFormat::Table => print_stdout(&table::render(report)),
        ReportFormat::Markdown => print_stdout(&markdown::render(report)),
    }
}

/// The policy file: `--config`, else ./npu-audit.toml when it exists (unless `--no-config`).
fn policy_file(config: Option<&Path>, no_config: bool) -> Result<Policy> {
    let default = Path::new(DEFAULT_POLICY_FILE);
    match config {
        Some(path) if !path.is_file() => Err(usage(format!("--config {}: no such file", path.display()))),
        Some(path) => Policy::load(path),
        None if !no_config && default.is_file() => Policy::load(default),
        None => Ok(Policy::empty()),
    }
}

fn compare(a: CompareArgs, layers_command: bool) -> Result<ExitCode> {
    let files = output_paths(&a.files);
    files.check()?;
    if let Some(v) = a.min_sqnr.filter(|v| v.is_nan()) {
        return Err(usage(format!("--min-sqnr {v} is not a number")));
    }
    if a.max_abs.is_some_and(|v| v.is_nan() || v < 0.0) {
        return Err(usage("--max-abs must be a non-negative number"));
    }
    if a.min_top1.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
        return Err(usage("--min-top1 must be a fraction between 0 and 1"));
    }
    let logs = a
        .logs
        .clone()
        .or_else(|| a.files.out.as_ref().map(|o| logs_beside(o, "logs")));
    if let Some(dir) = logs.as_ref().filter(|d| d.exists() && !d.is_dir()) {
        return Err(usage(format!("the log directory {} is a file", dir.display())));
    }
    let shard = a.shard.as_deref().map(Shard::parse).transpose()?;
    // A shard keeps its outputs beside its report, so `merge` can compare targets of different
    // shards with each other.
    let save_outputs = match (&a.save_outputs, shard.and(a.files.out.as_ref())) {
        (Some(dir), _) => Some(SavedOutputs {
            dir: dir.clone(),
            recorded_as: Some(dir.display().to_string()),
        }),
        // The default directory sits beside the report: recorded by name, so the two can move
        // together (CI artifacts).
        (None, Some(out)) => {
            let dir = logs_beside(out, "outputs");
            let recorded_as = dir.file_name().map(|n| n.to_string_lossy().to_string());
            Some(SavedOutputs { dir, recorded_as })
        }
        (None, None) => None,
    };
    let layers = layer_options(&a.layers, layers_command)?;
    let thresholds = Thresholds {
        min_sqnr_db: a.min_sqnr,
        max_abs: a.max_abs,
        min_top1: a.min_top1,
        require_bit_exact: a.require_bit_exact,
        max_fallback_nodes: a.max_fallback_nodes,
        max_partitions: a.max_partitions,
        fail_on_fallback: a.fail_on_fallback,
    };
    let policy = policy_file(a.config.as_deref(), a.no_config)?.with_flags(
        &thresholds,
        &a.allow_failure,
        a.baseline_report.as_deref(),
    )?;
    let targets = if a.targets.is_empty() {
        policy.targets.clone()
    } else {
        a.targets
    };
    let opts = CompareOptions {
        model: a.model,
        reference: a.reference,
        golden: a.golden_dir,
        allow_golden_mismatch: a.allow_golden_mismatch,
        targets,
        allow_failure: policy.allow_failure.clone(),
        no_baseline: a.no_baseline,
        inputs: input_options(&a.inputs),
        class_axis: a.class_axis,
        policy,
        shard,
        exec: exec_options(&a.exec)?,
        save_outputs,
        logs,
        repeat: a.repeat as usize,
        fingerprint: match a.fingerprint {
            FingerprintChoice::Auto => FingerprintMode::Auto,
            FingerprintChoice::Cached => FingerprintMode::Cached,
            FingerprintChoice::Off => FingerprintMode::Off,
        },
        layers,
    };
    let report = run_compare(&opts)?;
    // An interruption after the workers finished still means: write nothing.
    crate::interrupt::check()?;
    emit(&report, a.format, &files)?;
    // One line for all required targets that did not run; the report has the full errors.
    let failed: Vec<String> = report
        .targets
        .iter()
        .filter(|t| t.required && t.status != crate::exec::RunStatus::Ok)
        .map(|t| format!("{} ({})", t.id, t.status.as_str()))
        .collect();
    if !failed.is_empty() {
        eprintln!(
            "npu-audit: error: required target(s) did not run: {}",
            failed.join(", ")
        );
    }
    Ok(report.exit_code)
}

/// `check-config`: parses and checks the policy (and its previous report), then prints the
/// limits each target gets.
fn check_config(a: CheckConfigArgs) -> Result<ExitCode> {
    if !a.file.is_file() {
        return Err(usage(format!("{}: no such file", a.file.display())));
    }
    let policy = Policy::load(&a.file)?.with_flags(&Thresholds::default(), &[], None)?;
    if let Some((path, at)) = &policy.baseline_report {
        json::read(path).map_err(|e| usage(format!("{at}: previous report {e:#}")))?;
    }
    let targets: Vec<String> = if !a.targets.is_empty() {
        crate::target::parse_targets(&a.targets)?
            .into_iter()
            .map(|s| s.id)
            .collect()
    } else if !policy.targets.is_empty() {
        crate::target::parse_targets(&policy.targets)?
            .into_iter()
            .map(|s| s.id)
            .collect()
    } else {
        crate::target::all_known().into_iter().map(|s| s.id).collect()
    };
    print_stdout(&format!("{}: valid\n{}", a.file.display(), policy.describe(&targets)))?;
    Ok(ExitCode::Success)
}

/// The per-layer audit asked for: `layers` always, `compare` with --layers or a selection flag.
fn layer_options(a: &LayerArgs, layers_command: bool) -> Result<Option<LayerOptions>> {
    let selection = Selection {
        ops: a
            .ops
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        nodes: a.nodes.clone(),
        tensors: a.tensors.clone(),
        list: a.tap_list.clone(),
    };
    for p in a.nodes.iter().chain(&a.tensors) {
        Pattern::parse(p).map_err(|e| usage(format!("--node/--tensor: {e:#}")))?;
    }
    if let Some(list) = a.tap_list.as_ref().filter(|l| !l.is_file()) {
        return Err(usage(format!("--tap-list {}: no such file", list.display())));
    }
    let default = if layers_command || !selection.is_all() {
        LayersChoice::All
    } else {
        LayersChoice::None
    };
    let mode = match a.layers.unwrap_or(default) {
        LayersChoice::None if !selection.is_all() => {
            return Err(usage(
                "--op, --node, --tensor and --tap-list select layers: drop --layers none",
            ))
        }
        LayersChoice::None => return Ok(None),
        LayersChoice::All => LayerMode::Tap,
        LayersChoice::Bisect => LayerMode::Bisect,
    };
    Ok(Some(LayerOptions {
        mode,
        selection,
        tolerance_lsb: a.tolerance,
        isolate: !a.no_isolate,
        isolate_window: a.isolate_window as usize,
        tap_budget_bytes: a.tap_memory,
        top: a.top,
    }))
}

fn fingerprint(a: FingerprintArgs) -> Result<ExitCode> {
    if let Some(out) = &a.out {
        check_writable(out)?;
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
        crate::outfile::write_atomic(out, json_text.as_bytes())?;
    }
    match a.format {
        Format::Json => print_stdout(&(json_text + "\n"))?,
        Format::Table => print_stdout(&crate::render::fingerprint::render(&report))?,
    }
    Ok(ExitCode::Success)
}

/// Runs one parsed command.
pub fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Compare(a) => compare(*a, false),
        Command::Layers(a) => compare(*a, true),
        Command::ExplainFailure(a) => {
            let found = crate::explain::run(&crate::explain::ExplainOptions {
                model: a.model,
                targets: a.targets,
                inputs: input_options(&a.inputs),
                exec: exec_options(&a.exec)?,
            })?;
            crate::interrupt::check()?;
            match a.format {
                Format::Json => print_stdout(&(serde_json::to_string_pretty(&found)? + "\n"))?,
                Format::Table => print_stdout(&crate::explain::render(&found))?,
            }
            Ok(ExitCode::Success)
        }
        Command::Fingerprint(a) => fingerprint(a),
        Command::CheckConfig(a) => check_config(a),
        Command::Merge(a) => {
            let files = output_paths(&a.files);
            files.check()?;
            let report = crate::merge::merge(&a.reports)?;
            emit(&report, a.format, &files)?;
            Ok(report.exit_code)
        }
        Command::Render(a) => {
            let files = output_paths(&a.files);
            files.check()?;
            let report = json::read(&a.report)?;
            emit(&report, a.format, &files)?;
            Ok(ExitCode::Success)
        }
        Command::Targets(a) => {
            let rows = listing::availability(&a.runtime)?;
            match a.format {
                Format::Json => print_stdout(&(serde_json::to_string_pretty(&rows)? + "\n"))?,
                Format::Table => print_stdout(&(listing::targets_table(&rows) + "\n"))?,
            }
            Ok(ExitCode::Success)
        }
        Command::Runtime(RuntimeCommand::List { format }) => {
            let rows = listing::runtime_rows()?;
            match format {
                Format::Json => print_stdout(&(serde_json::to_string_pretty(&rows)? + "\n"))?,
                Format::Table => print_stdout(&(listing::runtime_table(&rows) + "\n"))?,
            }
            Ok(ExitCode::Success)
        }
        Command::Runtime(RuntimeCommand::Install { keys }) => {
            let p = Provisioner::new(&[])?;
            for b in listing::install_keys(&keys)? {
                let rt = p.get(b)?;
                println!("{} {} {}", b.key, b.label(), rt.library.display());
            }
            Ok(ExitCode::Success)
        }
        Command::Runtime(RuntimeCommand::Path { key }) => {
            let b = listing::install_keys(std::slice::from_ref(&key))?;
            let p = Provisioner::new(&[])?;
            for b in b {
                println!("{}", p.get(b)?.library.display());
            }
            Ok(ExitCode::Success)
        }
        Command::Golden(GoldenCommand::Create {
            model,
            out,
            force,
            layers,
            inputs,
            exec,
        }) => {
            let dir: PathBuf = run_golden_create(&GoldenOptions {
                model,
                out,
                force,
                layers,
                inputs: input_options(&inputs),
                exec: exec_options(&exec)?,
            })?;
            eprintln!("npu-audit: golden run written to {}", dir.display());
            Ok(ExitCode::Success)
        }
        Command::Worker { .. } => Ok(ExitCode::Success),
    }
}
