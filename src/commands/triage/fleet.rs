//! The fleet: reports grouped by chipset, device model, app version and runtime release, and the
//! rule the field uses to say who fixes it, measured:
//!
//! - every chipset's median SQNR is within `excess_db` of the CPU EP's (`cpu:noopt`) on the same
//!   inputs: the drift is the quantized model's own (fix the model), or none when every report
//!   is at or above `min_sqnr_db`;
//! - some chipsets' medians are more than `excess_db` below the CPU EP's: an NPU/runtime problem
//!   on those chipsets (a per-chipset model variant, or pinning them to the CPU);
//! - reports more than `outlier_db` below their chipset's median: device-specific.

use std::collections::BTreeMap;

use crate::analyses::accuracy::stats::median;
use crate::report::common::Num;
use crate::report::triage::{Fleet, FleetKind, GroupFigures, ReportEntry, Thresholds};

fn excess(e: &ReportEntry) -> Option<f64> {
    let (cpu, dev) = (e.cpu_sqnr_db?.0, e.sqnr_db?.0);
    Some(if cpu == dev { 0.0 } else { cpu - dev })
}

fn group_by(entries: &[&ReportEntry], key: impl Fn(&ReportEntry) -> String) -> Vec<GroupFigures> {
    let mut groups: BTreeMap<String, Vec<&ReportEntry>> = BTreeMap::new();
    for e in entries {
        groups.entry(key(e)).or_default().push(e);
    }
    groups
        .into_iter()
        .map(|(k, members)| {
            let sqnr: Vec<f64> = members.iter().filter_map(|e| e.sqnr_db.map(|n| n.0)).collect();
            let mut verdicts = BTreeMap::new();
            for e in &members {
                let kw = serde_json::to_value(e.verdict.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string));
                *verdicts.entry(kw.unwrap_or_default()).or_insert(0) += 1;
            }
            GroupFigures {
                key: k,
                reports: members.len(),
                median_sqnr_db: median(&sqnr).map(Num),
                min_sqnr_db: sqnr.iter().copied().min_by(|a, b| a.total_cmp(b)).map(Num),
                median_excess_db: median(&members.iter().filter_map(|e| excess(e)).collect::<Vec<_>>()).map(Num),
                verdicts,
            }
        })
        .collect()
}

/// The group key (JSON `by_chipset[].key`, `concentrated_on`) of the reports whose chipset could
/// not be identified: a key, never a chipset's name, so people read [`chipset_group_label`].
pub const UNIDENTIFIED_CHIPSET: &str = "unidentified";

/// The chipset a report is grouped under: its identified part number, else
/// [`UNIDENTIFIED_CHIPSET`].
pub fn chipset_of(e: &ReportEntry) -> String {
    e.identity
        .as_ref()
        .and_then(|i| i.chipset.clone())
        .unwrap_or_else(|| UNIDENTIFIED_CHIPSET.into())
}

/// A chipset group as people read it, in every sentence and rendering: the part number in
/// capitals (`SM8650`), or `chipset not identified`, which no one can take for a chipset.
pub fn chipset_group_label(key: &str) -> String {
    if key == UNIDENTIFIED_CHIPSET {
        "chipset not identified".into()
    } else {
        key.to_uppercase()
    }
}

fn field(v: Option<&String>) -> String {
    v.cloned().unwrap_or_else(|| "unknown".into())
}

fn runtime_of(e: &ReportEntry) -> String {
    let d = e.device.as_ref();
    let ort = field(d.and_then(|d| d.onnxruntime_version.as_ref()));
    let qnn = field(d.and_then(|d| d.qnn_release.as_ref()));
    format!("onnxruntime {ort}, qnn {qnn}")
}

/// Reports below their chipset's median by more than `outlier_db`.
fn outliers(measured: &[&ReportEntry], chipsets: &[GroupFigures], t: &Thresholds) -> Vec<String> {
    measured
        .iter()
        .filter(|e| {
            let c = chipsets.iter().find(|g| g.key == chipset_of(e));
            match (c.and_then(|g| g.median_sqnr_db), e.sqnr_db, c.map(|g| g.reports)) {
                (Some(m), Some(s), Some(n)) if n >= 3 => s.0 < m.0 - t.outlier_db,
                _ => false,
            }
        })
        .map(|e| e.path.clone())
        .collect()
}

/// A chipset's median SQNR and its difference from the CPU EP's, in the conclusion's words. The
/// difference is signed as every rendering signs it (the report's SQNR minus the CPU EP's,
/// negative below; never `-0.00`); an infinite SQNR is an output bit-identical to the golden
/// run's, and is said so in words rather than as `inf dB`.
fn figures_text(g: &GroupFigures) -> String {
    let chipset = chipset_group_label(&g.key);
    let sqnr = g.median_sqnr_db.map_or(f64::NAN, |n| n.0);
    let excess = g.median_excess_db.map_or(f64::NAN, |n| n.0);
    if sqnr == f64::INFINITY {
        // The excess is the CPU EP's SQNR minus this one: 0 when both are bit-identical.
        let cpu = if excess == 0.0 {
            "as the CPU EP's"
        } else {
            "the CPU EP's is not"
        };
        // A median of +inf says half the reports or more are exact, not that every one is.
        let min = g.min_sqnr_db.map_or(f64::INFINITY, |n| n.0);
        if min == f64::INFINITY {
            return format!("{chipset} bit-identical to the golden run ({cpu})");
        }
        return format!(
            "{chipset} bit-identical to the golden run in at least half its {} reports (the lowest {min:.2} dB; {cpu})",
            g.reports
        );
    }
    if excess == f64::INFINITY {
        return format!("{chipset} {sqnr:.2} dB (the CPU EP's output is bit-identical to the golden run)");
    }
    let diff = format!("{:+.2}", -excess);
    let diff = if diff == "-0.00" { "+0.00".to_string() } else { diff };
    format!("{chipset} {sqnr:.2} dB ({diff} dB vs the CPU EP)")
}

fn conclusion(chipsets: &[GroupFigures], t: &Thresholds) -> (FleetKind, String, Vec<String>) {
    let measured: Vec<&GroupFigures> = chipsets.iter().filter(|g| g.median_excess_db.is_some()).collect();
    if measured.is_empty() {
        return (
            FleetKind::Undecided,
            "no report could be measured against the CPU EP".into(),
            vec![],
        );
    }
    let concentrated: Vec<String> = measured
        .iter()
        .filter(|g| g.median_excess_db.is_some_and(|x| x.0 > t.excess_db))
        .map(|g| g.key.clone())
        .collect();
    let all: Vec<String> = measured.iter().map(|g| figures_text(g)).collect();
    if concentrated.len() == measured.len() && measured.len() > 1 {
        return (FleetKind::Npu, format!(
            "every chipset loses more than {} dB beyond the CPU EP on the same quantized model (median SQNR: {}): the NPU path they share (HTP arithmetic, the runtime release), not the quantization",
            t.excess_db, all.join(", ")
        ), concentrated);
    }
    if !concentrated.is_empty() {
        return (FleetKind::Npu, format!(
            "drift concentrated beyond the CPU EP by more than {} dB on {} (median SQNR: {}): an NPU/runtime problem there; ship a per-chipset variant or pin those chipsets to the CPU",
            t.excess_db, concentrated.iter().map(|c| chipset_group_label(c)).collect::<Vec<_>>().join(", "), all.join(", ")
        ), concentrated);
    }
    let floor_ok = t
        .min_sqnr_db
        .is_some_and(|f| measured.iter().all(|g| g.min_sqnr_db.is_some_and(|m| m.0 >= f)));
    if floor_ok {
        return (
            FleetKind::Healthy,
            format!(
                "every chipset within {} dB of the CPU EP and every report at or above {} dB (median SQNR: {})",
                t.excess_db,
                t.min_sqnr_db.unwrap_or_default(),
                all.join(", ")
            ),
            vec![],
        );
    }
    (FleetKind::Quantization, format!(
        "drift alike on every chipset and within {} dB of the CPU EP on the same quantized model (median SQNR: {}): the quantization loses it, not the NPU; fix the model",
        t.excess_db, all.join(", ")
    ), vec![])
}

/// The fleet of `entries` (copies counted once).
pub fn analyse(entries: &[ReportEntry], t: &Thresholds) -> Fleet {
    let unique: Vec<&ReportEntry> = entries.iter().filter(|e| e.duplicate_of.is_none()).collect();
    let measured: Vec<&ReportEntry> = unique.iter().copied().filter(|e| e.sqnr_db.is_some()).collect();
    let by_chipset = group_by(&measured, chipset_of);
    let (kind, sentence, concentrated_on) = conclusion(&by_chipset, t);
    Fleet {
        measured_reports: measured.len(),
        outliers: outliers(&measured, &by_chipset, t),
        by_device_model: group_by(&measured, |e| {
            field(e.device.as_ref().and_then(|d| d.device_model.as_ref()))
        }),
        by_app_version: group_by(&measured, |e| {
            field(e.device.as_ref().and_then(|d| d.app_version.as_ref()))
        }),
        by_runtime: group_by(&measured, runtime_of),
        by_chipset,
        kind,
        sentence,
        concentrated_on,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(sqnr: f64, excess: f64) -> GroupFigures {
        GroupFigures {
            key: "sm8550".into(),
            reports: 1,
            median_sqnr_db: Some(Num(sqnr)),
            min_sqnr_db: Some(Num(sqnr)),
            median_excess_db: Some(Num(excess)),
            verdicts: BTreeMap::new(),
        }
    }

    #[test]
    fn an_infinite_sqnr_is_said_in_words() {
        assert_eq!(
            figures_text(&group(f64::INFINITY, f64::NEG_INFINITY)),
            "SM8550 bit-identical to the golden run (the CPU EP's is not)"
        );
        assert_eq!(
            figures_text(&group(f64::INFINITY, 0.0)),
            "SM8550 bit-identical to the golden run (as the CPU EP's)"
        );
        let mixed = GroupFigures {
            reports: 2,
            min_sqnr_db: Some(Num(36.57)),
            ..group(f64::INFINITY, f64::NEG_INFINITY)
        };
        assert_eq!(
            figures_text(&mixed),
            "SM8550 bit-identical to the golden run in at least half its 2 reports (the lowest 36.57 dB; the CPU EP's is not)"
        );
        assert_eq!(
            figures_text(&group(31.5, f64::INFINITY)),
            "SM8550 31.50 dB (the CPU EP's output is bit-identical to the golden run)"
        );
        assert_eq!(
            figures_text(&group(31.5, 2.25)),
            "SM8550 31.50 dB (-2.25 dB vs the CPU EP)"
        );
        assert_eq!(
            figures_text(&group(31.5, 0.001)),
            "SM8550 31.50 dB (+0.00 dB vs the CPU EP)"
        );
    }
}
