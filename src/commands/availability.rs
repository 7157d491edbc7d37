//! `npu-audit targets`: what this machine can run, with which builds, and why not.

use anyhow::Result;
use serde::Serialize;

use crate::data::target::TargetSpec;
use crate::execution::runtime::{builds_for, platform_obstacle, Build, Provisioner, RuntimeChoice};
use crate::foundation::error::bad_flag;

/// One row of `npu-audit targets`.
#[derive(Debug, Clone, Serialize)]
pub struct TargetAvailability {
    pub target: String,
    pub ep: String,
    pub available: bool,
    /// `onnxruntime 1.31.1` (and the plugin), when available.
    pub runtime: Option<String>,
    /// Where the runtime was found, or that it will be fetched on first use.
    pub runtime_state: Option<String>,
    /// The libraries that would be loaded, when they are on the machine.
    pub libraries: Vec<String>,
    pub reason: Option<String>,
    pub description: String,
    /// For an emulated Arm core: the class of kernels ONNX Runtime picks on it (`dotprod`,
    /// `i8mm`, `i8mm+sve2-128`, `i8mm+sve-256`), which decides its bits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isa_class: Option<String>,
    /// For an emulated Arm core: the chipsets whose CPU cores it stands for (triage tries it for
    /// their reports).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stands_for: Vec<String>,
    /// For an emulated Arm core: whether the emulation is provisioned on this machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
    /// For an emulated Arm core not yet provisioned: what its first use fetches and costs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_use: Option<String>,
}

fn describe(spec: &TargetSpec) -> String {
    match (&spec.backend, spec.id.as_str()) {
        (_, "cpu") => "CPU EP, default graph optimizations (fusions such as QDQ -> QLinear kernels)".into(),
        (_, "cpu:noopt") => "CPU EP, graph optimizations off: the plain QDQ simulation".into(),
        (crate::data::target::Backend::Qnn(c), _) => format!("QNN HTP, {}", c.describe()),
        (crate::data::target::Backend::OpenVino { device }, _) => format!("OpenVINO EP on {device}"),
        (crate::data::target::Backend::DirectMl, _) => "DirectML EP (Windows GPUs/NPUs)".into(),
        (crate::data::target::Backend::Cuda, _) => "CUDA EP (NVIDIA GPU)".into(),
        (crate::data::target::Backend::TensorRt, _) => "TensorRT EP (NVIDIA GPU)".into(),
        _ => String::new(),
    }
}

/// Where a build is (words, and the library path when present).
fn runtime_state(p: &Provisioner, b: &'static Build) -> Result<(String, Option<String>)> {
    Ok(match p.find(b)? {
        Some(rt) => (
            format!("{}: {}", b.key, rt.source.describe()),
            Some(rt.library.display().to_string()),
        ),
        None => (
            format!("{}: fetched from the Python package index on first use", b.key),
            None,
        ),
    })
}

/// Availability of every known target on this machine (no runtime is downloaded).
pub fn availability(runtimes: &RuntimeChoice) -> Result<Vec<TargetAvailability>> {
    let p = Provisioner::new(runtimes)?;
    let mut rows = Vec::new();
    for spec in crate::data::target::all_known() {
        let (host, plugin) = builds_for(&spec).map_err(bad_flag)?;
        let obstacle = platform_obstacle(&spec.backend);
        let runtime = match plugin {
            Some(pl) => format!("{} on {}", pl.label(), host.label()),
            None => host.label(),
        };
        let mut libraries = Vec::new();
        let state = if obstacle.is_none() {
            let mut parts = Vec::new();
            for b in [Some(host), plugin].into_iter().flatten() {
                let (words, lib) = runtime_state(&p, b)?;
                parts.push(words);
                libraries.extend(lib);
            }
            Some(parts.join("; "))
        } else {
            None
        };
        rows.push(TargetAvailability {
            target: spec.id.clone(),
            ep: spec.backend.ep_name().into(),
            available: obstacle.is_none(),
            runtime: obstacle.is_none().then_some(runtime),
            runtime_state: state,
            libraries,
            reason: obstacle,
            description: describe(&spec),
            isa_class: None,
            stands_for: Vec::new(),
            provisioned: None,
            first_use: None,
        });
    }
    rows.extend(arm64_rows());
    Ok(rows)
}

/// One row per emulated Arm core (`cpu-arm64:<core>`): its class of kernels, the chipsets it
/// stands for, and whether the emulation is here or what its first use costs. Nothing is
/// provisioned.
fn arm64_rows() -> Vec<TargetAvailability> {
    use crate::execution::runtime::emulation::{self, State};
    let state = emulation::state();
    let runtime = format!(
        "onnxruntime {} aarch64 wheel under qemu",
        Build::get("cpu").map_or("?", |b| b.version.as_str())
    );
    crate::data::target::ARM_CORES
        .iter()
        .map(|core| {
            let (available, where_, reason, provisioned, first_use) = match &state {
                State::Ready(dir) => (
                    true,
                    Some(format!("emulation: {}", dir.display())),
                    None,
                    Some(true),
                    None,
                ),
                State::NotYet(dir) => (
                    true,
                    Some(format!(
                        "emulation: provisioned into {} on first use ({})",
                        dir.display(),
                        emulation::FIRST_USE
                    )),
                    None,
                    Some(false),
                    Some(emulation::FIRST_USE.to_string()),
                ),
                State::Unavailable(why) => (false, None, Some(why.clone()), None, None),
            };
            TargetAvailability {
                target: format!("cpu-arm64:{}", core.id),
                ep: "CPUExecutionProvider".into(),
                available,
                runtime: available.then(|| format!("{runtime} (-cpu {})", core.qemu_cpu)),
                runtime_state: where_,
                libraries: Vec::new(),
                reason,
                description: format!("ARM64 CPU EP, {} kernels: {}", core.isa_class, core.description),
                isa_class: Some(core.isa_class.to_string()),
                stands_for: crate::data::target::arm_cores::chipsets_of(core.id)
                    .into_iter()
                    .map(str::to_uppercase)
                    .collect(),
                provisioned,
                first_use,
            }
        })
        .collect()
}
