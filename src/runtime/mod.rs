//! ONNX Runtime builds: the pinned catalogue, finding or fetching them, and what a target needs
//! from them.

pub mod catalog;
pub mod provision;
pub mod python;
pub mod wheel;

pub use catalog::{Build, BUILDS};
pub use provision::{Provisioner, Runtime, RuntimeChoice, Source};

use std::path::PathBuf;
use std::sync::OnceLock;

/// How this process finds runtimes and caches: set once by the command line, read by the
/// provisioner and the fingerprint cache.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The cache of runtimes and fingerprints (`--cache-dir`, `NPU_AUDIT_CACHE`).
    pub cache_dir: Option<PathBuf>,
    /// The Python interpreter that fetches wheels (`--python`, `NPU_AUDIT_PYTHON`).
    pub python: Option<String>,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Sets this process's settings (the first call wins; later ones are ignored).
pub fn configure(settings: Settings) {
    let _ = SETTINGS.set(settings);
}

/// This process's settings (defaults when never configured).
pub fn settings() -> &'static Settings {
    SETTINGS.get_or_init(Settings::default)
}

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
