//! `npu-audit merge`: joins the reports of `compare --shard i/n` jobs into the report one job
//! running every target would have written, and one verdict. Per-target figures come from the
//! shard that ran the target; target pairs that ran in different shards are compared from the
//! outputs each shard saved beside its report.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::analyses::metrics::{bit_exact_groups, compare, ClassAxisPolicy, RunOutputs};
use crate::data::tensor::read_npz_bytes;
use crate::execution::exec::executor::sanitize;
use crate::execution::exec::OutputFile;
use crate::foundation::error::{bad_flag, bad_report};
use crate::judge::gate::tolerance::tolerances;
use crate::report::compare::{AgreementEntry, BitExactGroups, Report, TargetReport};
use crate::report::facts::TargetRole;
use crate::report::gate::{GateReport, Rule, Verdict};
use crate::report::RunStatus;

/// One shard report, where it was read from, and where its saved outputs are.
#[derive(Debug, Clone)]
pub struct Part {
    path: PathBuf,
    report: Report,
    /// The directory of its saved outputs, when it has one here.
    outputs: Option<PathBuf>,
}

/// `--outputs REPORT=DIR`: where a shard's saved outputs are when they are not beside its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOutputs {
    pub report: PathBuf,
    pub dir: PathBuf,
}

impl ShardOutputs {
    /// Parses `REPORT=DIR`.
    pub fn parse(text: &str) -> Result<ShardOutputs> {
        let (report, dir) = text
            .split_once('=')
            .filter(|(r, d)| !r.is_empty() && !d.is_empty())
            .ok_or_else(|| bad_flag(format!("--outputs {text}: expected REPORT=DIR")))?;
        Ok(ShardOutputs {
            report: report.into(),
            dir: dir.into(),
        })
    }
}

/// What `merge` joins: the shard reports, each read and checked to be one, with the directory of
/// its saved outputs.
#[derive(Debug, Clone)]
pub struct MergeOptions {
    pub parts: Vec<Part>,
    /// Accept shards whose sessions ran with other intra-op thread counts.
    pub allow_other_threads: bool,
    /// Accept shards made on hosts of other instruction-set classes.
    pub allow_other_hosts: bool,
}

impl MergeOptions {
    /// Parses the shard reports read from `read` (each path with its bytes, read once: a pipe
    /// cannot be read twice); `overrides` (`--outputs`) say where a shard's saved outputs are when
    /// not where its report records them.
    pub fn new(
        read: &[(PathBuf, Vec<u8>)],
        overrides: &[ShardOutputs],
        allow_other_threads: bool,
    ) -> Result<MergeOptions> {
        let paths: Vec<PathBuf> = read.iter().map(|(p, _)| p.clone()).collect();
        check_overrides(overrides, &paths)?;
        let parts = read
            .iter()
            .map(|(p, bytes)| {
                let report = crate::report::json::from_bytes(bytes.clone(), &crate::foundation::userfile::shown(p))?;
                let outputs = outputs_dir(p, &report, overrides);
                Ok(Part {
                    path: p.clone(),
                    report,
                    outputs,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(MergeOptions {
            parts,
            allow_other_threads,
            allow_other_hosts: false,
        })
    }
}

impl crate::foundation::userfile::Reads for MergeOptions {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        let MergeOptions {
            parts,
            allow_other_threads: _,
            allow_other_hosts: _,
        } = self;
        for p in parts {
            set.add(&p.path).add_all(&p.outputs);
        }
    }
}

impl Part {
    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

/// Refuses reports that are not parts of one audit, naming the report and what differs.
fn check_parts(parts: &[Part], allow_other_threads: bool) -> Result<()> {
    check_same_audit(parts)?;
    if !allow_other_threads {
        check_same_threads(parts)?;
    }
    match &parts[0].report.shard {
        Some(first_shard) => check_shard_set(parts, first_shard.count),
        None => Ok(()),
    }
}

/// Every report must be of the same model, golden run, tool, inputs, policy, baseline,
/// per-layer audit and target list.
fn check_same_audit(parts: &[Part]) -> Result<()> {
    let first = &parts[0];
    let same = |what: &str, get: &dyn Fn(&Report) -> String| -> Result<()> {
        let expected = get(&first.report);
        for p in &parts[1..] {
            let found = get(&p.report);
            if found != expected {
                return Err(bad_report(format!(
                    "{}: {what}: {found}; {}: {expected}; these are not shards of one audit",
                    p.name(),
                    first.name()
                )));
            }
        }
        Ok(())
    };
    same("the model's sha256", &|r| r.model.sha256.clone())?;
    same("the golden run", &|r| {
        format!("{} {}", r.reference.kind, r.reference.sha256)
    })?;
    same("the npu-audit version", &|r| r.tool.version.clone())?;
    same("the inputs", &|r| {
        crate::foundation::hash::sha256_hex(
            r.inputs
                .tensors
                .iter()
                .map(|t| format!("{}/{}/{}", t.sample, t.name, t.sha256))
                .collect::<Vec<_>>()
                .join(",")
                .as_bytes(),
        )
    })?;
    same("the policy", &|r| match &r.gate.policy {
        Some(p) => format!(
            "{} ({})",
            p.sha256.clone().unwrap_or_else(|| "flags only".into()),
            p.mode
        ),
        None => "none".into(),
    })?;
    same("the baseline", &|r| r.baseline.clone().unwrap_or_else(|| "none".into()))?;
    same("the per-layer audit", &|r| match &r.layer_audit {
        Some(l) => format!("{} of {} layers", l.mode, l.selected),
        None => "off".into(),
    })?;
    same("the stream", &|r| match &r.stream {
        Some(s) => format!(
            "{} steps, feeds {}, decisions {}, divergence below {} dB, teacher forcing {}",
            s.steps,
            s.feedback.join(","),
            s.decisions.join(","),
            s.divergence_sqnr_db.0,
            s.teacher_forcing
        ),
        None => "off".into(),
    })?;
    same("the shard count", &|r| match &r.shard {
        Some(s) => format!("{}", s.count),
        None => "not sharded".into(),
    })?;
    same("the target list", &|r| {
        r.shard.as_ref().map(|s| s.all_targets.join(", ")).unwrap_or_default()
    })
}

/// Every report's sessions ran with the same intra-op threads (figures can differ for that
/// reason alone).
fn check_same_threads(parts: &[Part]) -> Result<()> {
    let threads = |r: &Report| -> String {
        let targets: BTreeSet<String> = r
            .targets
            .iter()
            .filter_map(|t| t.intra_op_threads)
            .map(|n| n.to_string())
            .collect();
        let golden = r
            .reference
            .intra_op_threads
            .map_or("unrecorded".into(), |n| n.to_string());
        format!(
            "golden run {golden}, targets {}",
            targets.into_iter().collect::<Vec<_>>().join("/")
        )
    };
    let expected = threads(&parts[0].report);
    for p in &parts[1..] {
        let found = threads(&p.report);
        if found != expected {
            return Err(bad_report(format!(
                "{}: intra-op threads {found}; {}: {expected}; pass --allow-other-threads to merge them anyway",
                p.name(),
                parts[0].name()
            )));
        }
    }
    Ok(())
}

/// The host's kernel class of a report, `unrecorded` for a report made before hosts were recorded.
fn host_class(r: &Report) -> String {
    r.host
        .as_ref()
        .map_or_else(|| "unrecorded".into(), |h| h.isa_class.clone())
}

/// Every shard made on hosts of one kernel class: the golden run (the CPU EP) and the targets
/// whose figures depend on the host would otherwise join figures of two machines. Refused, unless
/// the user accepts it (then a note says so).
fn check_same_hosts(parts: &[Part], allow: bool) -> Result<Vec<String>> {
    let expected = host_class(&parts[0].report);
    let Some(other) = parts[1..].iter().find(|p| host_class(&p.report) != expected) else {
        return Ok(Vec::new());
    };
    let dependent: BTreeSet<String> = parts
        .iter()
        .flat_map(|p| &p.report.targets)
        .filter(|t| {
            t.host
                .as_ref()
                .is_some_and(|h| h.dependence != crate::report::facts::Dependence::Independent)
        })
        .map(|t| format!("{} ({})", t.id, t.host.as_ref().map_or("", |h| h.why.as_str())))
        .collect();
    let what = format!(
        "{} was made on a host of class {}, {} on {}; the golden run (the CPU EP) depends on the host's kernels{}",
        other.name(),
        host_class(&other.report),
        parts[0].name(),
        expected,
        if dependent.is_empty() {
            String::new()
        } else {
            format!(", and so do {}", dependent.into_iter().collect::<Vec<_>>().join("; "))
        }
    );
    if allow {
        return Ok(vec![format!("{what}; merged anyway (--allow-other-hosts)")]);
    }
    Err(bad_report(format!(
        "{what}: run the shards on one class of host, or pass --allow-other-hosts"
    )))
}

/// Every shard of `count` exactly once.
fn check_shard_set(parts: &[Part], count: usize) -> Result<()> {
    let mut seen: Vec<Option<&Part>> = vec![None; count];
    for p in parts {
        let index = p.report.shard.as_ref().map(|s| s.index).unwrap_or(0);
        let slot = seen
            .get_mut(index.wrapping_sub(1))
            .ok_or_else(|| bad_report(format!("{}: shard {index} of {count}", p.name())))?;
        if let Some(other) = slot {
            return Err(bad_report(format!(
                "{}: shard {index}/{count} is also {}",
                p.name(),
                other.name()
            )));
        }
        *slot = Some(p);
    }
    let missing: Vec<String> = (1..=count)
        .filter(|i| seen[i - 1].is_none())
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(bad_report(format!(
            "shard(s) {} missing: pass every shard's report",
            missing.join(", ")
        )));
    }
    Ok(())
}

/// Every target in the order a single run lists them, each taken from the report that ran it.
/// The baseline runs in every shard; its copies must agree.
fn targets_in_order(parts: &[Part]) -> Result<Vec<TargetReport>> {
    let order: Vec<String> = match &parts[0].report.shard {
        Some(s) => s.all_targets.clone(),
        None => {
            let mut ids: Vec<String> = Vec::new();
            for p in parts {
                for t in &p.report.targets {
                    if !ids.contains(&t.id) {
                        ids.push(t.id.clone());
                    }
                }
            }
            // The baseline last, as in a single run.
            ids.sort_by_key(|id| parts[0].report.baseline.as_deref() == Some(id.as_str()));
            ids
        }
    };
    let mut out = Vec::new();
    for id in &order {
        let copies: Vec<(&Part, &TargetReport)> = parts
            .iter()
            .filter_map(|p| p.report.targets.iter().find(|t| &t.id == id).map(|t| (p, t)))
            .collect();
        let Some(&(first_part, first)) = copies.first() else {
            return Err(bad_report(format!(
                "target {id} of the audit is in none of the reports"
            )));
        };
        for &(p, t) in &copies[1..] {
            if t.role == TargetRole::Target {
                return Err(bad_report(format!(
                    "{}: target {id} is also in {}; each target belongs to one shard",
                    p.name(),
                    first_part.name()
                )));
            }
            let a = serde_json::to_value(&first.outputs)?;
            if serde_json::to_value(&t.outputs)? != a {
                return Err(bad_report(format!(
                    "{}: the baseline {id} has other results than in {} (a non-deterministic runtime?)",
                    p.name(),
                    first_part.name()
                )));
            }
        }
        out.push(first.clone());
    }
    Ok(out)
}

/// Where a shard saved its outputs: the directory given with `--outputs REPORT=DIR`, else the
/// one its report records (an absolute path as is, a relative one beside the report). Never
/// looked up relative to the working directory, where an unrelated directory could stand in.
fn outputs_dir(path: &Path, report: &Report, overrides: &[ShardOutputs]) -> Option<PathBuf> {
    if let Some(o) = overrides.iter().find(|o| same_file(&o.report, path)) {
        return Some(o.dir.clone());
    }
    let recorded = Path::new(report.shard.as_ref()?.outputs_dir.as_ref()?);
    let dir = if recorded.is_absolute() {
        recorded.to_path_buf()
    } else {
        path.parent().unwrap_or(Path::new("")).join(recorded)
    };
    dir.is_dir().then_some(dir)
}

/// Whether two paths name one file (as given, or after resolving links).
fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// Each `--outputs REPORT=DIR` names one of the reports merged and a directory.
fn check_overrides(overrides: &[ShardOutputs], reports: &[PathBuf]) -> Result<()> {
    for o in overrides {
        let spec = format!("{}={}", o.report.display(), o.dir.display());
        if !reports.iter().any(|r| same_file(r, &o.report)) {
            return Err(bad_flag(format!(
                "--outputs {spec}: {} is not one of the reports merged",
                o.report.display()
            )));
        }
        if !o.dir.is_dir() {
            return Err(bad_flag(format!(
                "--outputs {spec}: {} is not a directory",
                o.dir.display()
            )));
        }
    }
    Ok(())
}

/// A target's saved outputs, each file checked against the SHA-256 its shard recorded (a
/// file replaced or damaged since is refused), unpacked into `.npy` files the comparison reads.
fn unpack(part: &Part, dir: &Path, id: &str, into: &Path) -> Result<Vec<Vec<OutputFile>>> {
    let samples = part.report.inputs.provenance.samples;
    let recorded = part.report.shard.as_ref().map(|s| &s.output_files);
    let mut out = Vec::new();
    for k in 0..samples {
        let rel = format!("{}/s{k}.npz", sanitize(id));
        let npz = dir.join(&rel);
        let expected = recorded.and_then(|m| m.get(&rel)).ok_or_else(|| {
            bad_report(format!(
                "{}: the report records no saved outputs {rel} (written by an older npu-audit?); re-run the shard",
                part.name()
            ))
        })?;
        let bytes = crate::foundation::userfile::read_user_file(&npz)?;
        if &crate::foundation::hash::sha256_hex(&bytes) != expected {
            return Err(bad_report(format!(
                "{}: its SHA-256 is not the one {} recorded: the saved outputs were changed since the shard ran",
                npz.display(),
                part.name()
            )));
        }
        let tensors =
            read_npz_bytes(bytes).with_context(|| format!("cannot read the saved outputs {}", npz.display()))?;
        let mut files = Vec::new();
        for (i, (name, tensor)) in tensors.into_iter().enumerate() {
            let path = into.join(format!("{}-s{k}-o{i}.npy", sanitize(id)));
            tensor.write_npy(&path)?;
            files.push(OutputFile {
                name,
                dtype: tensor.dtype(),
                shape: tensor.shape.clone(),
                path,
            });
        }
        out.push(files);
    }
    Ok(out)
}

/// Agreement entries in a single run's order: every pair of targets that ran, per output. Pairs
/// within a shard come from its report; pairs across shards are computed from saved outputs.
fn agreement(parts: &[Part], outputs: &[String], ran: &[&str], notes: &mut Vec<String>) -> Result<Vec<AgreementEntry>> {
    let shard_of = |id: &str| parts.iter().position(|p| p.report.targets.iter().any(|t| t.id == id));
    let find = |a: &str, b: &str, output: &str| {
        parts.iter().find_map(|p| {
            p.report
                .agreement
                .iter()
                .find(|e| e.a == a && e.b == b && e.output == output)
                .cloned()
        })
    };
    // Pairs no report holds.
    let mut missing: BTreeSet<(usize, usize)> = BTreeSet::new();
    for (i, a) in ran.iter().enumerate() {
        for (j, b) in ran.iter().enumerate().skip(i + 1) {
            if outputs.iter().any(|o| find(a, b, o).is_none()) {
                missing.insert((i, j));
            }
        }
    }
    let mut computed: Vec<AgreementEntry> = Vec::new();
    if !missing.is_empty() {
        let needed: BTreeSet<usize> = missing.iter().flat_map(|&(i, j)| [i, j]).collect();
        let dirs: Vec<Option<(usize, PathBuf)>> = needed
            .iter()
            .map(|&i| shard_of(ran[i]).and_then(|p| Some((p, parts[p].outputs.clone()?))))
            .collect();
        if dirs.iter().any(Option::is_none) {
            notes.push(format!(
                "agreement between targets of different shards is missing ({} pairs): run the shards with --out FILE (their outputs are kept beside it) and keep FILE.outputs with the report, or name it with --outputs REPORT=DIR",
                missing.len()
            ));
        } else {
            let sources: Vec<(&str, &Part, &Path)> = needed
                .iter()
                .zip(dirs.iter().flatten())
                .map(|(&i, (p, dir))| (ran[i], &parts[*p], dir.as_path()))
                .collect();
            computed = compare_saved(parts, outputs, &sources)?;
        }
    }
    let mut out = Vec::new();
    for (i, a) in ran.iter().enumerate() {
        for b in ran.iter().skip(i + 1) {
            for o in outputs {
                let entry = find(a, b, o).or_else(|| {
                    computed
                        .iter()
                        .find(|e| e.a == *a && e.b == *b && &e.output == o)
                        .cloned()
                });
                out.extend(entry);
            }
        }
    }
    Ok(out)
}

/// Agreement between targets of different shards, computed from each one's saved outputs
/// (`sources`: target id, its shard, where the shard saved them).
fn compare_saved(parts: &[Part], outputs: &[String], sources: &[(&str, &Part, &Path)]) -> Result<Vec<AgreementEntry>> {
    let tmp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let mut loaded = Vec::new();
    for &(id, part, dir) in sources {
        loaded.push((id, unpack(part, dir, id, tmp.path())?));
    }
    let runs: Vec<RunOutputs<'_>> = loaded.iter().map(|(id, s)| RunOutputs { id, samples: s }).collect();
    // The quantization step of each output, as the shards' own comparisons used it.
    let lsbs: Vec<Option<f64>> = outputs
        .iter()
        .map(|o| {
            parts.iter().find_map(|p| {
                p.report
                    .agreement
                    .iter()
                    .find(|e| &e.output == o)
                    .and_then(|e| e.code_differences.map(|c| c.lsb))
            })
        })
        .collect();
    let classes = ClassAxisPolicy {
        default: Some(None),
        ..Default::default()
    };
    Ok(compare(outputs, &lsbs, outputs, &runs[0], &runs, &classes)?.agreement)
}

/// The shards' rules in the single run's target order, and the verdict over all of them. Rules
/// between releases of one target are evaluated again on the merged agreement: the two releases
/// may have run in different shards.
fn gate(parts: &[Part], targets: &[TargetReport], agreement: &[AgreementEntry]) -> GateReport {
    let mut rules = Vec::new();
    for t in targets {
        for p in parts {
            if p.report
                .targets
                .iter()
                .any(|x| x.id == t.id && x.role == TargetRole::Target)
            {
                let own = p.report.gate.rules.iter().filter(|r| {
                    r.target == t.id && !matches!(r.rule, Rule::ReleaseSqnrChangeDb | Rule::ReleaseBitExact)
                });
                rules.extend(own.cloned());
            }
        }
    }
    let limits = parts[0]
        .report
        .gate
        .policy
        .as_ref()
        .map(|p| p.release_limits.clone())
        .unwrap_or_default();
    rules.extend(crate::judge::gate::releases::rules(&limits, targets, agreement));
    let active = parts.iter().any(|p| p.report.gate.verdict != Verdict::None);
    GateReport {
        verdict: crate::judge::gate::verdict(active, &rules),
        rules,
        policy: parts[0].report.gate.policy.clone(),
    }
}

/// The shards' per-layer audit info as one: sessions summed, the longest time, every problem once.
fn merged_layer_audit(parts: &[Part]) -> Option<crate::report::compare::LayerAuditInfo> {
    parts[0].report.layer_audit.clone().map(|mut info| {
        info.sessions = parts
            .iter()
            .filter_map(|p| p.report.layer_audit.as_ref())
            .map(|l| l.sessions)
            .sum();
        info.seconds = parts
            .iter()
            .filter_map(|p| p.report.layer_audit.as_ref())
            .map(|l| l.seconds)
            .fold(0.0, f64::max);
        for p in &parts[1..] {
            for problem in p.report.layer_audit.iter().flat_map(|l| &l.problems) {
                if !info.problems.contains(problem) {
                    info.problems.push(problem.clone());
                }
            }
        }
        info
    })
}

/// Joins the shard reports into the report of one audit.
pub fn merge(opts: &MergeOptions) -> Result<Report> {
    let parts = &opts.parts;
    check_parts(parts, opts.allow_other_threads)?;
    let mut notes: Vec<String> = check_same_hosts(parts, opts.allow_other_hosts)?;
    for p in parts {
        for n in &p.report.notes {
            if !notes.contains(n) {
                notes.push(n.clone());
            }
        }
    }
    let targets = targets_in_order(parts)?;
    let outputs: Vec<String> = parts[0].report.model.outputs.iter().map(|o| o.name.clone()).collect();
    let ran: Vec<&str> = targets
        .iter()
        .filter(|t| t.status == RunStatus::Ok)
        .map(|t| t.id.as_str())
        .collect();
    let agreement = agreement(parts, &outputs, &ran, &mut notes)?;
    let bit_exact_groups = outputs
        .iter()
        .map(|o| BitExactGroups {
            output: o.clone(),
            groups: bit_exact_groups(o, &ran, &agreement),
        })
        .collect();
    let gate = gate(parts, &targets, &agreement);
    let layer_audit = merged_layer_audit(parts);
    let exit_code = crate::judge::gate::exit_code(crate::judge::gate::required_unfinished(&targets), gate.verdict);
    let first = &parts[0].report;
    Ok(Report {
        schema_version: first.schema_version,
        kind: first.kind,
        tool: first.tool.clone(),
        host: first.host.clone(),
        model: first.model.clone(),
        reference: first.reference.clone(),
        inputs: first.inputs.clone(),
        baseline: first.baseline.clone(),
        tolerances: tolerances(&outputs, &targets),
        targets,
        agreement,
        bit_exact_groups,
        gate,
        metric_definitions: first.metric_definitions.clone(),
        layer_audit,
        stream: first.stream.clone(),
        notes,
        shard: None,
        merged_from: parts.iter().map(|p| p.path.display().to_string()).collect(),
        // The shards' times were spent on other machines, in parallel: no sum means anything.
        timings: None,
        exit_code,
    })
}
