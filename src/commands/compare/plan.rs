//! The Plan stage of `compare`: everything decided before anything runs. The targets (and this
//! shard's share of them) with their runtimes, the audited model, the golden run's source, the
//! inputs every target gets, the class axes, and the previous report of baseline mode, all
//! checked, so that a bad flag or file fails before any session starts.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Result;

use super::reference::{self, ReferencePlan};
use super::CompareOptions;
use crate::analyses::metrics::{ClassAxisFlag, ClassAxisPolicy};
use crate::data::inputs::{prepare, InputOptions, InputSet};
use crate::data::model::{load_model, LoadedModel, Signature};
use crate::data::target::TargetRole;
use crate::execution::exec::executor::DEFAULT_INTRA_OP_THREADS;
use crate::execution::exec::selection::{self as targets, Requested};
use crate::execution::exec::PlannedTarget;
use crate::execution::runtime::Provisioner;
use crate::foundation::error::{bad_flag, bad_golden, bad_input, bad_output, bad_report};
use crate::foundation::userfile::{InputFiles, Outputs};
use crate::report::compare::{InputTensorInfo, Report, ShardInfo};

/// What `compare` will do, decided and checked.
pub struct AuditPlan {
    pub model: LoadedModel,
    pub signature: Signature,
    /// The audited model's output names, in its order.
    pub output_names: Vec<String>,
    pub reference: ReferencePlan,
    pub inputs: InputSet,
    /// Every input tensor with the hash of its encoding (the report's `inputs.tensors`).
    pub input_info: Vec<InputTensorInfo>,
    /// Baseline mode: the previous report and how rules name it.
    pub previous: Option<(Report, String)>,
    pub classes: ClassAxisPolicy,
    /// This job's targets (all of them, or its shard's), with their runtimes.
    pub targets: Vec<PlannedTarget>,
    pub shard: Option<ShardInfo>,
    pub provisioner: Provisioner,
    /// `--stream`, checked against both models.
    pub stream: Option<crate::analyses::stream::StreamSpec>,
    pub notes: Vec<String>,
}

impl AuditPlan {
    /// Plans an audit. The order of the checks is the order of their cost: flags and target
    /// names first, then the model, the reference, the inputs, the previous report, and last the
    /// runtimes (which may be fetched).
    pub fn new(opts: &CompareOptions, outputs: &mut Outputs) -> Result<AuditPlan> {
        if let Some(saved) = &opts.kept.save_outputs {
            check_save_dir(&saved.dir, &saved.flag)?;
        }
        if let Some(logs) = &opts.kept.logs {
            check_logs_dir(&logs.dir, &logs.flag)?;
        }
        let mut notes = Vec::new();
        let (requested, shard) = requested_targets(opts, &mut notes)?;
        let provisioner = Provisioner::new(&opts.execution.exec.runtimes)?;
        let model = load_model(&opts.audited.model)?;
        // The model's external data are inputs too: no output may replace them.
        outputs.add_inputs(InputFiles::new().add_all(&model.external_data_paths()));
        let signature = Signature::of(&model)?;
        let output_names: Vec<String> = signature.outputs.iter().map(|o| o.name.clone()).collect();
        opts.measured.policy.check_outputs(&output_names)?;
        let reference = reference::plan(&model, &opts.audited.golden, &mut notes)?;
        if let ReferencePlan::Model { model: r, .. } = &reference {
            // So are the reference's.
            outputs.add_inputs(InputFiles::new().add_all(&r.external_data_paths()));
        }
        check_stream(opts, &signature, &reference)?;
        let mut input_opts = opts.audited.inputs.clone();
        if let Some(stream) = &opts.measured.stream {
            input_opts.zero_default = stream.state_inputs();
        }
        let mut inputs = audit_inputs(&reference, &signature, &input_opts)?;
        if let Some(stream) = &opts.measured.stream {
            // A fed-back state may grow (a KV cache): its open dimensions stay open.
            let open = growing_dims(&signature, &stream.state_inputs());
            inputs.free_dims.retain(|(name, _)| !open.contains(name));
            inputs.growing = stream.state_inputs();
        }
        let input_info = super::facts::input_tensor_info(&inputs)?;
        // The previous report of baseline mode is checked before anything runs.
        let previous = match &opts.measured.policy.baseline_report {
            Some((path, at)) => Some(previous_report(path, at, &input_info)?),
            None => None,
        };
        if let Some((report, label)) = &previous {
            let now = Threads {
                golden: reference.intra_op_threads(),
                targets: opts.execution.exec.threads.unwrap_or(DEFAULT_INTRA_OP_THREADS),
            };
            notes.extend(check_threads(report, label, now, opts.measured.allow_other_threads)?);
            notes.extend(check_hosts(report, label, &requested, opts.measured.allow_other_hosts)?);
        }
        notes.extend(crate::data::target::ignored_isa_cap());
        let classes = class_axes(&opts.measured.class_axis, &signature, &reference)?;
        let targets = targets::provision(requested, &provisioner)?;
        Ok(AuditPlan {
            model,
            signature,
            output_names,
            reference,
            inputs,
            input_info,
            previous,
            classes,
            targets,
            shard: shard.map(|mut info| {
                info.outputs_dir = opts.kept.save_outputs.as_ref().and_then(|s| s.recorded_as.clone());
                info
            }),
            provisioner,
            stream: opts.measured.stream.clone(),
            notes,
        })
    }
}

/// `--save-outputs` must name a new or empty directory: outputs of an earlier audit left beside
/// this one's would be mistaken for them. `flag` names where the directory came from.
pub fn check_save_dir(dir: &Path, flag: &str) -> Result<()> {
    crate::foundation::userfile::check_dir_destination(flag, dir)?;
    let occupied = dir.exists() && dir.read_dir().map(|mut d| d.next().is_some()).unwrap_or(true);
    if occupied {
        return Err(bad_output(format!(
            "{flag} {} is not empty (an earlier audit's outputs?); remove it or choose another",
            dir.display()
        )));
    }
    Ok(())
}

/// The file that marks a directory as one npu-audit keeps logs in: the logs of a later audit may
/// replace the logs there, and nothing else is ever replaced.
pub const LOGS_MARKER: &str = ".npu-audit-logs";

pub const LOGS_MARKER_TEXT: &str = "npu-audit keeps each target's runtime log here (<target>.log); a later audit with the same --logs directory replaces them.\n";

/// A logs directory must be new, empty, or one an earlier audit kept its logs in (it holds the
/// marker [`LOGS_MARKER`]): the logs replace only files the tool wrote there.
fn check_logs_dir(dir: &Path, flag: &str) -> Result<()> {
    crate::foundation::userfile::check_dir_destination(flag, dir)?;
    let occupied = dir.exists() && dir.read_dir().map(|mut d| d.next().is_some()).unwrap_or(true);
    if occupied && !dir.join(LOGS_MARKER).is_file() {
        return Err(bad_output(format!(
            "{flag} {} holds files npu-audit did not keep there; give a new or empty directory (or one an earlier --logs wrote)",
            dir.display()
        )));
    }
    Ok(())
}

/// The symbolic dimensions only the fed-back inputs have (a cache's length; not the batch they
/// share with the fresh inputs, which stays pinned).
fn growing_dims(signature: &Signature, fed: &[String]) -> Vec<String> {
    let names = |is_fed: bool| -> Vec<String> {
        signature
            .inputs
            .iter()
            .filter(|i| fed.contains(&i.name) == is_fed)
            .flat_map(|i| i.dims.iter().flatten())
            .filter_map(|d| match d {
                crate::data::model::Dim::Dynamic(Some(name)) => Some(name.clone()),
                _ => None,
            })
            .collect()
    };
    let fresh = names(false);
    names(true).into_iter().filter(|n| !fresh.contains(n)).collect()
}

/// A stream needs a reference model to run as a stream too (a stored golden run holds
/// independent samples), and no per-layer audit (its runs are of independent samples); its
/// feeds and decisions must exist in both models.
fn check_stream(opts: &CompareOptions, signature: &Signature, reference: &ReferencePlan) -> Result<()> {
    let Some(stream) = &opts.measured.stream else {
        return Ok(());
    };
    if opts.measured.layers.is_some() {
        return Err(bad_flag("--stream cannot be combined with --layers"));
    }
    let fed = stream.state_inputs();
    for spec in &opts.audited.inputs.chunks {
        if fed.contains(&spec.input) {
            return Err(bad_flag(format!(
                "--chunk {}={}: input '{}' is fed back from the second step on; give its first value with --input {}=FILE.npy",
                spec.input,
                spec.file.display(),
                spec.input,
                spec.input
            )));
        }
    }
    stream.check(signature, "the model")?;
    match reference {
        ReferencePlan::Model { signature: ref_sig, .. } => stream.check(ref_sig, "the reference model"),
        ReferencePlan::Stored { .. } => Err(bad_flag(
            "--stream needs a reference model to run as a stream too (--reference, or a QDQ model's derived reference), not --golden",
        )),
    }
}

/// The targets asked for (a typo there should not wait for the model to load), this shard's
/// share of them, and a note when none was named.
fn requested_targets(opts: &CompareOptions, notes: &mut Vec<String>) -> Result<(Vec<Requested>, Option<ShardInfo>)> {
    let e = &opts.execution;
    let all = targets::targets(
        e.targets.as_deref(),
        &e.allow_failure,
        e.baseline,
        &opts.measured.policy.releases,
    )?;
    notes.extend(all.iter().filter_map(|r| targets::release_note(&r.spec)));
    let (requested, shard) = match &e.shard {
        Some(s) => {
            let (mine, info) = s.deal(all);
            (mine, Some(info))
        }
        None => (all, None),
    };
    if e.targets.is_none() {
        let ids: Vec<&str> = requested
            .iter()
            .filter(|r| r.role == TargetRole::Target)
            .map(|r| r.spec.id.as_str())
            .collect();
        notes.push(format!(
            "no --target given: auditing every target this machine can run ({})",
            ids.join(", ")
        ));
    }
    Ok((requested, shard))
}

/// The class axis of each output: flags, else the Softmax axes of the audited model and of the
/// reference.
fn class_axes(flags: &[ClassAxisFlag], signature: &Signature, reference: &ReferencePlan) -> Result<ClassAxisPolicy> {
    let mut softmax: HashMap<String, i64> = signature.softmax_axes.clone();
    if let ReferencePlan::Model { signature: ref_sig, .. } = reference {
        for (k, v) in &ref_sig.softmax_axes {
            softmax.entry(k.clone()).or_insert(*v);
        }
    }
    ClassAxisPolicy::parse(flags, softmax, &signature.outputs)
}

/// Checks that the reference model accepts every sample fed to the audited model.
fn check_reference_accepts(reference: &Signature, inputs: &InputSet) -> Result<()> {
    for sample in &inputs.samples {
        for info in &reference.inputs {
            let Some(nt) = sample.iter().find(|nt| nt.name == info.name) else {
                return Err(bad_input(format!(
                    "the reference model takes an input '{}' that the audited model does not have (audited inputs: {})",
                    info.name,
                    sample.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
                )));
            };
            crate::data::inputs::check_tensor(info, &nt.tensor, None)
                .map_err(|e| bad_input(format!("the reference model does not accept the inputs: {e:#}")))?;
        }
    }
    Ok(())
}

/// The inputs of an audit: a golden run's, or loaded/generated and checked against both models.
fn audit_inputs(reference: &ReferencePlan, signature: &Signature, opts: &InputOptions) -> Result<InputSet> {
    match reference {
        ReferencePlan::Stored { golden, .. } => {
            if opts.any_given() {
                return Err(bad_flag(
                    "--golden supplies the inputs: drop --inputs, --input, --gen, --seed, --samples and --input-shape",
                ));
            }
            golden
                .inputs(signature)
                .map_err(|e| bad_golden(format!("the golden run's inputs do not fit the model: {e:#}")))
        }
        ReferencePlan::Model { signature: ref_sig, .. } => {
            let inputs = prepare(signature, opts)?;
            check_reference_accepts(ref_sig, &inputs)?;
            Ok(inputs)
        }
    }
}

/// Reads the previous report of baseline mode and checks it was made on the same inputs: a
/// regression measured on other data would mean nothing.
/// The intra-op threads an audit runs its sessions with.
#[derive(Debug, Clone, Copy)]
struct Threads {
    golden: usize,
    targets: usize,
}

/// A previous report made with other thread counts may differ for that reason alone: refused,
/// unless the user accepts it (then a note says so). Reports that do not record their threads
/// (older ones) count as other.
fn check_threads(previous: &Report, label: &str, now: Threads, allow: bool) -> Result<Vec<String>> {
    let mut differences = Vec::new();
    if previous.reference.intra_op_threads != Some(now.golden) {
        differences.push(format!(
            "golden run {} (now {})",
            threads_text(previous.reference.intra_op_threads),
            now.golden
        ));
    }
    for t in previous
        .targets
        .iter()
        .filter(|t| t.status == crate::report::RunStatus::Ok)
    {
        if t.intra_op_threads != Some(now.targets) {
            differences.push(format!(
                "{} {} (now {})",
                t.id,
                threads_text(t.intra_op_threads),
                now.targets
            ));
        }
    }
    if differences.is_empty() {
        return Ok(Vec::new());
    }
    let what = format!(
        "the previous report {label} was made with other intra-op thread counts: {}",
        differences.join(", ")
    );
    if allow {
        Ok(vec![format!(
            "{what}; accepted (--allow-other-threads), so regressions may be the thread count's"
        )])
    } else {
        Err(bad_report(format!(
            "{what}; figures can differ for that reason alone: run with --threads to match, or pass --allow-other-threads"
        )))
    }
}

/// A previous report made on a host of another kernel class is refused for the targets whose
/// figures depend on the host (a regression there may be the host's), unless the user accepts it
/// (then a note says so). A report that does not record its host is said, not refused.
fn check_hosts(previous: &Report, label: &str, now: &[Requested], allow: bool) -> Result<Vec<String>> {
    let here = crate::foundation::host::this_host();
    if previous.host.is_none() {
        return Ok(vec![format!(
            "the previous report {label} does not record its host: figures of targets that depend on the host (OpenVINO, the CPU EP) may differ for that reason"
        )]);
    }
    let conflicts: Vec<String> = previous
        .targets
        .iter()
        .filter(|t| t.status == crate::report::RunStatus::Ok)
        .filter_map(|t| {
            let then = t.host.as_ref()?;
            let now = now.iter().find(|r| r.spec.id == t.id)?;
            crate::report::facts::TargetHost::from(now.spec.host_dependence(&here)).conflict(&t.id, then)
        })
        .collect();
    if conflicts.is_empty() {
        return Ok(Vec::new());
    }
    let what = format!(
        "the previous report {label} was made on another host: {}",
        conflicts.join("; ")
    );
    if allow {
        Ok(vec![format!(
            "{what}; accepted (--allow-other-hosts), so regressions of these targets may be the host's"
        )])
    } else {
        Err(bad_report(format!(
            "{what}: compare with a report made on a host of the same class, cap OpenVINO with isa=<class>, or pass --allow-other-hosts"
        )))
    }
}

fn threads_text(t: Option<usize>) -> String {
    t.map_or("unrecorded".into(), |n| n.to_string())
}

fn previous_report(path: &Path, at: &str, inputs: &[InputTensorInfo]) -> Result<(Report, String)> {
    let report = crate::report::json::read(path).map_err(|e| bad_report(format!("{at}: previous report {e:#}")))?;
    let label = path.display().to_string();
    let key = |t: &InputTensorInfo| (t.sample, t.name.clone(), t.sha256.clone());
    let now: Vec<_> = inputs.iter().map(key).collect();
    let then: Vec<_> = report.inputs.tensors.iter().map(key).collect();
    if now != then {
        let what = match now.iter().zip(&then).find(|(a, b)| a != b) {
            Some((a, _)) => format!("sample {} input '{}' differs", a.0, a.1),
            None => format!("{} input tensors now, {} then", now.len(), then.len()),
        };
        return Err(bad_report(format!(
            "{at}: the previous report {label} was made on other inputs ({what}); regressions need the same inputs (use a stored golden run)"
        )));
    }
    Ok((report, label))
}
