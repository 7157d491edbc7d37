//! `merge` of eval shards' files: every shard's file checked to be a part of one eval (same basis,
//! costs, tool, host class and thread counts, runtimes per target; its units exactly the ones the
//! split gives its index, so no sample is missing or counted twice), the records joined in sample
//! order, and the report built by the same [`build`] one machine runs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;

use crate::analyses::accuracy::Record;
use crate::commands::eval::assemble::{build, Basis};
use crate::commands::eval::shard::{from_bytes, ShardFile, UnitRun};
use crate::commands::eval::summary::RunSummary;
use crate::commands::shard::units;
use crate::foundation::error::bad_report;
use crate::report::compare::RuntimeInfo;
use crate::report::eval::EvalReport;

/// What `merge` joins when its parts are eval shards.
#[derive(Debug, Clone)]
pub struct EvalMergeOptions {
    pub parts: Vec<(PathBuf, ShardFile)>,
    /// Accept shards whose sessions ran with other intra-op thread counts.
    pub allow_other_threads: bool,
    /// Accept shards made on hosts of other instruction-set classes.
    pub allow_other_hosts: bool,
}

impl EvalMergeOptions {
    /// Parses every shard's file from the bytes read of it (once: a pipe cannot be read twice).
    pub fn read(
        read: &[(PathBuf, Vec<u8>)],
        allow_other_threads: bool,
        allow_other_hosts: bool,
    ) -> Result<EvalMergeOptions> {
        let parts = read
            .iter()
            .map(|(p, bytes)| Ok((p.clone(), from_bytes(bytes, &crate::foundation::userfile::shown(p))?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(EvalMergeOptions {
            parts,
            allow_other_threads,
            allow_other_hosts,
        })
    }
}

impl crate::foundation::userfile::Reads for EvalMergeOptions {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        for (path, _) in &self.parts {
            set.add(path);
        }
    }
}

/// The eval's report from its shards, or why they are not the parts of one eval.
pub fn merge(opts: &EvalMergeOptions) -> Result<EvalReport> {
    let parts = in_order(&opts.parts)?;
    let (first_path, first) = parts[0];
    let basis = same_basis(&parts)?;
    for (path, part) in &parts[1..] {
        let differs = |what: &str| {
            bad_report(format!(
                "{} and {} are not shards of one eval: they differ in {what}",
                first_path.display(),
                path.display()
            ))
        };
        if part.tool_version != first.tool_version {
            return Err(differs("the npu-audit release that made them"));
        }
        if part.costs != first.costs {
            return Err(differs("the costs they were split with (--costs)"));
        }
        if !opts.allow_other_hosts && part.host.isa_class != first.host.isa_class {
            return Err(differs(&format!(
                "their host's instruction-set class ({} and {}; --allow-other-hosts to merge them anyway)",
                first.host.isa_class, part.host.isa_class
            )));
        }
    }
    check_units(&parts, &basis)?;
    if !opts.allow_other_threads {
        check_threads(&parts)?;
    }
    let reference = reference_run(&parts, basis.dataset.samples)?;
    check_records(&parts, &basis, &reference.records)?;
    check_set(&parts, &basis, &reference.records)?;
    let runs = basis
        .targets
        .iter()
        .map(|t| target_run(&parts, &t.id))
        .collect::<Result<Vec<_>>>()?;
    // The samples' digest is a shard's check, not a figure: the merged report is the report one
    // machine writes.
    let mut basis = basis;
    basis.dataset.samples_sha256 = None;
    let mut report = build(&basis, Some(first.host.clone()), &reference, &runs);
    if let Some(note) = limits_note(&basis) {
        report.notes.push(note);
    }
    Ok(report)
}

/// Where the merged report's limits and margin come from: the shards' files, which set them when
/// they ran (the merge's command line sets none), said plainly so a reader does not take them
/// for the merge's own.
fn limits_note(basis: &Basis) -> Option<String> {
    let mut set: Vec<String> = basis
        .targets
        .iter()
        .filter(|t| t.role == crate::data::target::TargetRole::Target)
        .flat_map(|t| {
            let min = t
                .min_accuracy
                .as_ref()
                .map(|l| format!("{} min_accuracy {} ({})", t.id, l.value, l.origin));
            let drop = t
                .max_accuracy_drop
                .as_ref()
                .map(|l| format!("{} max_accuracy_drop {} ({})", t.id, l.value, l.origin));
            min.into_iter().chain(drop)
        })
        .collect();
    if let Some(m) = basis.stats.margin_points {
        set.push(format!("margin {m} points"));
    }
    (!set.is_empty()).then(|| {
        format!(
            "the gate's limits and the margin are the shards' own, set when they ran and taken from their files (merge sets none): {}",
            set.join("; ")
        )
    })
}

/// The parts sorted by shard index, refused when counts differ or an index is missing or twice.
fn in_order(parts: &[(PathBuf, ShardFile)]) -> Result<Vec<&(PathBuf, ShardFile)>> {
    let Some((path, first)) = parts.first() else {
        return Err(bad_report("merge: no shard given"));
    };
    let count = first.shard.count;
    let mut by_index: BTreeMap<usize, &(PathBuf, ShardFile)> = BTreeMap::new();
    for part in parts {
        check_sizes(&part.0, &part.1)?;
        if part.1.shard.count != count {
            return Err(bad_report(format!(
                "{} is shard {}/{} but {} is of {count} shards: not parts of one split",
                part.0.display(),
                part.1.shard.index,
                part.1.shard.count,
                path.display()
            )));
        }
        if let Some(other) = by_index.insert(part.1.shard.index, part) {
            return Err(bad_report(format!(
                "{} and {} are both shard {}/{count}",
                other.0.display(),
                part.0.display(),
                part.1.shard.index
            )));
        }
    }
    let missing: Vec<String> = (1..=count)
        .filter(|k| !by_index.contains_key(k))
        .map(|k| format!("{k}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(bad_report(format!(
            "shard {} missing: give every shard's file",
            missing.join(", ")
        )));
    }
    Ok(by_index.into_values().collect())
}

/// The most samples and the heaviest cost a shard's file may name (what `--costs` accepts).
const MAX_SAMPLES: usize = 1 << 40;
const MAX_WEIGHT: u64 = 1_000_000_000;

/// Refuses a file whose shard, costs or sample count no eval writes (a stranger's numbers are
/// checked before any arithmetic uses them).
fn check_sizes(path: &std::path::Path, f: &ShardFile) -> Result<()> {
    let samples = f.basis.as_ref().map_or(0, |b| b.dataset.samples);
    let bad_costs = f.costs.values().any(|w| !(1..=MAX_WEIGHT).contains(w));
    let count = f.shard.count > crate::commands::shard::MAX_SHARDS;
    if f.shard.index == 0 || f.shard.index > f.shard.count || count || bad_costs || samples > MAX_SAMPLES {
        return Err(bad_report(format!(
            "{}: its shard, costs or sample count are not ones an eval writes",
            path.display()
        )));
    }
    Ok(())
}

/// The basis every shard with units carries, refused when two differ (naming what).
fn same_basis(parts: &[&(PathBuf, ShardFile)]) -> Result<Basis> {
    let mut with = parts.iter().filter_map(|(p, f)| f.basis.as_ref().map(|b| (p, b)));
    let Some((first_path, first)) = with.next() else {
        return Err(bad_report("no shard ran anything: the set has no sample"));
    };
    for (path, basis) in with {
        if basis == first {
            continue;
        }
        let (a, b) = (serde_json::to_value(first)?, serde_json::to_value(basis)?);
        let fields: Vec<&str> = [
            "model_sha256",
            "model",
            "reference",
            "dataset",
            "task",
            "stats",
            "targets",
            "notes",
        ]
        .into_iter()
        .filter(|k| a.get(k) != b.get(k))
        .map(|k| match k {
            "dataset" => dataset_difference(&first.dataset, &basis.dataset),
            k => k,
        })
        .collect();
        return Err(bad_report(format!(
            "{} and {} are not shards of one eval: they differ in {}",
            first_path.display(),
            path.display(),
            fields.join(", ")
        )));
    }
    Ok(first.clone())
}

/// What differs between two shards' sets, in words: the labels' or the samples' contents before
/// their names.
fn dataset_difference(a: &crate::report::eval::DatasetInfo, b: &crate::report::eval::DatasetInfo) -> &'static str {
    if a.labels_sha256 != b.labels_sha256 {
        "the labels' contents (the labels were edited between the shards' runs)"
    } else if a.samples_sha256 != b.samples_sha256 {
        "the samples' contents (the set was edited between the shards' runs)"
    } else if a.ids_sha256 != b.ids_sha256 || a.samples != b.samples {
        "the set's samples (ids or count)"
    } else {
        "the set's path or where its labels came from"
    }
}

/// Refuses a record no eval of this basis writes: a stored verdict that is not what its
/// prediction scores against its truth (edited by hand), a target's id or label that is not the
/// reference's for the sample (the reference joined from every shard), a label of `agree` that is
/// not the reference's own prediction, a class the output does not have, an SQNR no output has; and
/// a shard that does not hold the reference's record of every sample its units cover. Merge judges
/// every record again instead of trusting what it says.
fn check_records(parts: &[&(PathBuf, ShardFile)], basis: &Basis, reference: &[Record]) -> Result<()> {
    let task = &basis.task;
    let joined: BTreeMap<usize, &Record> = reference.iter().map(|r| (r.index, r)).collect();
    for (path, part) in parts {
        let refuse = |run: &str, r: &Record, why: String| {
            bad_report(format!(
                "{}: the record of sample {} in {run} {why}: the file was edited; merge judges records again and takes none it cannot",
                path.display(),
                crate::foundation::console::printable(&r.id)
            ))
        };
        let own: std::collections::BTreeSet<usize> = part.reference.iter().map(|r| r.index).collect();
        if let Some(u) = part
            .units
            .iter()
            .find(|u| (u.unit.start..u.unit.end).any(|k| !own.contains(&k)))
        {
            return Err(bad_report(format!(
                "{}: it does not hold the reference's records of samples {}..{} its unit {} covers: the file was edited",
                path.display(),
                u.unit.start,
                u.unit.end,
                crate::foundation::console::printable(&u.unit.run)
            )));
        }
        let units = part
            .units
            .iter()
            .flat_map(|u| u.run.records.iter().map(move |r| (u.unit.run.as_str(), r)));
        for (run, r) in part.reference.iter().map(|r| ("reference", r)).chain(units) {
            if let Some(why) = what_is_wrong(task, part.output_len, (run, r), joined.get(&r.index)) {
                return Err(refuse(run, r, why));
            }
        }
    }
    Ok(())
}

/// What is wrong with record `r` of run `run` (the reference's record of its sample, joined from
/// every shard, beside it), if anything.
fn what_is_wrong(
    task: &crate::analyses::accuracy::task::Task,
    output_len: usize,
    (run, r): (&str, &Record),
    reference: Option<&&Record>,
) -> Option<String> {
    if r.judged_against(task, &r.truth) != r.judged {
        return Some("says it was judged otherwise than its prediction scores against its label".into());
    }
    if let Some(p) = r.prediction.as_ref().filter(|_| output_len > 0) {
        if !task.admits(p, output_len) {
            return Some(format!("predicts what the task's output of {output_len} values cannot"));
        }
    }
    if run != "reference" {
        match reference {
            None => return Some("is of a sample no shard's reference recorded".into()),
            Some(x) if x.id != r.id => {
                return Some(format!(
                    "names the sample the reference recorded as '{}'",
                    crate::foundation::console::printable(&x.id)
                ))
            }
            Some(x) if x.truth != r.truth => return Some("has another label than the reference's record of it".into()),
            Some(_) => {}
        }
    }
    let own = r
        .prediction
        .as_ref()
        .and_then(crate::analyses::accuracy::task::Task::truth_of_prediction);
    if run == "reference" && task.labels_from_reference() && own.is_some_and(|t| t != r.truth) {
        return Some("has a label that is not the reference's own prediction".into());
    }
    if r.sqnr_db.is_some_and(|s| s.0.is_finite() && s.0.abs() > 10_000.0) {
        return Some("holds an SQNR no output has".into());
    }
    None
}

/// Refuses records whose ids and labels, joined in sample order, are not those of the set the
/// shards ran on: the ids' SHA-256 of the basis, and the SHA-256 of every sample's id and truth
/// each shard took from the labels (so a label edited alike in every shard's records is caught).
fn check_set(parts: &[&(PathBuf, ShardFile)], basis: &Basis, reference: &[Record]) -> Result<()> {
    let ids: Vec<String> = reference.iter().map(|r| r.id.clone()).collect();
    if crate::foundation::hash::sha256_hex(ids.join("\n").as_bytes()) != basis.dataset.ids_sha256 {
        return Err(bad_report(
            "the shards' records name other samples than the set they say they ran (its ids' SHA-256): the files were edited",
        ));
    }
    let (first_path, first) = parts[0];
    for (path, part) in &parts[1..] {
        if part.truths_sha256 != first.truths_sha256 || part.output_len != first.output_len {
            return Err(bad_report(format!(
                "{} and {} are not shards of one eval: they read the labels or the output otherwise",
                first_path.display(),
                path.display()
            )));
        }
    }
    let truths: Vec<Option<crate::analyses::accuracy::task::Truth>> =
        reference.iter().map(|r| Some(r.truth.clone())).collect();
    if first.truths_sha256.is_some() && crate::commands::eval::feed::truths_sha256(&ids, &truths) != first.truths_sha256
    {
        return Err(bad_report(
            "the shards' records hold other labels than the ones the shards read from the set: the files were edited",
        ));
    }
    Ok(())
}

/// Refuses a shard whose units are not the ones its index gets in the split of this eval.
fn check_units(parts: &[&(PathBuf, ShardFile)], basis: &Basis) -> Result<()> {
    let costs = &parts[0].1.costs;
    let weights: Vec<(String, u64)> = basis
        .targets
        .iter()
        .map(|t| (t.id.clone(), costs.get(&t.id).copied().unwrap_or(0)))
        .collect();
    let expected = units(&weights, basis.dataset.samples, parts.len());
    for ((path, part), want) in parts.iter().zip(&expected) {
        let units: Vec<_> = part.units.iter().map(|u| u.unit.clone()).collect();
        if units != *want {
            return Err(bad_report(format!(
                "{}: its units are not those of shard {}/{} of this eval (samples would be missing or counted twice)",
                path.display(),
                part.shard.index,
                part.shard.count
            )));
        }
        for u in &part.units {
            check_unit_records(path, u)?;
        }
    }
    Ok(())
}

/// A unit's records are its samples in order, all of them unless its run stopped.
fn check_unit_records(path: &std::path::Path, u: &UnitRun) -> Result<()> {
    let in_order = u
        .run
        .records
        .iter()
        .enumerate()
        .all(|(k, r)| r.index == u.unit.start + k);
    let len = u.unit.end - u.unit.start;
    let n = u.run.records.len();
    // A run that stopped did not end well: an end that says `ok` is not one an eval writes.
    if u.run
        .end
        .as_ref()
        .is_some_and(|e| e.status == crate::report::RunStatus::Ok)
    {
        return Err(bad_report(format!(
            "{}: {} says it stopped with status ok, which no eval writes: the file was edited",
            path.display(),
            u.unit.run
        )));
    }
    if !in_order || n > len || (n < len && u.run.end.is_none()) {
        return Err(bad_report(format!(
            "{}: {} holds {n} records of samples {}..{} that are not those samples in order{}",
            path.display(),
            u.unit.run,
            u.unit.start,
            u.unit.end,
            if n < len && in_order {
                " (the shard did not finish: run it again, it resumes)"
            } else {
                ""
            }
        )));
    }
    Ok(())
}

/// Refuses shards whose sessions ran with other intra-op thread counts.
fn check_threads(parts: &[&(PathBuf, ShardFile)]) -> Result<()> {
    let mut seen: Option<(usize, &PathBuf)> = None;
    for (path, part) in parts {
        for threads in part.units.iter().filter_map(|u| u.run.intra_op_threads) {
            match seen {
                Some((t, p)) if t != threads => {
                    return Err(bad_report(format!(
                        "{} ran sessions with {t} intra-op threads and {} with {threads}: some kernels give other bits with other thread counts (--allow-other-threads to merge them anyway)",
                        p.display(),
                        path.display()
                    )))
                }
                Some(_) => {}
                None => seen = Some((threads, path)),
            }
        }
    }
    Ok(())
}

/// The reference's records of every sample, from the shards that ran it; two shards' records of
/// one sample must be the same.
fn reference_run(parts: &[&(PathBuf, ShardFile)], samples: usize) -> Result<RunSummary> {
    let mut records: BTreeMap<usize, (&PathBuf, &Record)> = BTreeMap::new();
    for (path, part) in parts {
        for r in &part.reference {
            if r.index >= samples {
                return Err(bad_report(format!(
                    "{}: a reference record of sample {} in a set of {samples}",
                    path.display(),
                    r.index
                )));
            }
            match records.get(&r.index) {
                Some((other, kept)) if kept.truth != r.truth || kept.id != r.id => {
                    return Err(bad_report(format!(
                        "{} and {} hold other labels or ids for sample {}: not records of one labelled set",
                        other.display(),
                        path.display(),
                        crate::foundation::console::printable(&r.id)
                    )))
                }
                Some((other, kept)) if *kept != r => {
                    return Err(bad_report(format!(
                        "{} and {} recorded other reference answers for sample {}: the reference run is not deterministic across the shards' machines",
                        other.display(),
                        path.display(),
                        crate::foundation::console::printable(&r.id)
                    )))
                }
                Some(_) => {}
                None => {
                    records.insert(r.index, (path, r));
                }
            }
        }
    }
    if let Some(missing) = (0..samples).find(|k| !records.contains_key(k)) {
        return Err(bad_report(format!(
            "no shard holds the reference's record of sample {missing}"
        )));
    }
    Ok(RunSummary {
        id: "reference".into(),
        end: None,
        runtime: None,
        intra_op_threads: None,
        run_ms: Vec::new(),
        records: records.into_values().map(|(_, r)| r.clone()).collect(),
    })
}

/// A target's run joined from its units in sample order, up to the first unit whose run stopped
/// (one machine would not have run it further).
fn target_run(parts: &[&(PathBuf, ShardFile)], id: &str) -> Result<RunSummary> {
    let mut units: Vec<(&PathBuf, &UnitRun)> = parts
        .iter()
        .flat_map(|(p, f)| f.units.iter().filter(|u| u.unit.run == id).map(move |u| (p, u)))
        .collect();
    units.sort_by_key(|(_, u)| u.unit.start);
    let mut joined = RunSummary {
        id: id.to_string(),
        end: None,
        runtime: None,
        intra_op_threads: None,
        run_ms: Vec::new(),
        records: Vec::new(),
    };
    let mut runtime_from: Option<&PathBuf> = None;
    for (path, u) in units {
        if let (Some(kept), Some(this)) = (&joined.runtime, &u.run.runtime) {
            if runtime_key(kept) != runtime_key(this) {
                return Err(bad_report(format!(
                    "{} and {} ran {id} with other runtimes ({} and {})",
                    runtime_from.map_or(String::new(), |p| p.display().to_string()),
                    path.display(),
                    kept.text(),
                    this.text()
                )));
            }
        }
        if joined.runtime.is_none() && u.run.runtime.is_some() {
            joined.runtime = u.run.runtime.clone();
            runtime_from = Some(path);
        }
        joined.intra_op_threads = joined.intra_op_threads.or(u.run.intra_op_threads);
        joined.run_ms.extend(&u.run.run_ms);
        joined.records.extend(u.run.records.iter().cloned());
        if u.run.end.is_some() {
            joined.end = u.run.end.clone();
            break;
        }
    }
    Ok(joined)
}

/// What makes two runtimes the same build: package, version, library hash, plugin, emulation (not
/// where the library was found on each machine).
fn runtime_key(rt: &RuntimeInfo) -> String {
    let plugin = rt.plugin.as_deref().map(runtime_key).unwrap_or_default();
    format!(
        "{} {} {} [{plugin}] {}",
        rt.package,
        rt.version,
        rt.sha256.as_deref().unwrap_or(""),
        rt.emulation.as_deref().unwrap_or("")
    )
}
