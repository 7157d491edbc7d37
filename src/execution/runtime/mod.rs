//! ONNX Runtime builds: the pinned catalogue, finding or fetching them, and what a target needs
//! from them.

pub mod catalog;
pub mod contexts;
pub mod emulation;
pub mod provision;
pub mod python;
pub mod wheel;

pub use catalog::{catalogue, Build};
pub use provision::{Provisioner, Runtime, RuntimeChoice, Source};

use std::path::PathBuf;
use std::sync::OnceLock;

/// One entry of a cache `runtime gc` sweeps besides the releases (a compiled QNN context, an
/// eval's records), as `runtime gc` lists it.
#[derive(Debug, Clone)]
pub struct GcEntry {
    pub dir: PathBuf,
    /// What the entry holds, in words (what a context was compiled for, what records are of).
    pub about: String,
    pub bytes: u64,
    /// Days since it was last used; `None`: no use recorded.
    pub idle_days: Option<f64>,
    /// Whether it is to go (with `--dry-run`: would go).
    pub remove: bool,
    /// Whether it was removed.
    pub removed: bool,
    pub why: String,
}

/// Whether `runtime gc` removes an entry last used `idle_days` ago, kept for `keep_days`, and why
/// in its words: every cache `gc` sweeps ages its entries by this one rule.
pub fn idle_verdict(idle_days: Option<f64>, keep_days: f64) -> (bool, String) {
    match idle_days {
        Some(d) if d < keep_days => (false, format!("used {d:.1} days ago")),
        Some(d) => (true, format!("unused for {d:.1} days")),
        None => (true, "no use recorded".to_string()),
    }
}

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

use crate::data::target::{Backend, ReleaseSpec, TargetSpec};

/// The catalogue family of a backend's build.
pub fn family_of(backend: &Backend) -> &'static str {
    match backend {
        Backend::Cpu | Backend::Arm64 { .. } => "cpu",
        Backend::Qnn(_) => "qnn",
        Backend::OpenVino { .. } => "openvino",
        Backend::DirectMl => "directml",
        Backend::Cuda | Backend::TensorRt => "gpu",
    }
}

/// The builds a target runs on: a host ONNX Runtime and, for plugin EPs, the plugin, at the
/// release the target names (the catalogue's default otherwise). `Err` says why a named release
/// does not exist; `@all` must have been expanded before.
pub fn builds_for(spec: &TargetSpec) -> Result<(&'static Build, Option<&'static Build>), String> {
    let family = family_of(&spec.backend);
    let unknown = |v: &str, key: &str| {
        let known: Vec<String> = catalog::catalogue()
            .releases(key)
            .iter()
            .map(|b| b.version.clone())
            .collect();
        format!(
            "{}: no release {v} of {key} in the catalogue (known: {})",
            spec.id,
            known.join(", ")
        )
    };
    let (version, host) = match &spec.release {
        None => (None, None),
        Some(ReleaseSpec::All) => return Err(format!("{}: @all was not expanded", spec.id)),
        Some(ReleaseSpec::Version { version, host }) => (Some(version.as_str()), host.as_deref()),
    };
    let build = match version {
        Some(v) => Build::release(family, v).ok_or_else(|| unknown(v, family))?,
        None => Build::get(family).ok_or_else(|| format!("no {family} build in the catalogue"))?,
    };
    let catalog::Role::PluginOn(host_family) = &build.role else {
        return Ok((build, None));
    };
    let host = match host {
        Some(h) => Build::release(host_family, h).ok_or_else(|| unknown(h, host_family))?,
        None => build
            .default_host()
            .ok_or_else(|| format!("{}: the catalogue knows no core {} runs on", spec.id, build.label()))?,
    };
    Ok((host, Some(build)))
}

/// Every release of a target's build that runs here, newest last (`@all`): for a plugin, those
/// found to run on some core.
pub fn releases_here(backend: &Backend) -> Vec<&'static Build> {
    catalog::catalogue()
        .releases(family_of(backend))
        .into_iter()
        .filter(|b| b.obstacle().is_none())
        .filter(|b| matches!(b.role, catalog::Role::Standalone) || !b.runs_on.is_empty())
        .collect()
}

/// Why a backend cannot run on this machine, if it cannot (platform and hardware, before any
/// runtime is looked for).
pub fn platform_obstacle(backend: &Backend) -> Option<String> {
    let family = family_of(backend);
    let build = Build::get(family)?;
    let host = match &build.role {
        catalog::Role::PluginOn(h) => Build::get(h),
        catalog::Role::Standalone => None,
    };
    [Some(build), host].into_iter().flatten().find_map(Build::obstacle)
}

/// The located runtimes of one target.
#[derive(Debug, Clone)]
pub struct TargetRuntime {
    pub host: Runtime,
    pub plugin: Option<Runtime>,
    /// For an emulated ARM64 target: the emulation its sessions run in (the `host` build is the
    /// x86 twin of the same release, for what the report says of the runtime).
    pub emulation: Option<emulation::Emulation>,
}
