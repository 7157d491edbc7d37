//! ONNX Runtime builds: the pinned catalogue, finding or fetching them, and what a target needs
//! from them.

pub mod catalog;
pub mod provision;
pub mod python;
pub mod wheel;

pub use catalog::{Build, BUILDS};
pub use provision::{Provisioner, Runtime, Source};

use crate::target::Backend;

/// The builds a backend runs on: a host ONNX Runtime and, for plugin EPs, the plugin.
pub fn builds_for(backend: &Backend) -> (&'static Build, Option<&'static Build>) {
    match backend {
        Backend::Cpu => (&catalog::CPU, None),
        Backend::Qnn(_) => (&catalog::CPU, Some(&catalog::QNN)),
        Backend::OpenVino { .. } => (&catalog::OPENVINO, None),
        Backend::DirectMl => (&catalog::DIRECTML, None),
        Backend::Cuda | Backend::TensorRt => (&catalog::GPU, None),
    }
}

/// Why a backend cannot run on this machine, if it cannot (platform and hardware, before any
/// runtime is looked for).
pub fn platform_obstacle(backend: &Backend) -> Option<String> {
    let (host, plugin) = builds_for(backend);
    [Some(host), plugin].into_iter().flatten().find_map(Build::obstacle)
}

/// The located runtimes of one target.
#[derive(Debug, Clone)]
pub struct TargetRuntime {
    pub host: Runtime,
    pub plugin: Option<Runtime>,
}
