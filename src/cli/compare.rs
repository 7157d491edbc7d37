//! `compare` and `layers`: the flags (and the policy file they point to) turned into the
//! audit's options, checked before anything runs.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::args::{
    CompareArgs, ExecArgs, FingerprintChoice, GateArgs, InputArgs, LayerArgs, LayersChoice, ReferenceArgs,
    ReleaseBisectArgs, ReportArgs, StreamArgs,
};
use super::commands::{exec_options, input_options, output_paths};
use crate::audit::shard::Shard;
use crate::audit::{CompareOptions, SavedOutputs};
use crate::drift::FingerprintMode;
use crate::error::{bad_flag, bad_policy};
use crate::inputs::InputOptions;
use crate::layers::select::Selection;
use crate::layers::{LayerMode, LayerOptions};
use crate::pattern::Pattern;
use crate::policy::{Policy, Thresholds, DEFAULT_FILE as DEFAULT_POLICY_FILE};
use crate::releases::ReleaseBisectOptions;
use crate::render::outputs::OutputPaths;
use crate::report::model::DivergenceRules;
use crate::stream::StreamSpec;
use crate::userfile::{is_stdio, Outputs};

/// Every file the run reads that the user named: no output may replace one of them.
fn run_inputs(a: &CompareArgs) -> Vec<PathBuf> {
    let mut inputs = vec![a.model.clone()];
    inputs.extend(a.reference.reference.clone());
    inputs.extend(a.inputs.npz.iter().cloned());
    inputs.extend(
        a.inputs
            .npy
            .iter()
            .filter_map(|s| s.split_once('='))
            .map(|(_, p)| PathBuf::from(p)),
    );
    inputs.extend(a.gate.config.clone());
    inputs.extend(a.gate.baseline_report.clone());
    inputs.extend(a.layers.tap_list.clone());
    inputs.extend(a.stream.sequence.clone());
    inputs.extend(a.stream.chunk.iter().filter_map(|c| {
        crate::inputs::sequence::ChunkSpec::parse(c)
            .ok()
            .map(|spec| PathBuf::from(spec.file))
    }));
    inputs.extend(
        a.exec
            .runtime
            .iter()
            .filter_map(|s| s.split_once('='))
            .map(|(_, p)| PathBuf::from(p)),
    );
    if let Some(dir) = &a.reference.golden_dir {
        inputs.extend(files_under(dir, 4));
    }
    inputs
}

/// The files under `dir`, `depth` levels down at most.
pub(super) fn files_under(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        if path.is_dir() && depth > 0 {
            out.extend(files_under(&path, depth - 1));
        } else if path.is_file() {
            out.push(path);
        }
    }
    out
}

/// The audit's options, where its report goes, and the set its outputs are staged in, from
/// `compare`'s (or `layers`') flags.
pub fn options(a: CompareArgs, layers_command: bool) -> Result<(CompareOptions, OutputPaths, Outputs)> {
    let files = output_paths(&a.reports.files);
    let outputs = Outputs::new(&run_inputs(&a));
    files.check(&outputs)?;
    let thresholds = thresholds(&a.gate)?;
    let stdin_users = [a.gate.config.as_deref(), a.gate.baseline_report.as_deref()]
        .into_iter()
        .flatten()
        .chain(a.inputs.npz.iter().map(PathBuf::as_path))
        .filter(|p| is_stdio(p))
        .count();
    if stdin_users > 1 {
        return Err(bad_flag(
            "only one of --config, --baseline-report and --inputs can read standard input (-)",
        ));
    }
    let out = a.reports.files.out.as_ref().filter(|o| !is_stdio(o));
    let logs = a.reports.logs.clone().or_else(|| out.map(|o| beside(o, "logs")));
    if let Some(dir) = &logs {
        let flag = match (&a.reports.logs, out) {
            (None, Some(o)) => format!("--out {}: its logs directory", o.display()),
            _ => "--logs".to_string(),
        };
        crate::userfile::check_dir_destination(&flag, dir)?;
    }
    let shard = a.reports.shard.as_deref().map(Shard::parse).transpose()?;
    let save_outputs = saved_outputs(&a.reports, shard.is_some());
    let layers = layer_options(&a.layers, layers_command)?;
    let policy = policy_file(a.gate.config.as_deref(), a.gate.no_config)?.with_flags(
        &thresholds,
        &a.targets.allow_failure,
        a.gate.baseline_report.as_deref(),
    )?;
    let targets = if a.targets.targets.is_empty() {
        policy.targets.clone()
    } else {
        a.targets.targets
    };
    let opts = CompareOptions {
        model: a.model,
        reference: a.reference.reference,
        golden: a.reference.golden_dir,
        allow_golden_mismatch: a.reference.allow_golden_mismatch,
        targets,
        allow_failure: policy.allow_failure.clone(),
        no_baseline: a.targets.no_baseline,
        inputs: stream_inputs(&a.inputs, &a.stream)?,
        class_axis: a.targets.class_axis,
        stream: stream_spec(&a.stream, &a.gate)?,
        policy,
        shard,
        exec: exec_options(&a.exec)?,
        save_outputs,
        logs,
        repeat: a.targets.repeat as usize,
        thread_probe: a.targets.thread_probe as usize,
        allow_other_threads: a.targets.allow_other_threads,
        fingerprint: match a.targets.fingerprint {
            FingerprintChoice::Auto => FingerprintMode::Auto,
            FingerprintChoice::Cached => FingerprintMode::Cached,
            FingerprintChoice::Off => FingerprintMode::Off,
        },
        layers,
    };
    Ok((opts, files, outputs))
}

/// The inputs with a stream's step files and step count.
fn stream_inputs(i: &InputArgs, s: &StreamArgs) -> Result<InputOptions> {
    let mut inputs = input_options(i);
    if s.stream.is_none() {
        return Ok(inputs);
    }
    if i.samples != 1 {
        return Err(bad_flag(
            "--stream counts steps, not samples: use --steps instead of --samples",
        ));
    }
    inputs.chunks = s
        .chunk
        .iter()
        .map(|c| crate::inputs::sequence::ChunkSpec::parse(c))
        .collect::<Result<_>>()?;
    inputs.sequence = s.sequence.clone();
    inputs.steps = s.steps.map(|n| n as usize);
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
    StreamSpec::parse(
        feeds,
        s.decision.clone(),
        s.divergence_sqnr.unwrap_or(crate::stream::spec::DEFAULT_DIVERGENCE_DB),
        s.teacher_forcing,
    )
    .map(Some)
}

/// The limits given as flags, checked.
fn thresholds(g: &GateArgs) -> Result<Thresholds> {
    if let Some(v) = g.min_sqnr.filter(|v| v.is_nan()) {
        return Err(bad_flag(format!("--min-sqnr {v} is not a number")));
    }
    if g.max_abs.is_some_and(|v| v.is_nan() || v < 0.0) {
        return Err(bad_flag("--max-abs must be a non-negative number"));
    }
    if g.min_top1.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
        return Err(bad_flag("--min-top1 must be a fraction between 0 and 1"));
    }
    if g.min_decision_agreement.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
        return Err(bad_flag("--min-decision-agreement must be a fraction between 0 and 1"));
    }
    if g.max_layer_sqnr_loss.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
        return Err(bad_flag("--max-layer-sqnr-loss must be a non-negative number of dB"));
    }
    Ok(Thresholds {
        min_sqnr_db: g.min_sqnr,
        max_abs: g.max_abs,
        min_top1: g.min_top1,
        require_bit_exact: g.require_bit_exact,
        max_fallback_nodes: g.max_fallback_nodes,
        max_partitions: g.max_partitions,
        fail_on_fallback: g.fail_on_fallback,
        max_layer_sqnr_loss_db: g.max_layer_sqnr_loss,
        min_decision_agreement: g.min_decision_agreement,
        max_divergence_step: g.max_divergence_step,
    })
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
fn saved_outputs(r: &ReportArgs, sharded: bool) -> Option<SavedOutputs> {
    match (
        &r.save_outputs,
        r.files.out.as_ref().filter(|o| sharded && !is_stdio(o)),
    ) {
        (Some(dir), out) => Some(SavedOutputs {
            dir: dir.clone(),
            flag: "--save-outputs".into(),
            recorded_as: Some(recorded_location(dir, out.map(PathBuf::as_path))),
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
                crate::console::detail(format!("policy file {}", found.display()));
                Policy::load(&found)
            }
            None => Ok(Policy::empty()),
        },
    }
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
        Pattern::parse(p).map_err(|e| bad_flag(format!("--node/--tensor: {e:#}")))?;
    }
    if let Some(list) = a.tap_list.as_ref().filter(|l| !l.is_file()) {
        return Err(bad_flag(format!("--tap-list {}: no such file", list.display())));
    }
    let default = if layers_command || !selection.is_all() {
        LayersChoice::All
    } else {
        LayersChoice::None
    };
    let mode = match a.layers.unwrap_or(default) {
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
            tolerance_lsb: a.tolerance,
            float_tolerance: a.float_tolerance,
            sqnr_loss_db: a.sqnr_loss_db,
            ..DivergenceRules::default()
        },
        baseline: None,
        isolate: !a.no_isolate,
        isolate_window: a.isolate_window as usize,
        tap_budget_bytes: a.tap_memory,
        top: a.top,
    }))
}

/// The audit a findings command (`runtime bisect`, `triage`) runs its targets in: the model, its
/// golden run or reference, the inputs and execution flags; every target may fail (a failure is
/// a finding), no baseline, policy, fingerprint, files or per-layer audit (the command sets
/// targets and layers itself).
pub fn findings_audit(
    model: &std::path::Path,
    reference: &ReferenceArgs,
    inputs: &InputArgs,
    exec: &ExecArgs,
) -> Result<CompareOptions> {
    Ok(CompareOptions {
        model: model.to_path_buf(),
        reference: reference.reference.clone(),
        golden: reference.golden_dir.clone(),
        allow_golden_mismatch: reference.allow_golden_mismatch,
        targets: Vec::new(),
        allow_failure: vec!["all".into()],
        no_baseline: true,
        inputs: input_options(inputs),
        class_axis: Vec::new(),
        policy: Policy::empty(),
        shard: None,
        exec: exec_options(exec)?,
        save_outputs: None,
        logs: None,
        repeat: 1,
        thread_probe: 4,
        allow_other_threads: false,
        fingerprint: FingerprintMode::Off,
        layers: None,
        stream: None,
    })
}

/// The audit every cell of `matrix` runs in: golden source, inputs, execution, the policy from
/// its file and flags (every target allowed to fail: a cell that does not run is a finding, and
/// the matrix's own exit code says whether a target has no variant).
pub fn matrix_audit(a: &super::args::MatrixArgs) -> Result<CompareOptions> {
    if a.gate.baseline_report.is_some() || a.gate.max_layer_sqnr_loss.is_some() {
        return Err(bad_flag(
            "matrix judges each cell against limits: --baseline-report and --max-layer-sqnr-loss do not apply",
        ));
    }
    let policy =
        policy_file(a.gate.config.as_deref(), a.gate.no_config)?.with_flags(&thresholds(&a.gate)?, &[], None)?;
    let mut audit = findings_audit(Path::new(""), &a.reference, &a.inputs, &a.exec)?;
    audit.policy = policy;
    audit.class_axis = a.class_axis.clone();
    Ok(audit)
}

/// The options of `runtime bisect`: the audit every release runs in (no baseline, no policy, no
/// files), the target without a release, and the per-layer audit with its defaults.
pub fn release_bisect_options(a: &ReleaseBisectArgs) -> Result<ReleaseBisectOptions> {
    let mut specs = crate::target::TargetSpec::parse_many(&a.target)?;
    if specs.len() != 1 || specs[0].release.is_some() {
        return Err(bad_flag(format!(
            "--target {}: name one target without a release (qnn:sm8650, cpu): --from and --to give the releases",
            a.target
        )));
    }
    if a.max_abs.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
        return Err(bad_flag("--max-abs must be a non-negative number"));
    }
    let audit = findings_audit(&a.model, &a.reference, &a.inputs, &a.exec)?;
    let layers = (!a.no_layers).then(LayerOptions::isolated_taps);
    Ok(ReleaseBisectOptions {
        audit,
        target: specs.remove(0),
        from: a.from.trim().to_string(),
        to: a.to.trim().to_string(),
        max_abs: a.max_abs,
        layers,
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
