//! The catalogue of ONNX Runtime releases the audit can run on. It is data (`releases.toml`,
//! compiled in): per family (`cpu`, `qnn`, `openvino`, `directml`, `gpu`) its Python package,
//! default release and platforms; per release the wheel pinned by SHA-256 per platform, the
//! libraries it provides, and for a plugin the core releases it was found to run on (with the
//! date and machine) and the runtime's own words where it does not.

use std::sync::OnceLock;

use serde::Deserialize;

/// How a build is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A complete ONNX Runtime (`libonnxruntime`), loaded into a worker process.
    Standalone,
    /// An execution-provider plugin library registered into a release of the named family.
    PluginOn(String),
}

/// A wheel pinned for one platform.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedWheel {
    /// `linux-x86_64`, `windows-x86_64`, ...
    pub platform: String,
    /// The wheel platform tag pip is asked for.
    pub tag: String,
    pub file: String,
    pub sha256: String,
}

/// A library inside a wheel, pinned for one platform.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedLibrary {
    pub platform: String,
    pub path: String,
    pub sha256: String,
}

/// Core releases a plugin release was found not to run on, and how it failed there.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refusal {
    pub cores: Vec<String>,
    /// The worker phase that failed (`register_ep`, `create_session`).
    pub phase: String,
    /// The runtime's own error text.
    pub error: String,
}

/// One release of one family.
#[derive(Debug, Clone)]
pub struct Build {
    /// The family's key, used on the command line (`--runtime cpu=...`, `qnn:sm8650@2.6.0`).
    pub key: String,
    /// Python package (wheel) that ships it.
    pub package: String,
    pub version: String,
    pub role: Role,
    /// Environment variable that points at the default release's library (or its directory).
    pub env_var: String,
    /// Platforms (`os-arch`) the family's wheels exist for and its EP can run on.
    pub platforms: Vec<String>,
    /// Why the family cannot run on other platforms.
    pub platform_reason: String,
    /// Whether this is the family's default release (what a target without `@` runs).
    pub is_default: bool,
    pub wheels: Vec<PinnedWheel>,
    pub libraries: Vec<PinnedLibrary>,
    /// A plugin: the core releases it runs on, as measured, and when and where that was.
    pub runs_on: Vec<String>,
    pub measured: Option<String>,
    pub refused: Vec<Refusal>,
    /// A QNN plugin: the QNN SDK build it bundles.
    pub qnn_sdk: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FamilyEntry {
    key: String,
    package: String,
    role: String,
    #[serde(default)]
    host: Option<String>,
    default: String,
    #[serde(default)]
    default_host: Option<String>,
    env: String,
    platforms: Vec<String>,
    platform_reason: String,
    #[serde(default)]
    minimum: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseEntry {
    family: String,
    version: String,
    #[serde(default)]
    qnn_sdk: Option<String>,
    #[serde(default)]
    wheels: Vec<PinnedWheel>,
    #[serde(default)]
    libraries: Vec<PinnedLibrary>,
    #[serde(default)]
    runs_on: Vec<String>,
    #[serde(default)]
    measured: Option<String>,
    #[serde(default)]
    refused: Vec<Refusal>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogueFile {
    family: Vec<FamilyEntry>,
    release: Vec<ReleaseEntry>,
}

/// Every release of every family, and per plugin family the host release of its default.
#[derive(Debug)]
pub struct Catalogue {
    /// In file order: families, then their releases in version order.
    pub builds: Vec<Build>,
    default_hosts: Vec<(String, String)>,
}

/// The releases as the repository's `src/execution/runtime/releases.toml` lists them.
const RELEASES: &str = include_str!("releases.toml");

/// The catalogue, read once from the compiled-in data (a unit test checks that it parses).
pub fn catalogue() -> &'static Catalogue {
    static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();
    CATALOGUE.get_or_init(|| parse(RELEASES).unwrap_or_else(|e| panic!("src/execution/runtime/releases.toml: {e}")))
}

/// Parses catalogue data, checking that every release belongs to a family, every family's
/// default exists and every plugin's host family is a core.
fn parse(text: &str) -> Result<Catalogue, String> {
    let file: CatalogueFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut builds = Vec::new();
    let mut default_hosts = Vec::new();
    for f in &file.family {
        let role = match (f.role.as_str(), &f.host) {
            ("core", None) => Role::Standalone,
            ("plugin", Some(host)) => Role::PluginOn(host.clone()),
            (r, _) => return Err(format!("family {}: role {r} (core, or plugin with a host)", f.key)),
        };
        let mut releases: Vec<&ReleaseEntry> = file.release.iter().filter(|r| r.family == f.key).collect();
        releases.sort_by(|a, b| version_order(&a.version, &b.version));
        if let Some(min) = &f.minimum {
            releases.retain(|r| version_order(&r.version, min).is_ge());
        }
        if !releases.iter().any(|r| r.version == f.default) {
            return Err(format!("family {}: default {} is not a release", f.key, f.default));
        }
        if let Some(host) = &f.default_host {
            default_hosts.push((f.key.clone(), host.clone()));
        }
        for r in releases {
            builds.push(Build {
                key: f.key.clone(),
                package: f.package.clone(),
                version: r.version.clone(),
                role: role.clone(),
                env_var: f.env.clone(),
                platforms: f.platforms.clone(),
                platform_reason: f.platform_reason.clone(),
                is_default: r.version == f.default,
                wheels: r.wheels.clone(),
                libraries: r.libraries.clone(),
                runs_on: r.runs_on.clone(),
                measured: r.measured.clone(),
                refused: r.refused.clone(),
                qnn_sdk: r.qnn_sdk.clone(),
            });
        }
    }
    if let Some(r) = file
        .release
        .iter()
        .find(|r| !file.family.iter().any(|f| f.key == r.family))
    {
        return Err(format!("release {} {}: no such family", r.family, r.version));
    }
    Ok(Catalogue { builds, default_hosts })
}

/// Orders `1.9.0` before `1.24.1`: numerically, part by part.
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parts(a).cmp(&parts(b))
}

/// This machine's platform as the catalogue names platforms (`linux-x86_64`).
pub fn this_platform() -> String {
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

impl Catalogue {
    /// Every release of a family, oldest first.
    pub fn releases(&self, key: &str) -> Vec<&Build> {
        self.builds.iter().filter(|b| b.key == key).collect()
    }

    /// Every family key, in catalogue order.
    pub fn families(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = Vec::new();
        for b in &self.builds {
            if !keys.contains(&b.key.as_str()) {
                keys.push(&b.key);
            }
        }
        keys
    }
}

impl Build {
    /// The default release of a family.
    pub fn get(key: &str) -> Option<&'static Build> {
        catalogue().builds.iter().find(|b| b.key == key && b.is_default)
    }

    /// A named release of a family.
    pub fn release(key: &str, version: &str) -> Option<&'static Build> {
        catalogue().builds.iter().find(|b| b.key == key && b.version == version)
    }

    /// The host release a plugin release runs on when none is named: for the family's default
    /// release, the pinned default host; for any other, the newest core it was found to run on.
    pub fn default_host(&self) -> Option<&'static Build> {
        let Role::PluginOn(family) = &self.role else {
            return None;
        };
        if self.is_default {
            let pinned = catalogue().default_hosts.iter().find(|(k, _)| *k == self.key);
            if let Some((_, v)) = pinned {
                return Build::release(family, v);
            }
        }
        catalogue()
            .releases(family)
            .into_iter()
            .rev()
            .find(|core| self.runs_on.contains(&core.version))
    }

    /// How this plugin release was found to fail on a core release, if it was.
    pub fn refusal_on(&self, core: &str) -> Option<&Refusal> {
        self.refused.iter().find(|r| r.cores.iter().any(|c| c == core))
    }

    /// Whether the family's wheels exist for the machine this runs on.
    pub fn supports_this_platform(&self) -> bool {
        self.platforms.contains(&this_platform())
    }

    /// The wheel pinned for this machine's platform, if the catalogue pins one.
    pub fn pinned_wheel(&self) -> Option<&PinnedWheel> {
        let here = this_platform();
        self.wheels.iter().find(|w| w.platform == here)
    }

    /// The pinned SHA-256 of a library of this release on this platform (`path` inside the wheel).
    pub fn pinned_library(&self, path: &str) -> Option<&str> {
        let here = this_platform();
        self.libraries
            .iter()
            .find(|l| l.platform == here && l.path == path)
            .map(|l| l.sha256.as_str())
    }

    /// Why the build is of no use on this machine, if it is not: no wheel for the platform, or (the
    /// GPU build) no NVIDIA driver.
    pub fn obstacle(&self) -> Option<String> {
        if !self.supports_this_platform() {
            return Some(self.platform_reason.clone());
        }
        if self.key == "gpu" && !nvidia_driver_present() {
            return Some("no NVIDIA GPU driver found (CUDA and TensorRT need an NVIDIA GPU)".into());
        }
        None
    }

    /// Path of the main library inside the wheel on this platform.
    pub fn main_lib(&self) -> String {
        let os = std::env::consts::OS;
        match (&self.role, os) {
            (Role::PluginOn(_), "windows") => "onnxruntime_qnn/onnxruntime_providers_qnn.dll".into(),
            (Role::PluginOn(_), _) => "onnxruntime_qnn/libonnxruntime_providers_qnn.so".into(),
            (Role::Standalone, "windows") => "onnxruntime/capi/onnxruntime.dll".into(),
            (Role::Standalone, "macos") => {
                format!("onnxruntime/capi/libonnxruntime.{}.dylib", self.version)
            }
            (Role::Standalone, _) => format!("onnxruntime/capi/libonnxruntime.so.{}", self.version),
        }
    }

    /// File name of the main library (what to look for in a directory given by the user).
    pub fn main_lib_name(&self) -> String {
        let lib = self.main_lib();
        lib.rsplit('/').next().unwrap_or(&lib).to_string()
    }

    /// "onnxruntime-qnn 2.7.0".
    pub fn label(&self) -> String {
        format!("{} {}", self.package, self.version)
    }
}

fn nvidia_driver_present() -> bool {
    if cfg!(windows) {
        std::path::Path::new("C:\\Windows\\System32\\nvcuda.dll").exists()
    } else {
        std::path::Path::new("/proc/driver/nvidia/version").exists()
    }
}

/// QNN backend library that sits beside the QNN plugin (the HTP backend; on x86-64 Linux it
/// contains Qualcomm's HTP simulator).
pub fn qnn_htp_backend_name() -> &'static str {
    if cfg!(windows) {
        "QnnHtp.dll"
    } else {
        "libQnnHtp.so"
    }
}

/// Whether a file name inside a wheel is a shared library worth extracting.
pub fn is_shared_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    // The Python bindings are not needed: the audit loads the C API library directly.
    if name.contains("pybind11") || name.contains("cpython") {
        return false;
    }
    name.ends_with(".dll") || name.ends_with(".dylib") || name.ends_with(".so") || name.contains(".so.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_catalogue_parses_and_every_plugin_runs_on_a_listed_core() {
        let c = parse(RELEASES).expect("releases.toml");
        for key in ["cpu", "qnn", "openvino", "directml", "gpu"] {
            assert!(c.builds.iter().any(|b| b.key == key && b.is_default), "{key}");
        }
        for b in c.builds.iter().filter(|b| matches!(b.role, Role::PluginOn(_))) {
            let Role::PluginOn(host) = &b.role else { unreachable!() };
            assert!(c.builds.iter().any(|h| &h.key == host && h.role == Role::Standalone));
            for core in &b.runs_on {
                assert!(
                    c.builds.iter().any(|h| &h.key == host && &h.version == core),
                    "{} on {core}",
                    b.label()
                );
            }
        }
    }

    #[test]
    fn a_plugin_release_runs_on_the_newest_core_it_was_found_to_run_on() {
        assert_eq!(Build::get("qnn").unwrap().default_host().unwrap().version, "1.31.1");
        assert_eq!(
            Build::release("qnn", "2.3.0").unwrap().default_host().unwrap().version,
            "1.27.0"
        );
        assert_eq!(
            Build::release("qnn", "2.6.0").unwrap().default_host().unwrap().version,
            "1.32.0"
        );
        let refusal = Build::release("qnn", "2.3.0").unwrap().refusal_on("1.31.1").unwrap();
        assert!(refusal.error.contains("ort_version_supported=0"));
    }

    #[test]
    fn versions_order_numerically() {
        assert!(version_order("1.9.0", "1.24.1").is_lt());
        assert!(version_order("2.10.0", "2.7.0").is_gt());
    }

    #[test]
    fn bad_catalogue_data_is_refused() {
        assert!(parse("[[family]]\nkey = \"x\"\n").is_err());
        let orphan = "[[family]]\nkey=\"cpu\"\npackage=\"p\"\nrole=\"core\"\ndefault=\"1.0.0\"\nenv=\"E\"\nplatforms=[]\nplatform_reason=\"r\"\n[[release]]\nfamily=\"cpu\"\nversion=\"1.0.0\"\n[[release]]\nfamily=\"zz\"\nversion=\"1\"\n";
        assert!(parse(orphan).unwrap_err().contains("no such family"));
    }

    #[test]
    fn shared_libraries_are_recognised() {
        assert!(is_shared_library("onnxruntime/capi/libonnxruntime.so.1.31.1"));
        assert!(is_shared_library("onnxruntime_qnn.libs/libc++-71bc274c.so.1.0"));
        assert!(is_shared_library("onnxruntime/capi/onnxruntime.dll"));
        assert!(!is_shared_library("onnxruntime/capi/onnxruntime_validation.py"));
        assert!(!is_shared_library("onnxruntime_qnn/Qualcomm_LICENSE.pdf"));
        assert!(!is_shared_library(
            "onnxruntime/capi/onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so"
        ));
    }
}
