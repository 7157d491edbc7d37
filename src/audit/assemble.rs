//! Turning worker outcomes and comparison results into report pieces: per-target rows, the
//! baseline (three-run) view, and the tolerances that would have passed.

use anyhow::Result;

use crate::exec::job::Phase;
use crate::exec::{Outcome, RunStatus};
use crate::hash::sha256_hex;
use crate::inputs::InputSet;
use crate::model::signature::TensorSummary;
use crate::model::{LoadedModel, Signature};
use crate::report::model::{
    BaselineDelta, InputTensorInfo, ModelInfo, Num, OutputMetrics, RuntimeInfo, TargetReport, Timing, Tolerance,
};
use crate::runtime::{Runtime, TargetRuntime};

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
        external_data: model.external_data_hashes()?,
        ir_version: model.proto.ir_version.unwrap_or(0),
        opset: model.opset(),
        producer: producer.trim().to_string(),
        inputs: signature.inputs.iter().map(TensorSummary::from).collect(),
        outputs: signature.outputs.iter().map(TensorSummary::from).collect(),
    })
}

/// Every input tensor of every sample, with the SHA-256 of its `.npy` encoding.
pub fn input_tensor_info(inputs: &InputSet) -> Result<Vec<InputTensorInfo>> {
    let mut out = Vec::new();
    for (k, sample) in inputs.samples.iter().enumerate() {
        for nt in sample {
            out.push(InputTensorInfo {
                sample: k,
                name: nt.name.clone(),
                dtype: nt.tensor.dtype().name().into(),
                shape: nt.tensor.shape.clone(),
                sha256: sha256_hex(&nt.tensor.to_npy_bytes()?),
            });
        }
    }
    Ok(out)
}

/// Median of a non-empty list (mean of the middle two for even lengths).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Timing of a worker that produced a result.
pub fn timing(outcome: &Outcome) -> Option<Timing> {
    let r = outcome.result.as_ref();
    // A phase's time is reported only once the phase completed.
    let past = |phase: Phase, v: f64| r.filter(|r| r.ok || r.phase > phase).map(|_| v);
    let runs = r.map(|r| r.run_ms.as_slice()).unwrap_or_default();
    Some(Timing {
        load_ms: r.and_then(|r| past(Phase::LoadRuntime, r.load_ms)),
        register_ms: r.and_then(|r| past(Phase::RegisterEp, r.register_ms)),
        session_create_ms: r.and_then(|r| past(Phase::CreateSession, r.session_create_ms)),
        run_ms: (!runs.is_empty()).then(|| median(runs)),
        run_ms_total: (!runs.is_empty()).then(|| runs.iter().sum()),
        wall_ms: outcome.wall_ms,
    })
}

fn runtime_info(rt: &Runtime, reported: Option<&str>, sha: Option<String>) -> RuntimeInfo {
    RuntimeInfo {
        package: rt.package.clone(),
        version: reported
            .map(str::to_string)
            .or_else(|| rt.version.clone())
            .unwrap_or_else(|| "unknown".into()),
        source: rt.source.describe().into(),
        library: rt.library.display().to_string(),
        sha256: rt.sha256.clone().or(sha),
        plugin: None,
    }
}

/// The runtime section of a target: the host build as the library reports itself, plus a plugin.
pub fn target_runtime_info(
    rt: &TargetRuntime,
    outcome: Option<&Outcome>,
    hash: &mut dyn FnMut(&Runtime) -> Option<String>,
) -> RuntimeInfo {
    let reported = outcome
        .and_then(|o| o.result.as_ref())
        .and_then(|r| r.ort_version.as_deref());
    let mut info = runtime_info(&rt.host, reported, hash(&rt.host));
    if let Some(p) = &rt.plugin {
        info.plugin = Some(Box::new(runtime_info(p, None, hash(p))));
    }
    info
}

/// `a - b` for dB values that may be infinite: equal infinities differ by 0.
fn db_difference(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        a - b
    }
}

/// Adds the baseline's error next to every other target's (the three-run view).
pub fn attach_baseline(targets: &mut [TargetReport], baseline_id: &str) -> bool {
    let Some(base) = targets
        .iter()
        .find(|t| t.id == baseline_id && t.status == RunStatus::Ok)
    else {
        return false;
    };
    let base_outputs: Vec<OutputMetrics> = base.outputs.clone();
    for t in targets
        .iter_mut()
        .filter(|t| t.id != baseline_id && t.status == RunStatus::Ok)
    {
        for out in t.outputs.iter_mut() {
            let Some(b) = base_outputs.iter().find(|b| b.name == out.name) else {
                continue;
            };
            out.baseline = Some(BaselineDelta {
                target: baseline_id.to_string(),
                sqnr_db: b.sqnr_db,
                max_abs: b.max_abs,
                excess_db: Num(db_difference(b.sqnr_db.0, out.sqnr_db.0)),
            });
        }
    }
    true
}

/// Rounds down to `decimals` decimal places (for minimums a gate can use).
fn floor_to(v: f64, decimals: i32) -> f64 {
    if !v.is_finite() {
        return v;
    }
    // The decimal text parses to the double nearest it, which is never above `v` because `v`
    // is a double at or above that decimal; and it prints back short (no 26.490000000000002).
    let mut units = (v * 10f64.powi(decimals)).floor() as i64;
    loop {
        let r: f64 = format!("{units}e-{decimals}").parse().unwrap_or(v);
        if r <= v {
            return r;
        }
        units -= 1;
    }
}

/// Rounds up to 3 significant digits (for maximums a gate can use).
pub fn ceil_3_significant(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return v;
    }
    // Three significant digits as an integer mantissa and a decimal exponent; parsing the decimal
    // text gives the double nearest to it, which is never below `v` because `v` is a double at or
    // below that decimal.
    let exponent = v.log10().floor() as i32 - 2;
    let mut mantissa = (v / 10f64.powi(exponent)).ceil() as u64;
    loop {
        let r: f64 = format!("{mantissa}e{exponent}").parse().unwrap_or(v);
        if r >= v {
            return r;
        }
        mantissa += 1;
    }
}

/// For each output, the loosest thresholds that every gated target that ran would have passed.
pub fn tolerances(outputs: &[String], targets: &[TargetReport]) -> Vec<Tolerance> {
    let gated: Vec<&TargetReport> = targets.iter().filter(|t| t.is_gated()).collect();
    outputs
        .iter()
        .filter_map(|name| {
            let metrics: Vec<(&str, &OutputMetrics)> = gated
                .iter()
                .filter_map(|t| {
                    t.outputs
                        .iter()
                        .find(|o| &o.name == name && o.error.is_none())
                        .map(|o| (t.id.as_str(), o))
                })
                .collect();
            if metrics.is_empty() {
                return None;
            }
            let min_sqnr = metrics.iter().map(|(_, o)| o.sqnr_db.0).fold(f64::INFINITY, f64::min);
            let max_abs = metrics.iter().map(|(_, o)| o.max_abs.0).fold(0.0, f64::max);
            let min_cos = metrics.iter().map(|(_, o)| o.cosine.0).fold(f64::INFINITY, f64::min);
            let top1: Vec<f64> = metrics.iter().filter_map(|(_, o)| o.top1_agreement).collect();
            Some(Tolerance {
                output: name.clone(),
                min_sqnr_db: Num(floor_to(min_sqnr, 2)),
                max_abs: Num(ceil_3_significant(max_abs)),
                min_cosine: Num(floor_to(min_cos, 6)),
                min_top1_agreement: (!top1.is_empty()).then(|| top1.iter().copied().fold(1.0, f64::min)),
                all_bit_exact: metrics.iter().all(|(_, o)| o.bit_identical == Some(o.elements)),
                targets: metrics.iter().map(|(id, _)| id.to_string()).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_for_gates_never_tightens() {
        for v in [0.0123, 0.0124999, 1.0, 7.77777, 123456.0, 3.3e-7] {
            let r = ceil_3_significant(v);
            assert!(r >= v, "{v} -> {r}");
            assert!(r <= v * 1.01 + 1e-300, "{v} -> {r}");
        }
        assert_eq!(ceil_3_significant(0.01231), 0.0124);
        assert_eq!(floor_to(23.456, 2), 23.45);
        assert_eq!(floor_to(26.49, 2), 26.49);
        assert_eq!(floor_to(-3.001, 2), -3.01);
        assert_eq!(floor_to(0.99888109999, 6), 0.998881);
        assert_eq!(floor_to(f64::INFINITY, 2), f64::INFINITY);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn infinite_db_differences() {
        assert_eq!(db_difference(f64::INFINITY, f64::INFINITY), 0.0);
        assert_eq!(db_difference(f64::INFINITY, 30.0), f64::INFINITY);
        assert_eq!(db_difference(40.0, 30.0), 10.0);
    }
}
