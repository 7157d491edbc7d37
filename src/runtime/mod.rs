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
    let user: Vec<(String, String)> = spec
        .options
        .iter()
        .filter(|(k, _)| !k.starts_with("session."))
        .cloned()
        .collect();
    match &spec.backend {
        Backend::Cpu => EpSetup::Cpu { options: user },
        Backend::Qnn(chip) => {
            let plugin_lib = rt.plugin.as_ref().map(|p| p.library.clone()).unwrap_or_default();
            let backend_lib = plugin_lib
                .parent()
                .map(|d| d.join(catalog::qnn_htp_backend_name()))
                .unwrap_or_default();
            let mut options = vec![
                ("backend_path".to_string(), backend_lib.to_string_lossy().to_string()),
                ("htp_arch".to_string(), chip.htp_arch.to_string()),
                ("soc_model".to_string(), chip.soc_model.to_string()),
            ];
            for (k, v) in user {
                options.retain(|(ok, _)| ok != &k);
                options.push((k, v));
            }
            EpSetup::Plugin {
                ep_name: spec.backend.ep_name().into(),
                library: plugin_lib,
                options,
            }
        }
        Backend::OpenVino { device } => {
            let mut options = vec![("device_type".to_string(), device.clone())];
            for (k, v) in user {
                options.retain(|(ok, _)| ok != &k);
                options.push((k, v));
            }
            EpSetup::BuiltIn {
                ep_name: spec.backend.ep_name().into(),
                options,
            }
        }
        Backend::DirectMl | Backend::Cuda | Backend::TensorRt => EpSetup::BuiltIn {
            ep_name: spec.backend.ep_name().into(),
            options: user,
        },
    }
}
