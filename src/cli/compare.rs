//! `compare` and `layers`: the flags (and the policy file they point to) turned once into the
//! audit's options, checked before anything runs; then the audit, its report and exit code.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::args::{
    CompareArgs, FingerprintChoice, GateArgs, InputArgs, LayerArgs, LayersChoice, ReportArgs, ReportFormat, StreamArgs,
    TargetArgs,
};
use super::shared::{
    emit_report, exec_options, gate_policy, golden_source, input_options, report_outputs, report_paths,
};
use crate::analyses::drift::FingerprintMode;
use crate::analyses::layers::select::Selection;
use crate::analyses::layers::{LayerMode, LayerOptions};
use crate::analyses::stream::StreamSpec;
use crate::commands::compare::{
    run_compare, Audited, CompareOptions, Execution, Kept, KeptDir, Measured, SavedOutputs,
};
use crate::commands::shard::{Shard, ShardFlag};
use crate::data::inputs::InputOptions;
use crate::data::target::distinct;
use crate::foundation::error::{bad_flag, ExitCode};
use crate::foundation::userfile::is_stdio;
use crate::render::outputs::OutputPaths;
use crate::report::compare::DivergenceRules;
use crate::report::RunStatus;

/// `compare` (or `layers`) as asked: the audit's options, the report files and how the report
/// is printed.
pub struct CompareCommand {
    pub options: CompareOptions,
    pub files: OutputPaths,
    pub format: ReportFormat,
    /// `--timings`: measure where the audit's time goes.
    pub timings: bool,
}

/// Converts `compare`'s (or `layers`') flags, once, into the command.
pub fn command(a: CompareArgs, layers_command: bool) -> Result<CompareCommand> {
    let CompareArgs {
        model,
        reference,
        targets,
        inputs,
        gate,
        reports,
        layers,
        stream,
        exec,
    } = a;
    let ReportArgs {
        format,
        files,
        save_outputs,
        logs,
        shard,
        timings,
    } = reports;
    check_stdin_users(&gate, &inputs)?;
    let policy = gate_policy(&gate, &targets.allow_failure)?;
    let stream_spec = stream_spec(&stream, &gate)?;
    let files = report_paths(files);
    let shard = shard.map(ShardFlag::resolve).transpose()?;
    let kept = kept(&files, save_outputs, logs, shard.is_some());
    let layers = layer_options(layers, layers_command)?;
    let (execution, measured) = execution_and_measured(targets, policy, (shard, exec_options(exec)?), layers);
    let options = CompareOptions {
        audited: Audited {
            model,
            golden: golden_source(reference),
            inputs: stream_inputs(inputs, stream)?,
        },
        execution,
        measured: Measured {
            stream: stream_spec,
            ..measured
        },
        kept,
    };
    Ok(CompareCommand {
        options,
        files,
        format,
        timings,
    })
}

/// Only one of the files the audit reads can be standard input.
fn check_stdin_users(gate: &GateArgs, inputs: &InputArgs) -> Result<()> {
    let stdin_users = [gate.config.as_deref(), gate.baseline_report.as_deref()]
        .into_iter()
        .flatten()
        .chain(inputs.npz.iter().map(PathBuf::as_path))
        .filter(|p| is_stdio(p))
        .count();
    if stdin_users > 1 {
        return Err(bad_flag(
            "only one of --config, --baseline-report and --inputs can read standard input (-)",
        ));
    }
    Ok(())
}

/// The targets (the policy's when none is named), how they run, and what is measured on them
/// (the stream is the caller's).
fn execution_and_measured(
    t: TargetArgs,
    policy: crate::judge::policy::Policy,
    (shard, exec): (Option<Shard>, crate::execution::exec::ExecOptions),
    layers: Option<LayerOptions>,
) -> (Execution, Measured) {
    let TargetArgs {
        targets,
        allow_failure: _,
        no_baseline,
        class_axis,
        repeat,
        thread_probe,
        allow_other_threads,
        allow_other_hosts,
        fingerprint,
    } = t;
    let asked = if targets.is_empty() { &policy.targets } else { &targets };
    let execution = Execution {
        targets: (!asked.is_empty()).then(|| distinct(asked)),
        allow_failure: policy.allow_failure.clone(),
        baseline: !no_baseline,
        shard,
        exec,
        repeat: repeat as usize,
        thread_probe: thread_probe as usize,
        scope: crate::execution::exec::ModelScope::Whole,
    };
    let measured = Measured {
        class_axis,
        policy,
        fingerprint: match fingerprint {
            FingerprintChoice::Auto => FingerprintMode::Auto,
            FingerprintChoice::Cached => FingerprintMode::Cached,
            FingerprintChoice::Off => FingerprintMode::Off,
        },
        layers,
        stream: None,
        allow_other_threads,
        allow_other_hosts,
    };
    (execution, measured)
}

/// What the audit keeps besides its report: the saved outputs (`--save-outputs`, or beside a
/// shard's `--out`) and the logs (`--logs`, or beside `--out`).
fn kept(files: &OutputPaths, save_outputs: Option<PathBuf>, logs: Option<PathBuf>, sharded: bool) -> Kept {
    let out = files.json.as_ref().filter(|o| !is_stdio(o));
    let logs = match (logs, out) {
        (Some(dir), _) => Some(KeptDir {
            dir,
            flag: "--logs".into(),
        }),
        (None, Some(o)) => Some(KeptDir {
            dir: beside(o, "logs"),
            flag: format!("--out {}: its logs directory", o.display()),
        }),
        (None, None) => None,
    };
    Kept {
        save_outputs: saved_outputs(save_outputs, out.filter(|_| sharded)),
        logs,
    }
}

/// The inputs with a stream's step files and step count.
fn stream_inputs(i: InputArgs, s: StreamArgs) -> Result<InputOptions> {
    let samples = i.samples;
    let mut inputs = input_options(i);
    let StreamArgs {
        stream,
        steps,
        chunk,
        sequence,
        decision: _,
        divergence_sqnr: _,
        teacher_forcing: _,
    } = s;
    if stream.is_none() {
        return Ok(inputs);
    }
    if samples != 1 {
        return Err(bad_flag(
            "--stream counts steps, not samples: use --steps instead of --samples",
        ));
    }
    inputs.chunks = chunk;
    inputs.sequence = sequence;
    inputs.steps = steps.map(|n| n as usize);
    if let Some(n) = inputs.steps {
        inputs.samples = n;
    }
    Ok(inputs)
}

/// `--stream` and its flags, checked; the stream's gate flags need it.
fn stream_spec(s: &StreamArgs, g: &GateArgs) -> Result<Option<StreamSpec>> {
    let Some(feeds) = &s.stream else {
        if g.min_decision_agreement.is_some() || g.max_divergence_step.is_some() {
            return Err(bad_flag(
                "--min-decision-agreement and --max-divergence-step judge a stream: add --stream",
            ));
        }
        return Ok(None);
    };
    StreamSpec::new(
        feeds.clone(),
        s.decision.clone(),
        s.divergence_sqnr
            .unwrap_or(crate::analyses::stream::spec::DEFAULT_DIVERGENCE_DB),
        s.teacher_forcing,
    )
    .map(Some)
}

/// `report.json` -> `report.logs` (or another extension); never the report itself.
fn beside(out: &Path, extension: &str) -> PathBuf {
    let dir = out.with_extension(extension);
    if dir == out {
        let mut name = out.as_os_str().to_os_string();
        name.push(".d");
        PathBuf::from(name)
    } else {
        dir
    }
}

/// Where every run's outputs are kept: `--save-outputs DIR`, or for a shard with `--out FILE`
/// beside the report, so `merge` can compare targets of different shards with each other.
fn saved_outputs(dir: Option<PathBuf>, shard_out: Option<&PathBuf>) -> Option<SavedOutputs> {
    match (dir, shard_out) {
        (Some(dir), out) => Some(SavedOutputs {
            recorded_as: Some(recorded_location(&dir, out.map(PathBuf::as_path))),
            dir,
            flag: "--save-outputs".into(),
        }),
        // The default directory sits beside the report: recorded by name, so the two can move
        // together (CI artifacts).
        (None, Some(out)) => {
            let dir = beside(out, "outputs");
            let recorded_as = dir.file_name().map(|n| n.to_string_lossy().to_string());
            let flag = format!("--out {}: the shard's outputs directory", out.display());
            Some(SavedOutputs { dir, flag, recorded_as })
        }
        (None, None) => None,
    }
}

/// How a report records where its outputs were saved: relative to the report when they sit
/// under its directory (the two can move together), else as an absolute path, so `merge` never
/// has to guess from its own working directory.
fn recorded_location(dir: &Path, report: Option<&Path>) -> String {
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let report_dir = report
        .and_then(|r| std::path::absolute(r).ok())
        .and_then(|r| r.parent().map(Path::to_path_buf));
    match report_dir.as_deref().and_then(|d| absolute.strip_prefix(d).ok()) {
        Some(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => absolute.display().to_string(),
    }
}

/// The per-layer audit asked for: `layers` always, `compare` with --layers or a selection flag.
fn layer_options(a: LayerArgs, layers_command: bool) -> Result<Option<LayerOptions>> {
    let LayerArgs {
        layers,
        ops,
        nodes,
        tensors,
        tap_list,
        tolerance,
        float_tolerance,
        sqnr_loss_db,
        no_isolate,
        isolate_window,
        tap_memory,
        top,
    } = a;
    if let Some(list) = tap_list.as_ref().filter(|l| !l.is_file()) {
        return Err(bad_flag(format!("--tap-list {}: no such file", list.display())));
    }
    let selection = Selection {
        ops: ops
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        nodes,
        tensors,
        list: tap_list,
    };
    let default = if layers_command || !selection.is_all() {
        LayersChoice::All
    } else {
        LayersChoice::None
    };
    let mode = match layers.unwrap_or(default) {
        LayersChoice::None if !selection.is_all() => {
            return Err(bad_flag(
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
        divergence: DivergenceRules {
            tolerance_lsb: tolerance,
            float_tolerance,
            sqnr_loss_db,
            ..DivergenceRules::default()
        },
        baseline: None,
        isolate: !no_isolate,
        isolate_window: isolate_window as usize,
        tap_budget_bytes: tap_memory,
        top,
    }))
}

/// Runs `compare` (or `layers`): every file it writes checked against every file it reads before
/// anything runs, the audit, the report in every format asked for, the exit code.
pub fn run(a: CompareArgs, layers_command: bool) -> Result<ExitCode> {
    let cmd = command(a, layers_command)?;
    if cmd.timings {
        crate::foundation::timings::enable();
    }
    let mut outputs = report_outputs(&cmd.options, &cmd.files)?;
    let kept = &cmd.options.kept;
    for (dir, flag) in kept
        .save_outputs
        .iter()
        .map(|s| (&s.dir, &s.flag))
        .chain(kept.logs.iter().map(|l| (&l.dir, &l.flag)))
    {
        outputs.check_dir(flag, dir)?;
    }
    let report = run_compare(&cmd.options, &mut outputs)?;
    // An interruption after the workers finished still means: write nothing.
    crate::foundation::interrupt::check()?;
    {
        let _stage = crate::foundation::timings::stage("report");
        let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::Render);
        emit_report(&report, cmd.format, &cmd.files, outputs)?;
    }
    if crate::foundation::timings::enabled() {
        // The full account, rendering included (the JSON's stops at the report's assembly).
        let all = crate::commands::compare::assemble::audit_timings(&crate::foundation::timings::snapshot());
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
        crate::foundation::console::error(&format!("required target(s) did not run: {}", failed.join(", ")));
    }
    Ok(report.exit_code)
}
