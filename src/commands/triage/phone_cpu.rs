//! The phone's own CPU, tried by default. A report that its chipset's simulation does not
//! reproduce, and whose nearest candidate is a CPU EP, may be a silent CPU fallback on the phone's
//! ARM64 CPU EP, which computes other bits than the x86 build: triage then runs the emulated ARM64
//! CPU EP on the cores that stand for the report's chipset (`target::arm_cores`) and decides the
//! verdict again with them. `--no-arm64` turns it off.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;

use super::reproduce::{extend_group, input_key, report_target_ids, Group, RunCache, RunCounts};
use super::verdict::{entry, is_cpu, nearest};
use super::{ReportEntry, TriageOptions, VerdictKind};
use crate::data::device::{identify_device, DeviceReport};
use crate::data::target::arm_cores::{chipset_cpus, every_chipsets_cores};
use crate::data::target::TargetSpec;

/// Whether an entry calls for the phone's own CPU: no identical match settled it (its chipset's
/// simulation, a CPU EP, another chipset) and the candidate nearest to it is a CPU EP.
fn wants_phone_cpu(e: &ReportEntry) -> bool {
    let open = matches!(
        e.verdict.kind,
        VerdictKind::Unexplained | VerdictKind::Rounding | VerdictKind::Unidentified | VerdictKind::OwnChipsetFailed
    );
    open && nearest(&e.candidates).is_some_and(|c| is_cpu(&c.target))
}

/// The `cpu-arm64` targets that stand for the report's chipset's CPU cores (for a chipset the
/// audit cannot tell, one core of every class some chipset ships), without those already asked.
fn phone_targets(report: &DeviceReport, asked: &[String]) -> Vec<TargetSpec> {
    let cores = identify_device(&report.device)
        .chipset
        .and_then(|sm| chipset_cpus(&sm))
        .map_or_else(every_chipsets_cores, |c| c.emulated.to_vec());
    cores
        .into_iter()
        .filter_map(|core| TargetSpec::parse_many(&format!("cpu-arm64:{core}")).ok())
        .flatten()
        .filter(|t| !asked.contains(&t.id))
        .collect()
}

/// What the follow-up is to do: per input group, its reports that want the phone's CPU and the
/// targets for them.
struct Followup<'a> {
    key: String,
    /// (index among the entries, the report, the ids it is compared with now).
    reports: Vec<(usize, &'a DeviceReport, Vec<String>)>,
    targets: Vec<TargetSpec>,
}

fn followups<'a>(
    opts: &TriageOptions,
    todo: &[&'a (PathBuf, Result<DeviceReport, String>)],
    entries: &[ReportEntry],
) -> Vec<Followup<'a>> {
    let mut out: Vec<Followup<'a>> = Vec::new();
    for (i, (_, r)) in todo.iter().enumerate() {
        let (Ok(report), Some(e)) = (r, entries.get(i)) else {
            continue;
        };
        if !wants_phone_cpu(e) {
            continue;
        }
        let mut wanted = report_target_ids(&opts.candidates, report);
        let targets = phone_targets(report, &wanted);
        if targets.is_empty() {
            continue;
        }
        wanted.extend(targets.iter().map(|t| t.id.clone()));
        let key = input_key(report);
        let pos = match out.iter().position(|f| f.key == key) {
            Some(pos) => pos,
            None => {
                out.push(Followup {
                    key,
                    reports: Vec::new(),
                    targets: Vec::new(),
                });
                out.len() - 1
            }
        };
        let f = &mut out[pos];
        for t in targets {
            if !f.targets.iter().any(|have| have.id == t.id) {
                f.targets.push(t);
            }
        }
        f.reports.push((i, report, wanted));
    }
    out
}

/// Runs the phone's own CPU for every entry that wants it and decides those entries again; the
/// groups gain the runs, and each group's notes say what was run and what it cost. Returns the
/// content hashes of the reports whose phone's CPU could not run: their entries are not kept, so a
/// later triage tries again.
pub fn follow_up(
    opts: &TriageOptions,
    todo: &[&(PathBuf, Result<DeviceReport, String>)],
    groups: &mut [Group],
    entries: &mut [ReportEntry],
    (steps, cache, counts): (&[Option<f64>], Option<&RunCache>, &mut RunCounts),
) -> Result<Vec<String>> {
    let mut not_to_keep = Vec::new();
    for f in followups(opts, todo, entries) {
        let Some(group) = groups.iter_mut().find(|g| g.key == f.key && g.error.is_none()) else {
            continue;
        };
        let members: Vec<&DeviceReport> = f.reports.iter().map(|(_, r, _)| *r).collect();
        let before = *counts;
        let started = Instant::now();
        extend_group(opts, group, &members, f.targets.clone(), cache, counts)?;
        let ids: Vec<String> = f.targets.iter().map(|t| t.id.clone()).collect();
        let unable = why_not_run(group, &ids);
        if counts.made > before.made && unable.is_none() {
            crate::foundation::console::note(format!(
                "the phone's own CPU: {} emulated in {:.1} s (--no-arm64 turns this off)",
                ids.join(", "),
                started.elapsed().as_secs_f64()
            ));
        }
        group.notes.push(note(f.reports.len(), &ids, unable.as_deref()));
        for (i, report, wanted) in &f.reports {
            let mut e = entry(report, group, steps, &opts.thresholds, wanted);
            // Only the cores tried for this report are its reason (others of its inputs' reports
            // may have other chipsets).
            let own: Vec<String> = ids.iter().filter(|id| wanted.contains(id)).cloned().collect();
            let unable = why_not_run(group, &own);
            if let Some(why) = unable.as_deref().filter(|_| e.verdict.kind != VerdictKind::CpuFallback) {
                e.verdict.sentence += &format!("; the phone's own CPU EP could not run here: {why}");
                not_to_keep.push(report.content_sha256.clone());
            }
            entries[*i] = e;
        }
    }
    Ok(not_to_keep)
}

/// Why some of the phone's cores did not run: every such core with its status, and the first
/// one's error line; `None` when every one gave outputs.
fn why_not_run(group: &Group, ids: &[String]) -> Option<String> {
    let failed: Vec<_> = group
        .runs
        .iter()
        .filter(|r| ids.contains(&r.target) && !group.tensors.contains_key(&r.target))
        .collect();
    let first = failed.first()?;
    let line = first
        .error
        .as_deref()
        .and_then(|e| e.lines().next())
        .unwrap_or("no error text");
    let which: Vec<String> = failed.iter().map(|r| format!("{} {}", r.target, r.status)).collect();
    Some(format!("{}: {line}", which.join(", ")))
}

/// The group's note: how many reports wanted the phone's CPU, which cores ran, and what it costs.
fn note(reports: usize, ids: &[String], unable: Option<&str>) -> String {
    let reports = match reports {
        1 => "1 report on these inputs matched no simulation and was".to_string(),
        n => format!("{n} reports on these inputs matched no simulation and were"),
    };
    let ran = match unable {
        None => format!("ran, emulated as {}", ids.join(", ")),
        Some(why) => format!("was to run, emulated as {}, and could not: {why}", ids.join(", ")),
    };
    format!(
        "{reports} nearest a CPU EP, so the phone's own ARM64 CPU EP {ran} (an emulated run costs about 100-200x the x86 CPU EP's; --no-arm64 turns this off)"
    )
}
