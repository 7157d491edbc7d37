//! `npu-audit targets` and `npu-audit runtime list|install|path`: what this machine can run, with
//! which builds, and why not.

use anyhow::Result;
use serde::Serialize;

use crate::error::bad_flag;
use crate::runtime::{builds_for, platform_obstacle, Build, Provisioner, RuntimeChoice, BUILDS};
use crate::target::TargetSpec;

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
}

fn describe(spec: &TargetSpec) -> String {
    match (&spec.backend, spec.id.as_str()) {
        (_, "cpu") => "CPU EP, default graph optimizations (fusions such as QDQ -> QLinear kernels)".into(),
        (_, "cpu:noopt") => "CPU EP, graph optimizations off: the plain QDQ simulation".into(),
        (crate::target::Backend::Qnn(c), _) => format!("QNN HTP, {}", c.describe()),
        (crate::target::Backend::OpenVino { device }, _) => format!("OpenVINO EP on {device}"),
        (crate::target::Backend::DirectMl, _) => "DirectML EP (Windows GPUs/NPUs)".into(),
        (crate::target::Backend::Cuda, _) => "CUDA EP (NVIDIA GPU)".into(),
        (crate::target::Backend::TensorRt, _) => "TensorRT EP (NVIDIA GPU)".into(),
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
    for spec in crate::target::all_known() {
        let (host, plugin) = builds_for(&spec.backend);
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
        });
    }
    Ok(rows)
}

/// One row of `runtime list`.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeRow {
    pub key: String,
    pub package: String,
    pub version: String,
    pub supported_here: bool,
    pub state: String,
    pub library: Option<String>,
    pub sha256: Option<String>,
}

/// The catalogue with where each build is on this machine.
pub fn runtime_rows() -> Result<Vec<RuntimeRow>> {
    let p = Provisioner::new(&RuntimeChoice::default())?;
    let mut rows = Vec::new();
    for b in BUILDS {
        let supported = b.supports_this_platform();
        let found = if supported { p.find(b)? } else { None };
        rows.push(RuntimeRow {
            key: b.key.into(),
            package: b.package.into(),
            version: b.version.into(),
            supported_here: supported,
            state: match (&found, supported) {
                (_, false) => b.platform_reason.into(),
                (Some(rt), _) => rt.source.describe().into(),
                (None, true) => "not installed (fetched on first use)".into(),
            },
            library: found.as_ref().map(|r| r.library.display().to_string()),
            sha256: found.and_then(|r| r.sha256),
        });
    }
    Ok(rows)
}

/// Resolves `runtime install|path` keys (`all` = every build usable here). Naming a build this
/// machine cannot use is an error, not a download.
pub fn install_keys(keys: &[String]) -> Result<Vec<&'static Build>> {
    if keys.iter().any(|k| k == "all") {
        return Ok(BUILDS.iter().filter(|b| b.obstacle().is_none()).collect());
    }
    keys.iter()
        .map(|k| {
            let b = Build::get(k).ok_or_else(|| {
                bad_flag(format!(
                    "unknown runtime '{k}' (cpu, qnn, openvino, directml, gpu, all)"
                ))
            })?;
            match b.obstacle() {
                Some(why) => Err(bad_flag(format!("{} is of no use on this machine: {why}", b.label()))),
                None => Ok(b),
            }
        })
        .collect()
}
