//! The Report stage of `compare`: each target's row, built once from everything the analyses
//! found about it, and the report, built once from the plan, the analysis and the judgement.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use anyhow::Result;

use super::analyze::Analysis;
use super::execute::Executed;
use super::plan::AuditPlan;
use crate::execution::exec::selection::BASELINE_ID;
use crate::execution::exec::PlannedTarget;
use crate::foundation::hash::sha256_file;
use crate::judge::gate::tolerance::tolerances;
use crate::judge::gate::Judgement;

use super::facts::{target_runtime_info, timing};
use crate::data::model::{LoadedModel, Signature};
use crate::execution::runtime::Runtime;
use crate::report::common::{Num, ReportKind, ToolInfo};
use crate::report::compare::{
    AuditTimings, ChipsetInfo, InputsInfo, ModelInfo, PhaseTiming, Report, ShardInfo, StreamInfo, TargetReport,
    WorkerTiming, SCHEMA_VERSION,
};
use crate::report::facts::TensorSummary;
use crate::report::RunStatus;

/// The report's description of the audited model.
pub fn model_info(model: &LoadedModel, signature: &Signature) -> Result<ModelInfo> {
    let producer = format!(
        "{} {}",
        model.proto.producer_name.clone().unwrap_or_default(),
        model.proto.producer_version.clone().unwrap_or_default()
    );
    Ok(ModelInfo {
        path: model.path.display().to_string(),
        sha256: model.sha256.clone(),
        size_bytes: model.size,
        external_data: model.external_data_hashes()?.into_iter().map(Into::into).collect(),
        ir_version: model.proto.ir_version.unwrap_or(0),
        opset: model.opset(),
        producer: producer.trim().to_string(),
        inputs: signature.inputs.iter().map(TensorSummary::from).collect(),
        outputs: signature.outputs.iter().map(TensorSummary::from).collect(),
    })
}

/// Each planned target's row: how it ended, its runtime and timing, its metrics, placement,
/// fingerprint, drift reading and layers. `logs` holds the kept log of each target id.
pub fn target_rows(
    targets: &[PlannedTarget],
    analysis: &mut Analysis<'_>,
    logs: &HashMap<String, PathBuf>,
) -> Vec<TargetReport> {
    let mut hashes: HashMap<PathBuf, Option<String>> = HashMap::new();
    let mut hash = |rt: &Runtime| -> Option<String> {
        if rt.sha256.is_some() {
            return rt.sha256.clone();
        }
        hashes
            .entry(rt.library.clone())
            .or_insert_with(|| sha256_file(&rt.library).ok())
            .clone()
    };
    let mut layers = analysis.layers.as_mut().map(|l| std::mem::take(&mut l.targets));
    let mut rows = Vec::with_capacity(targets.len());
    for (i, t) in targets.iter().enumerate() {
        let end = &analysis.ends[i];
        let outputs = match end.status {
            RunStatus::Ok => analysis.comparison.metrics.remove(&t.spec.id).unwrap_or_default(),
            _ => vec![],
        };
        let drift = std::mem::take(&mut analysis.drift[i]);
        let layer = layers.as_mut().and_then(|l| l.get_mut(i)).and_then(Option::take);
        let (layers, layer_summary) = match layer {
            Some((l, s)) => (l, Some(s)),
            None => (vec![], None),
        };
        rows.push(TargetReport {
            id: t.spec.id.clone(),
            ep: t.spec.backend.ep_name().into(),
            role: t.role.into(),
            host: Some(t.spec.host_dependence(&crate::foundation::host::this_host()).into()),
            required: t.required,
            chipset: t.spec.chipset().map(chipset_info),
            options: target_options(t),
            runtime: t
                .runtime
                .as_ref()
                .ok()
                .map(|rt| target_runtime_info(rt, end.outcome, &mut hash)),
            intra_op_threads: end
                .outcome
                .and_then(|o| o.result.as_ref())
                .and_then(|r| r.intra_threads),
            status: end.status,
            error: end.error.clone(),
            failed_at: end
                .outcome
                .and_then(|o| o.result.as_ref())
                .filter(|r| !r.ok)
                .map(|r| r.phase.into()),
            timing: end.outcome.and_then(timing),
            placement: end.placement.clone(),
            log: logs.get(&t.spec.id).map(|p| p.display().to_string()),
            fingerprint: drift.fingerprint,
            determinism: drift.determinism,
            drift_explanations: drift.explanations,
            outputs,
            layers,
            layer_summary,
            stream: analysis.streams.get_mut(i).and_then(Option::take),
        });
    }
    rows
}

fn chipset_info(c: crate::data::target::chipset::Chipset) -> ChipsetInfo {
    ChipsetInfo {
        sm: c.sm.to_uppercase(),
        name: format!("Snapdragon {}", c.marketing),
        soc_model: c.soc_model,
        htp_arch: c.htp_arch,
    }
}

/// A target's EP options and session entries, as the report lists them.
fn target_options(t: &PlannedTarget) -> BTreeMap<String, String> {
    let mut options: BTreeMap<String, String> = t.spec.ep_options().into_iter().collect();
    options.extend(
        t.spec
            .options
            .iter()
            .filter(|(k, _)| k.starts_with("session.") || k == crate::data::target::ISA_OPTION)
            .cloned(),
    );
    options
}

/// The report, built once.
pub fn report(
    plan: AuditPlan,
    executed: &Executed,
    analysis: Analysis<'_>,
    targets: Vec<TargetReport>,
    judgement: Judgement,
    output_files: std::collections::BTreeMap<String, String>,
) -> Result<Report> {
    let tolerances = tolerances(&plan.output_names, &targets);
    let stream = plan
        .stream
        .as_ref()
        .map(|s| stream_info(s, plan.inputs.samples.len(), &targets));
    let mut notes = plan.notes;
    notes.extend(executed.notes.iter().cloned());
    notes.extend(analysis.notes);
    notes.extend(judgement.notes);
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        kind: ReportKind::Compare,
        tool: ToolInfo::this(),
        host: Some(crate::foundation::host::this_host().into()),
        model: model_info(&plan.model, &plan.signature)?,
        reference: analysis.reference_info,
        inputs: InputsInfo {
            provenance: plan.inputs.provenance.clone().into(),
            tensors: plan.input_info,
        },
        baseline: analysis.has_baseline.then(|| BASELINE_ID.to_string()),
        targets,
        agreement: analysis.comparison.agreement,
        bit_exact_groups: analysis.comparison.groups,
        tolerances,
        gate: judgement.gate,
        metric_definitions: crate::report::definitions(),
        layer_audit: analysis.layers.map(|l| l.info),
        stream,
        notes,
        shard: plan.shard.map(|s| ShardInfo { output_files, ..s }),
        merged_from: Vec::new(),
        timings: crate::foundation::timings::enabled().then(|| audit_timings(&crate::foundation::timings::snapshot())),
        exit_code: judgement.exit_code,
    })
}

/// How the stream ran, for the report: its feeds, steps, decisions (as the targets' series name
/// them) and divergence threshold.
fn stream_info(s: &crate::analyses::stream::StreamSpec, steps: usize, targets: &[TargetReport]) -> StreamInfo {
    let decisions = targets
        .iter()
        .find_map(|t| t.stream.as_ref())
        .map(|st| st.free.decisions.iter().map(|d| d.decision.clone()).collect())
        .unwrap_or_else(|| s.decisions.iter().map(ToString::to_string).collect());
    StreamInfo {
        steps,
        feedback: s
            .feedback
            .iter()
            .map(|f| format!("{}->{}", f.output, f.input))
            .collect(),
        state_outputs: s.state_outputs().map(String::from).collect(),
        decisions,
        divergence_sqnr_db: Num(s.divergence_db),
        teacher_forcing: s.teacher_forcing,
    }
}

/// The report's view of what `--timings` recorded so far.
pub fn audit_timings(t: &crate::foundation::timings::Totals) -> AuditTimings {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let wall_ms = ms(t.wall());
    let mut phases: Vec<PhaseTiming> = t
        .parent
        .iter()
        .map(|((stage, phase), p)| PhaseTiming {
            stage: stage.to_string(),
            phase: (*phase).into(),
            ms: ms(p.elapsed),
            count: p.count,
        })
        .collect();
    // What ran outside every stage (parsing flags, assembling the report) closes the account.
    let staged: f64 = phases.iter().map(|p| p.ms).sum();
    phases.push(PhaseTiming {
        stage: "audit".into(),
        phase: crate::foundation::timings::Phase::Other.into(),
        ms: (wall_ms - staged).max(0.0),
        count: 1,
    });
    AuditTimings {
        wall_ms,
        phases,
        workers: t
            .workers
            .iter()
            .map(|((stage, target), w)| {
                let x = &w.time;
                let inside = x.load + x.register + x.session_create + x.run + x.io;
                WorkerTiming {
                    stage: stage.to_string(),
                    target: target.clone(),
                    sessions: w.sessions,
                    load_ms: x.load,
                    register_ms: x.register,
                    session_create_ms: x.session_create,
                    run_ms: x.run,
                    io_ms: x.io,
                    overhead_ms: (x.wall - inside).max(0.0),
                    wall_ms: x.wall,
                    peak_rss_mb: x.peak_rss_mb,
                }
            })
            .collect(),
        parent_peak_rss_mb: crate::foundation::timings::peak_rss_mb(),
    }
}
