//! One verdict per report: its outputs against the golden run (the figures `compare` reports,
//! from the same kernels) and against every candidate run on the same inputs, bit for bit and in
//! quantization steps; then the first explanation that holds, in this order: reproduced by its
//! chipset's simulation, identical to the CPU EP (silent fallback), identical to another
//! chipset's simulation, within the rounding tolerance of its chipset's simulation, garbage,
//! unidentified chipset, its chipset's simulation failing here, unexplained (with the nearest
//! candidate).

use std::path::PathBuf;

use super::reproduce::{input_key, release_target, report_target_ids, Group};
use crate::analyses::metrics::{Agreement, ErrorStats};
use crate::data::device::{identify_device, DeviceReport, Identity, IdentityStatus, LogFindings};
use crate::data::tensor::Tensor;
use crate::execution::runtime::catalog::Build;
use crate::report::common::Num;
use crate::report::compare::CodeDiffs;
use crate::report::triage::{
    CandidateDistance, CandidateRun, OutputFigures, ReportEntry, Thresholds, Verdict, VerdictKind,
};
use crate::report::RunStatus;

impl CandidateDistance {
    fn identical(&self) -> bool {
        self.differing == Some(0) && self.elements > 0
    }
}

fn figures(name: &str, device: &[&Tensor], golden: &[&Tensor]) -> OutputFigures {
    let mut stats = ErrorStats::default();
    for (d, g) in device.iter().zip(golden) {
        if d.len() == g.len() {
            if stats.elements == 0 {
                stats = ErrorStats::new(d.dtype() == g.dtype(), d.dtype().is_float());
            }
            stats.update(&d.data, &g.data);
        }
    }
    OutputFigures {
        output: name.to_string(),
        elements: stats.elements,
        sqnr_db: Num(stats.sqnr_db()),
        cosine: Num(stats.cosine()),
        max_abs: Num(stats.max_abs()),
        rmse: Num(stats.rmse()),
        nan_count: stats.nan_count,
        inf_count: stats.inf_count,
    }
}

/// Output `k` of every sample of a run.
fn column<'a>(samples: &'a [Vec<(String, Tensor)>], name: &str) -> Vec<&'a Tensor> {
    samples
        .iter()
        .filter_map(|s| s.iter().find(|(n, _)| n == name).map(|(_, t)| t))
        .collect()
}

fn distance(
    target: &str,
    report: &DeviceReport,
    run: &[Vec<(String, Tensor)>],
    steps: &[Option<f64>],
) -> CandidateDistance {
    let all_steps = steps.iter().all(Option::is_some);
    let mut total = CandidateDistance {
        target: target.to_string(),
        elements: 0,
        differing: Some(0),
        max_abs: Num(0.0),
        steps: all_steps.then(CodeDiffs::default),
    };
    for (s, sample) in report.outputs.iter().enumerate() {
        for (k, (name, dev)) in sample.iter().enumerate() {
            let Some(theirs) = run
                .get(s)
                .and_then(|r| r.iter().find(|(n, _)| n == name))
                .map(|(_, t)| t)
            else {
                total.differing = None;
                continue;
            };
            if theirs.shape != dev.shape {
                total.differing = None;
                continue;
            }
            let mut a = Agreement::with_lsb(steps.get(k).copied().flatten());
            a.update(&dev.data, &theirs.data);
            add(&mut total, &a);
        }
    }
    total
}

fn add(total: &mut CandidateDistance, a: &Agreement) {
    total.elements += a.elements;
    total.differing = match (total.differing, a.differing) {
        (Some(x), Some(y)) => Some(x + y),
        _ => None,
    };
    total.max_abs = Num(total.max_abs.0.max(a.max_abs));
    if let (Some(t), Some(c)) = (total.steps.as_mut(), a.codes.as_ref()) {
        t.lsb = c.lsb;
        t.off_by_one += c.off_by_one;
        t.off_by_two += c.off_by_two;
        t.off_by_more += c.off_by_more;
        t.max_steps = t.max_steps.max(c.max_steps);
    }
}

/// NaN, infinite, constant and all-zero outputs.
fn garbage(report: &DeviceReport) -> Vec<String> {
    let mut out = Vec::new();
    let names: Vec<&String> = report
        .outputs
        .first()
        .map(|s| s.iter().map(|(n, _)| n).collect())
        .unwrap_or_default();
    for name in names {
        let col = column(&report.outputs, name);
        let (nan, inf) = col.iter().fold((0, 0), |(n, i), t| {
            let (a, b) = t.data.nonfinite_counts();
            (n + a, i + b)
        });
        if nan + inf > 0 {
            out.push(format!("{name}: {nan} NaN and {inf} infinite values"));
            continue;
        }
        let values: Vec<f64> = col
            .iter()
            .flat_map(|t| (0..t.len()).map(|i| t.data.get_f64(i)))
            .collect();
        if values.len() > 1 && values.iter().all(|v| *v == 0.0) {
            out.push(format!("{name}: every value is zero"));
        } else if values.len() > 1 && values.iter().all(|v| v.to_bits() == values[0].to_bits()) {
            out.push(format!("{name}: every value is {}", values[0]));
        }
    }
    out
}

/// What the report's logs say, checked against its `device.json` and the catalogue's QNN SDK of
/// the release it names; `None` when it sent no logs.
fn read_logs(report: &DeviceReport) -> Option<LogFindings> {
    if report.logs.is_empty() {
        return None;
    }
    let mut f = LogFindings::parse(&report.logs);
    let sdk = report
        .device
        .qnn_release
        .as_deref()
        .and_then(|r| Build::release("qnn", r.trim()))
        .and_then(|b| b.qnn_sdk.as_deref());
    crate::data::device::logs::cross_check(&mut f, &report.device, sdk);
    Some(f)
}

/// `; the log says: QNN took 0 of 212 nodes (...)` when the logs explain a fallback.
fn log_says(logs: Option<&LogFindings>) -> String {
    logs.and_then(LogFindings::reason)
        .map_or(String::new(), |r| format!("; the log says: {r}"))
}

fn steps_text(d: &CandidateDistance) -> String {
    match &d.steps {
        Some(c) => format!(
            "{} of {} elements differ (±1: {}, ±2: {}, more: {}; max {} steps)",
            d.differing.unwrap_or(0),
            d.elements,
            c.off_by_one,
            c.off_by_two,
            c.off_by_more,
            c.max_steps
        ),
        None => format!(
            "{} of {} elements differ, max |difference| {}",
            d.differing.map_or("?".into(), |n| n.to_string()),
            d.elements,
            d.max_abs.0
        ),
    }
}

/// The candidate closest to the report: fewest differing elements, then smallest largest
/// difference.
pub(super) fn nearest(cands: &[CandidateDistance]) -> Option<&CandidateDistance> {
    cands.iter().filter(|c| c.differing.is_some()).min_by(|a, b| {
        (a.differing, a.max_abs.0)
            .partial_cmp(&(b.differing, b.max_abs.0))
            .unwrap_or(std::cmp::Ordering::Equal)
    })
}

fn verdict(v: VerdictKind, sentence: String) -> Verdict {
    Verdict { kind: v, sentence }
}

/// The ids that simulate the report's own chipset: its release first, then the default.
fn own_ids(report: &DeviceReport, identity: &Identity) -> Vec<String> {
    let mut ids: Vec<String> = release_target(report).into_iter().map(|t| t.id).collect();
    if let Some(sm) = &identity.chipset {
        let default = format!("qnn:{sm}");
        if !ids.contains(&default) {
            ids.push(default);
        }
    }
    ids
}

/// A CPU EP candidate: the x86 build (`cpu`, `cpu:noopt`, ...) or the phone's own ARM64 CPU EP,
/// emulated (`cpu-arm64:<core>`).
pub(super) fn is_cpu(id: &str) -> bool {
    id == "cpu" || id.starts_with("cpu:") || id.starts_with("cpu@") || id.starts_with("cpu-arm64")
}

/// Which CPU EPs the report was compared with, for a verdict that none of them explains.
fn cpus_tried(cands: &[CandidateDistance]) -> String {
    let ids: Vec<&str> = cands
        .iter()
        .filter(|c| is_cpu(&c.target) && c.differing.is_some())
        .map(|c| c.target.as_str())
        .collect();
    match ids.as_slice() {
        [] => "no CPU EP ran".into(),
        _ => format!("CPU EPs tried: {}", ids.join(", ")),
    }
}

/// Identical to a CPU EP: the x86 build, or the phone's own ARM64 build as emulated here.
/// `also` names the other CPU EPs that give the same bits: these inputs do not tell them apart.
fn cpu_fallback(c: &CandidateDistance, also: &[&str], logs: Option<&LogFindings>) -> Verdict {
    let core = c.target.strip_prefix("cpu-arm64:").and_then(|rest| {
        let id = rest.split(['@', ',']).next().unwrap_or(rest);
        crate::data::target::arm_core(id)
    });
    let which = match core {
        Some(core) => format!(
            ", on the phone's own ARM64 CPU EP as emulated here: {} kernels",
            core.isa_class
        ),
        None => String::new(),
    };
    let also = match also {
        [] => String::new(),
        _ => format!(" (as are {}: these inputs do not tell them apart)", also.join(", ")),
    };
    verdict(
        VerdictKind::CpuFallback,
        format!(
            "identical to {}{also}: the NPU did not run this model on that device (silent CPU fallback{which}){}",
            c.target,
            log_says(logs)
        ),
    )
}

/// The report's own chipset cannot run the model here: the one run that could reproduce it.
fn own_chipset_failed(run: &CandidateRun, near: &str) -> Verdict {
    let why = run
        .error
        .as_deref()
        .and_then(|e| e.lines().next())
        .unwrap_or("no error text");
    verdict(VerdictKind::OwnChipsetFailed, format!(
        "its chipset's simulation does not run this model here ({} {}: {why}), so the device cannot be checked against it; {near}; an older or newer QNN release may compile it (`-t {}@all`)",
        run.target, run.status, run.target.split('@').next().unwrap_or(&run.target)
    ))
}

/// The first explanation that holds (see the module's doc).
fn decide(
    report: &DeviceReport,
    identity: &Identity,
    cands: &[CandidateDistance],
    failed: &[&CandidateRun],
    garbage: &[String],
    logs: Option<&LogFindings>,
    t: &Thresholds,
) -> Verdict {
    let own = own_ids(report, identity);
    let find = |id: &str| cands.iter().find(|c| c.target == id);
    if let Some(c) = own.iter().filter_map(|id| find(id)).find(|c| c.identical()) {
        let also_cpu = cands.iter().any(|o| is_cpu(&o.target) && o.identical());
        let cpu_note = if also_cpu {
            " (the CPU EP gives the same bits on these inputs)"
        } else {
            ""
        };
        return verdict(VerdictKind::Reproduced, format!(
            "reproduced bit for bit by {}{cpu_note}: deterministic chipset behaviour, auditable here (`npu-audit layers -t {}` shows where it drifts)",
            c.target, c.target
        ));
    }
    let identical_cpus: Vec<&CandidateDistance> = cands.iter().filter(|c| is_cpu(&c.target) && c.identical()).collect();
    if let Some((c, rest)) = identical_cpus.split_first() {
        let also: Vec<&str> = rest.iter().map(|o| o.target.as_str()).collect();
        return cpu_fallback(c, &also, logs);
    }
    if let Some(c) = cands
        .iter()
        .find(|c| c.target.starts_with("qnn:") && !own.contains(&c.target) && c.identical())
    {
        return verdict(VerdictKind::OtherChipset, format!(
            "identical to {}'s simulation, not the reported chipset's: the chipset was misreported, or the two share a kernel",
            c.target
        ));
    }
    let rounding = own
        .iter()
        .filter_map(|id| find(id))
        .find(|c| c.steps.as_ref().is_some_and(|s| s.max_steps <= t.rounding_steps) && c.differing.is_some());
    if let Some(c) = rounding {
        return verdict(VerdictKind::Rounding, format!(
            "within {} quantization steps of {}'s simulation: {}; the device differs from the simulator only in rounding",
            t.rounding_steps, c.target, steps_text(c)
        ));
    }
    if !garbage.is_empty() {
        return verdict(VerdictKind::Garbage, format!("garbage outputs: {}", garbage.join("; ")));
    }
    let near = nearest(cands).map_or("no candidate ran".into(), |c| {
        format!("nearest {}: {}", c.target, steps_text(c))
    });
    if identity.status != IdentityStatus::Identified {
        return verdict(VerdictKind::Unidentified, format!("{}; {near}", identity.sentence));
    }
    // Only when no simulation of its chipset ran: one that ran and differs leaves it unexplained.
    let own_ran = own.iter().any(|id| find(id).is_some());
    if let Some(run) = own
        .iter()
        .find_map(|id| failed.iter().find(|r| r.target == *id))
        .filter(|_| !own_ran)
    {
        return own_chipset_failed(run, &near);
    }
    // A QNN error or a cut graph in the log is a lead the figures alone do not give.
    let lead = log_says(logs.filter(|l| l.shows_problem()));
    verdict(
        VerdictKind::Unexplained,
        format!(
            "nothing here reproduces it ({near}; {}): device-, driver- or firmware-specific{lead}",
            cpus_tried(cands)
        ),
    )
}

/// Why a report is `malformed`, naming the report as every error about one does.
fn about(path: &std::path::Path, error: String) -> String {
    let prefix = format!("device report {}: ", path.display());
    if error.starts_with(&prefix) {
        error
    } else {
        prefix + &error
    }
}

fn malformed(path: &std::path::Path, error: String) -> ReportEntry {
    let error = if error.is_empty() { error } else { about(path, error) };
    ReportEntry {
        path: path.display().to_string(),
        format: None,
        content_sha256: None,
        device: None,
        identity: None,
        inputs: None,
        samples: 0,
        metrics: Vec::new(),
        sqnr_db: None,
        cpu_sqnr_db: None,
        candidates: Vec::new(),
        garbage: Vec::new(),
        log_evidence: Vec::new(),
        logs: None,
        verdict: verdict(VerdictKind::Malformed, error),
        output_files: Vec::new(),
        duplicate_of: None,
    }
}

/// The worst SQNR over a run's outputs against the golden run.
fn worst_sqnr(run: &[Vec<(String, Tensor)>], golden: &[Vec<(String, Tensor)>], names: &[String]) -> Option<Num> {
    names
        .iter()
        .map(|n| figures(n, &column(run, n), &column(golden, n)).sqnr_db.0)
        .min_by(|a, b| a.total_cmp(b))
        .map(Num)
}

pub(super) fn entry(
    report: &DeviceReport,
    group: &Group,
    steps: &[Option<f64>],
    t: &Thresholds,
    wanted: &[String],
) -> ReportEntry {
    let identity = identify_device(&report.device);
    let mut e = malformed(&report.path, String::new());
    e.format = Some(report.format.into());
    e.content_sha256 = Some(report.content_sha256.clone());
    e.device = Some(report.device.clone().into());
    e.output_files = report.output_files.iter().cloned().map(Into::into).collect();
    e.inputs = Some(group.key.clone());
    e.samples = report.outputs.len();
    e.garbage = garbage(report);
    let logs = read_logs(report);
    e.logs = logs.clone().map(Into::into);
    e.log_evidence = logs.as_ref().map_or_else(Vec::new, |l| l.evidence.clone());
    e.identity = Some(identity.clone().into());
    let golden = group.tensors.get("golden");
    e.verdict = match (&group.error, golden) {
        (Some(err), _) => verdict(
            VerdictKind::NotReproduced,
            format!("the local runs on these inputs failed: {err}"),
        ),
        (None, None) => verdict(VerdictKind::NotReproduced, "the golden run did not run".into()),
        (None, Some(g)) if g.len() != report.outputs.len() => verdict(
            VerdictKind::Malformed,
            about(
                &report.path,
                format!(
                    "{} samples of outputs for {} samples of inputs",
                    report.outputs.len(),
                    g.len()
                ),
            ),
        ),
        (None, Some(g)) => {
            let names: Vec<String> = report.outputs[0].iter().map(|(n, _)| n.clone()).collect();
            e.metrics = names
                .iter()
                .map(|n| figures(n, &column(&report.outputs, n), &column(g, n)))
                .collect();
            e.sqnr_db = e
                .metrics
                .iter()
                .map(|m| m.sqnr_db.0)
                .min_by(|a, b| a.total_cmp(b))
                .map(Num);
            e.cpu_sqnr_db = group.tensors.get("cpu:noopt").and_then(|c| worst_sqnr(c, g, &names));
            // In the order asked: of two identical candidates, the verdict names the first (for
            // the phone's own CPU, the class its chipset's phones show).
            e.candidates = wanted
                .iter()
                .filter_map(|id| group.tensors.get(id).map(|run| distance(id, report, run, steps)))
                .collect();
            let failed: Vec<&CandidateRun> = group
                .runs
                .iter()
                // Refused or crashed: a timeout or a missing runtime says nothing of the model.
                .filter(|r| matches!(r.status, RunStatus::Failed | RunStatus::Crashed) && wanted.contains(&r.target))
                .collect();
            decide(report, &identity, &e.candidates, &failed, &e.garbage, logs.as_ref(), t)
        }
    };
    e
}

/// Every report's entry, in the order given.
pub fn entries(
    parsed: &[&(PathBuf, Result<DeviceReport, String>)],
    groups: &[Group],
    steps: &[Option<f64>],
    t: &Thresholds,
    candidates: &[crate::data::target::TargetList],
) -> Vec<ReportEntry> {
    parsed
        .iter()
        .map(|(path, r)| match r {
            Err(e) => malformed(path, e.clone()),
            Ok(report) => {
                let key = input_key(report);
                let wanted = report_target_ids(candidates, report);
                match groups.iter().find(|g| g.key == key) {
                    Some(g) => entry(report, g, steps, t, &wanted),
                    None => malformed(path, "no local run for its inputs".into()),
                }
            }
        })
        .collect()
}

/// Marks reports whose contents equal an earlier report's.
pub fn mark_duplicates(entries: &mut [ReportEntry]) {
    for i in 1..entries.len() {
        let Some(hash) = entries[i].content_sha256.clone() else {
            continue;
        };
        if let Some(first) = entries[..i].iter().find(|e| e.content_sha256.as_ref() == Some(&hash)) {
            entries[i].duplicate_of = Some(first.path.clone());
        }
    }
}
