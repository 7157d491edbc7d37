//! ONNX Runtime builds: the pinned catalogue, finding or fetching them, and what a target needs
//! from them.

pub mod catalog;
pub mod provision;
pub mod python;
pub mod wheel;

pub use catalog::{Build, BUILDS};
pub use provision::{Provisioner, Runtime, Source};

use crate::target::{Backend, TargetSpec};
use crate::worker::EpSetup;

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

/// How the worker attaches a target's EP, with the options the catalogue implies (QNN chipset)
/// and the user's.
pub fn ep_setup(spec: &TargetSpec, rt: &TargetRuntime) -> EpSetup {
    let mut options = spec.ep_options();
    let ep_name = spec.backend.ep_name().to_string();
    match &spec.backend {
        Backend::Cpu => EpSetup::Cpu { options },
        Backend::Qnn(_) => {
            let library = rt.plugin.as_ref().map(|p| p.library.clone()).unwrap_or_default();
            if !options.iter().any(|(k, _)| k == "backend_path") {
                let backend = library
                    .parent()
                    .map(|d| d.join(catalog::qnn_htp_backend_name()))
                    .unwrap_or_default();
                options.insert(0, ("backend_path".into(), backend.to_string_lossy().to_string()));
            }
            EpSetup::Plugin {
                ep_name,
                library,
                options,
            }
        }
        Backend::OpenVino { .. } | Backend::DirectMl | Backend::Cuda | Backend::TensorRt => {
            EpSetup::BuiltIn { ep_name, options }
        }
    }
}
