//! Facts several stages of `compare` record in the report: every input tensor with its hash
//! (planned before anything runs, for baseline mode), and each worker's timing and runtime
//! (read while analysing and assembling).

use anyhow::Result;

use crate::data::inputs::InputSet;
use crate::execution::exec::job::Phase;
use crate::execution::exec::Outcome;
use crate::execution::runtime::{Runtime, TargetRuntime};
use crate::foundation::hash::sha256_hex;
use crate::report::compare::{InputTensorInfo, RuntimeInfo, Timing};

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
        run_ms: crate::analyses::accuracy::stats::median(runs),
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
        emulation: None,
        qnn_context: None,
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
    info.qnn_context = outcome
        .and_then(|o| o.result.as_ref())
        .and_then(|r| r.context.map(Into::into));
    if let Some(p) = &rt.plugin {
        info.plugin = Some(Box::new(runtime_info(p, None, hash(p))));
    }
    if let Some(e) = &rt.emulation {
        // The x86 twin's library is not what ran: the wheel in the emulation did.
        info.library = e.site.join("onnxruntime/capi").display().to_string();
        info.source = "emulated (runtime cache)".into();
        info.sha256 = None;
        info.emulation = Some(e.describe());
    }
    info
}
