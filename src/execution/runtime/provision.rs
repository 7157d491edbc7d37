//! Finding an ONNX Runtime build on this machine, or fetching it: command-line flag, environment
//! variable, installed Python package, the tool's cache, and finally `pip download` of the
//! official wheel into the cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::catalog::{Build, Role};
use super::python::{installed_packages, pip_download, InstalledPackage};
use super::wheel::{extract_shared_libraries, LibFile};
use crate::foundation::error::{bad_runtime_choice, runtime_unavailable};
use crate::foundation::hash::sha256_file;

/// Where a runtime was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    Flag,
    Env,
    PythonPackage,
    Cache,
    Fetched,
}

impl Source {
    /// Words for tables.
    pub fn describe(self) -> &'static str {
        match self {
            Source::Flag => "--runtime flag",
            Source::Env => "environment variable",
            Source::PythonPackage => "installed Python package",
            Source::Cache => "npu-audit cache",
            Source::Fetched => "fetched now",
        }
    }
}

/// A located build, ready to be loaded by a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Runtime {
    pub key: String,
    pub package: String,
    /// The pinned version, or `None` for a library the user pointed at (the worker then reports
    /// the version the library itself states).
    pub version: Option<String>,
    pub source: Source,
    /// The main library: `libonnxruntime` or the EP plugin.
    pub library: PathBuf,
    /// SHA-256 of the main library, when known without hashing at run time.
    pub sha256: Option<String>,
}

/// What the cache stores beside the extracted libraries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheManifest {
    pub package: String,
    pub version: String,
    pub wheel: String,
    pub wheel_sha256: String,
    pub files: Vec<LibFile>,
}

/// Locates and fetches runtimes for one invocation of the tool.
pub struct Provisioner {
    overrides: HashMap<String, PathBuf>,
    env: HashMap<String, PathBuf>,
    cache_root: PathBuf,
    python: OnceLock<HashMap<String, InstalledPackage>>,
}

/// Where the user pointed the tool at runtimes: `--runtime KEY=PATH` flags, and the builds given
/// by their environment variable `NPU_AUDIT_RUNTIME_<KEY>` (or its flag `--runtime-<key>`).
#[derive(Debug, Clone, Default)]
pub struct RuntimeChoice {
    pub flags: Vec<RuntimeOverride>,
    /// (build key, path) from the environment.
    pub env: Vec<(String, PathBuf)>,
}

impl crate::foundation::userfile::Reads for RuntimeChoice {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        let RuntimeChoice { flags, env } = self;
        set.add_all(flags.iter().map(|f| &f.path));
        set.add_all(env.iter().map(|(_, p)| p));
    }
}

/// `--runtime KEY=PATH`: the library (or directory) standing in for a build's default release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeOverride {
    pub key: String,
    pub path: PathBuf,
}

impl RuntimeOverride {
    /// Parses `KEY=PATH`, the key one of the catalogue's builds.
    pub fn parse(text: &str) -> Result<RuntimeOverride> {
        let (k, v) = text.split_once('=').filter(|(_, v)| !v.is_empty()).ok_or_else(|| {
            bad_runtime_choice(format!(
                "'{text}' is not KEY=PATH (KEY: cpu, qnn, openvino, directml, gpu)"
            ))
        })?;
        if Build::get(k).is_none() {
            return Err(bad_runtime_choice(format!(
                "'{text}': unknown runtime '{k}' (cpu, qnn, openvino, directml, gpu)"
            )));
        }
        Ok(RuntimeOverride {
            key: k.to_string(),
            path: PathBuf::from(v),
        })
    }
}

/// The per-user cache: the configured directory (`--cache-dir`, `NPU_AUDIT_CACHE`), else the
/// platform cache directory + `npu-audit`.
pub fn cache_root() -> PathBuf {
    match super::settings().cache_dir.clone() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("npu-audit"),
    }
}

impl Provisioner {
    /// A provisioner that honours the user's choice of runtimes.
    pub fn new(choice: &RuntimeChoice) -> Result<Provisioner> {
        let overrides: HashMap<String, PathBuf> =
            choice.flags.iter().map(|f| (f.key.clone(), f.path.clone())).collect();
        Ok(Provisioner {
            overrides,
            env: choice.env.iter().cloned().collect(),
            cache_root: cache_root(),
            python: OnceLock::new(),
        })
    }

    fn cache_dir(&self, build: &Build) -> PathBuf {
        self.cache_root.join("runtimes").join(format!(
            "{}-{}-{}-{}",
            build.package,
            build.version,
            std::env::consts::OS,
            std::env::consts::ARCH
        ))
    }

    fn python_packages(&self) -> &HashMap<String, InstalledPackage> {
        self.python.get_or_init(|| {
            let mut wanted: Vec<(&str, String)> = Vec::new();
            for b in super::catalog::catalogue().builds.iter().filter(|b| b.is_default) {
                wanted.push((b.package.as_str(), b.main_lib()));
            }
            installed_packages(&wanted, &self.cache_root.join("python-packages.json"))
        })
    }

    /// The library the user pointed at for a family (`--runtime KEY=PATH`, the environment): it
    /// stands in for the family's default release only.
    fn user_choice(&self, build: &'static Build) -> Result<Option<Runtime>> {
        if !build.is_default {
            return Ok(None);
        }
        if let Some(path) = self.overrides.get(&build.key) {
            let lib = resolve_user_path(build, path)
                .map_err(|e| bad_runtime_choice(format!("--runtime {}={}: {e}", build.key, path.display())))?;
            return Ok(Some(user_runtime(build, lib, Source::Flag)));
        }
        if let Some(path) = self.env.get(&build.key) {
            let lib = resolve_user_path(build, path).map_err(|e| {
                bad_runtime_choice(format!(
                    "--runtime-{} (or {})={}: {e}",
                    build.key,
                    build.env_var,
                    path.display()
                ))
            })?;
            return Ok(Some(user_runtime(build, lib, Source::Env)));
        }
        Ok(None)
    }

    /// An installed Python package of exactly this release, whose library is the pinned one
    /// (when the catalogue pins it and pip recorded a hash).
    fn installed_package(&self, build: &'static Build) -> Option<Runtime> {
        let pkg = self.python_packages().get(&build.package)?;
        let lib = pkg.root.join(build.main_lib());
        if pkg.version != build.version || !lib.is_file() {
            return None;
        }
        let pinned = build.pinned_library(&build.main_lib());
        if let (Some(pin), Some(found)) = (pinned, &pkg.sha256) {
            if pin != found {
                crate::foundation::console::detail(format!(
                    "{}: the installed Python package's library is not the pinned one; not used",
                    build.label()
                ));
                return None;
            }
        }
        Some(Runtime {
            key: build.key.clone(),
            package: build.package.clone(),
            version: Some(build.version.clone()),
            source: Source::PythonPackage,
            library: lib,
            sha256: pkg.sha256.clone(),
        })
    }

    /// Finds a build without fetching. `Ok(None)` means it has to be fetched (also when the
    /// cached copy is damaged: a library is never loaded unverified). A cached release found is
    /// held for this process (see [`take_lease`]).
    pub fn find(&self, build: &'static Build) -> Result<Option<Runtime>> {
        if let Some(rt) = self.user_choice(build)? {
            return Ok(Some(rt));
        }
        if let Some(rt) = self.installed_package(build) {
            return Ok(Some(rt));
        }
        let dir = self.cache_dir(build);
        if !dir.join("manifest.json").is_file() {
            return Ok(None);
        }
        take_lease(&dir, build)?;
        let Some(manifest) = read_manifest(&dir).filter(|m| matches_pin(build, m)) else {
            return Ok(None);
        };
        if let Err(why) = verify_release(&dir, &manifest) {
            crate::foundation::console::note(format!(
                "the cached {} is damaged ({why}): fetching it again",
                build.label()
            ));
            return Ok(None);
        }
        mark_used(&dir);
        Ok(Some(cached_runtime(build, &dir, &manifest, Source::Cache)))
    }

    /// Finds a build, fetching the official wheel into the cache if it is nowhere on the machine.
    pub fn get(&self, build: &'static Build) -> Result<Runtime> {
        let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::Provision);
        if let Some(why) = build.obstacle() {
            return Err(runtime_unavailable(format!(
                "{} is not available here: {why}",
                build.label()
            )));
        }
        if let Some(rt) = self.find(build)? {
            crate::foundation::console::detail(format!(
                "{}: {} ({})",
                build.label(),
                rt.library.display(),
                rt.source.describe()
            ));
            return Ok(rt);
        }
        self.fetch(build)
    }

    /// Downloads and extracts a build into the cache (under a lock, so concurrent audits fetch once).
    pub fn fetch(&self, build: &'static Build) -> Result<Runtime> {
        let dir = self.cache_dir(build);
        let parent = dir.parent().context("cache directory has no parent")?;
        std::fs::create_dir_all(parent)
            .map_err(|e| runtime_unavailable(format!("cannot create the runtime cache {}: {e}", parent.display())))?;
        // Held before the fetch lock, as `find` holds it before reading the cache.
        take_lease(&dir, build)?;
        let lock_path = parent.join(format!(".{}-{}.lock", build.package, build.version));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| runtime_unavailable(format!("cannot lock {}: {e}", lock_path.display())))?;
        lock.lock()
            .map_err(|e| runtime_unavailable(format!("cannot lock {}: {e}", lock_path.display())))?;
        let damaged = match read_manifest(&dir).filter(|m| matches_pin(build, m)) {
            Some(manifest) => match verify_release(&dir, &manifest) {
                Ok(()) => {
                    mark_used(&dir);
                    return Ok(cached_runtime(build, &dir, &manifest, Source::Cache));
                }
                Err(why) => Some(why),
            },
            None => None,
        };
        crate::foundation::console::note(format!(
            "fetching {} from the Python package index ({}; cached in {})",
            build.label(),
            if damaged.is_some() {
                "its cached copy is damaged"
            } else {
                "first use"
            },
            dir.display()
        ));
        let (staging, manifest) = download(build, parent).map_err(|e| match &damaged {
            // The damaged copy is not used either way: say why the fetch was needed.
            Some(why) => e.context(format!(
                "the cached {} is damaged ({why}), and fetching it again failed",
                build.label()
            )),
            None => e,
        })?;
        // Under the lock nobody else writes `dir`; whatever is there is incomplete or stale.
        if dir.exists() {
            std::fs::remove_dir_all(&dir).ok();
        }
        std::fs::remove_file(staging.path().join(crate::foundation::process::OWNER_MARKER))?;
        std::fs::rename(staging.path(), &dir)
            .map_err(|e| runtime_unavailable(format!("cannot move the runtime into {}: {e}", dir.display())))?;
        let _ = staging.keep();
        mark_used(&dir);
        // Every file was hashed as it was extracted: recorded as checked.
        record_verified(&dir, &manifest);
        let total: u64 = manifest.files.iter().map(|f| f.size).sum();
        let pin = if build.pinned_wheel().is_some() {
            "pinned"
        } else {
            "not pinned for this platform"
        };
        crate::foundation::console::note(format!(
            "installed {} ({} libraries, {:.0} MB, wheel sha256 {}, {pin})",
            build.label(),
            manifest.files.len(),
            total as f64 / 1e6,
            &manifest.wheel_sha256[..16]
        ));
        Ok(cached_runtime(build, &dir, &manifest, Source::Fetched))
    }

    /// The cache manifest of an installed build, for `runtime list`.
    pub fn cache_manifest(&self, build: &Build) -> Option<(PathBuf, CacheManifest)> {
        let dir = self.cache_dir(build);
        read_manifest(&dir).map(|m| (dir, m))
    }
}

/// The name of the file whose modification time says when a cached build was last used.
pub const LAST_USED: &str = ".last-used";

/// Records that a cached build was used now (`runtime gc` keeps what was used recently).
fn mark_used(dir: &Path) {
    let _ = std::fs::write(dir.join(LAST_USED), b"");
}

/// Whether a cached build came from the wheel the catalogue pins for this platform (an entry
/// made before the pin, or from another wheel, is fetched again).
fn matches_pin(build: &Build, manifest: &CacheManifest) -> bool {
    build.pinned_wheel().is_none_or(|w| w.sha256 == manifest.wheel_sha256)
}

/// Downloads the build's wheel (the pinned one, its SHA-256 checked) next to the cache and
/// extracts its libraries into a staging directory; returns it and its manifest.
fn download(build: &'static Build, parent: &Path) -> Result<(tempfile::TempDir, CacheManifest)> {
    // Under the lock, what a fetch of this build killed earlier left behind is swept.
    let prefix = format!(".fetch-{}-{}-", build.package, build.version);
    crate::foundation::process::sweep_stale(parent, &prefix);
    let temp = || -> Result<tempfile::TempDir> {
        let d = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir_in(parent)
            .map_err(|e| runtime_unavailable(format!("cannot create a temporary directory: {e}")))?;
        crate::foundation::process::mark_owned(d.path())?;
        Ok(d)
    };
    let downloaded = temp()?;
    let pin = build.pinned_wheel();
    let wheel = pip_download(
        &build.package,
        &build.version,
        &build.env_var,
        pin.map(|w| w.tag.as_str()),
        downloaded.path(),
    )?;
    let wheel_sha256 = sha256_file(&wheel)?;
    if let Some(w) = pin.filter(|w| w.sha256 != wheel_sha256) {
        return Err(runtime_unavailable(format!(
            "the {} wheel pip fetched ({}) has SHA-256 {wheel_sha256}, not the pinned {} of {}: refused",
            build.label(),
            wheel
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            w.sha256,
            w.file
        )));
    }
    let staging = temp()?;
    let files = extract_shared_libraries(&wheel, staging.path())
        .map_err(|e| runtime_unavailable(format!("cannot extract {}: {e:#}", wheel.display())))?;
    if !files.iter().any(|f| f.path == build.main_lib()) {
        return Err(runtime_unavailable(format!(
            "the {} wheel has no {}",
            build.label(),
            build.main_lib()
        )));
    }
    let manifest = CacheManifest {
        package: build.package.clone(),
        version: build.version.clone(),
        wheel: wheel
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        wheel_sha256,
        files,
    };
    std::fs::write(
        staging.path().join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    Ok((staging, manifest))
}

/// The manifest of a complete cached release in `dir` (for `runtime gc`).
pub fn read_cached_manifest(dir: &Path) -> Option<CacheManifest> {
    read_manifest(dir)
}

/// What became of a cached release `runtime gc` meant to remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Removed,
    /// A running audit holds it (or a fetch of it runs): kept.
    InUse,
    /// The lock files or the directory could not be handled.
    Failed,
}

/// Removes a cached release under its fetch lock and its use lock, both taken exclusively without
/// waiting: never while a fetch of it runs or an audit holds it ([`take_lease`]).
pub fn remove_cached(dir: &Path, package: &str, version: &str) -> Removal {
    let Some(parent) = dir.parent() else {
        return Removal::Failed;
    };
    let open = |path: PathBuf| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
    };
    let (Ok(fetching), Ok(using)) = (
        open(parent.join(format!(".{package}-{version}.lock"))),
        open(use_lock_path(parent, package, version)),
    ) else {
        return Removal::Failed;
    };
    for lock in [&fetching, &using] {
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Removal::InUse,
            Err(std::fs::TryLockError::Error(_)) => return Removal::Failed,
        }
    }
    if std::fs::remove_dir_all(dir).is_ok() {
        Removal::Removed
    } else {
        Removal::Failed
    }
}

/// Whether a running audit holds a cached release (for `runtime gc --dry-run`).
pub fn in_use(dir: &Path, package: &str, version: &str) -> bool {
    let Some(parent) = dir.parent() else { return false };
    std::fs::File::open(use_lock_path(parent, package, version))
        .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)))
}

/// The lock a process holds shared while it uses a release, beside its fetch lock.
fn use_lock_path(parent: &Path, package: &str, version: &str) -> PathBuf {
    parent.join(format!(".{package}-{version}.use"))
}

/// The use locks this process holds, by path: kept until it exits.
static LEASES: std::sync::Mutex<Vec<(PathBuf, std::fs::File)>> = std::sync::Mutex::new(Vec::new());

/// Holds a shared lock on the release in `dir` until this process exits, from its provisioning
/// until its workers (which load the libraries) are long done: `runtime gc` removes a release only
/// when it can lock it exclusively. Waits while a gc is removing it (the caller then finds it gone).
/// A cache this process may not write (shared read-only) is used without a lease: no gc can
/// remove anything from it either.
fn take_lease(dir: &Path, build: &Build) -> Result<()> {
    let parent = dir.parent().context("cache directory has no parent")?;
    let path = use_lock_path(parent, &build.package, &build.version);
    let mut leases = LEASES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if leases.iter().any(|(p, _)| *p == path) {
        return Ok(());
    }
    let hold = || -> std::io::Result<std::fs::File> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .or_else(|_| std::fs::File::open(&path))?;
        file.lock_shared()?;
        Ok(file)
    };
    match hold() {
        Ok(file) => leases.push((path, file)),
        Err(e) => crate::foundation::console::detail(format!(
            "{}: no lease on the cached release ({}: {e})",
            build.label(),
            path.display()
        )),
    }
    Ok(())
}

/// The record, in a cached release's directory, of the files whose SHA-256 was checked.
const VERIFIED: &str = ".verified.json";

/// What a cached file looked like when its SHA-256 was found to be the manifest's: any rewrite
/// changes one of these (a rewrite that puts the modification time back still changes the inode
/// change time; a copy changes the inode), and the next use hashes the file again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    sha256: String,
    size: u64,
    modified_ns: i128,
    changed_ns: i128,
    device: u64,
    inode: u64,
}

fn stamp_of(path: &Path, sha256: &str) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let (modified_ns, changed_ns, device, inode) = {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        (
            ns(m.mtime(), m.mtime_nsec()),
            ns(m.ctime(), m.ctime_nsec()),
            m.dev(),
            m.ino(),
        )
    };
    #[cfg(not(unix))]
    let (modified_ns, changed_ns, device, inode) = {
        let t = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
        (t.as_nanos() as i128, 0, 0, 0)
    };
    Some(Stamp {
        sha256: sha256.to_string(),
        size: m.len(),
        modified_ns,
        changed_ns,
        device,
        inode,
    })
}

/// Checks every file of a cached release (the main library, the plugin's backends and bundled
/// libraries alike: whatever a worker may load) against the SHA-256 its manifest recorded. Only a
/// file whose stamp changed since it was last checked is hashed, so a use costs a `stat` per
/// file. `Err` says which file differs.
fn verify_release(dir: &Path, manifest: &CacheManifest) -> Result<(), String> {
    let recorded: HashMap<String, Stamp> = std::fs::read(dir.join(VERIFIED))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mut checked = HashMap::with_capacity(manifest.files.len());
    for f in &manifest.files {
        let path = dir.join(&f.path);
        // Taken before hashing: a change while it is hashed shows at the next use.
        let stamp = stamp_of(&path, &f.sha256).ok_or_else(|| format!("{} is missing", path.display()))?;
        if recorded.get(&f.path) != Some(&stamp) {
            let actual = sha256_file(&path).map_err(|e| format!("{}: {e:#}", path.display()))?;
            if actual != f.sha256 {
                return Err(format!(
                    "{} has SHA-256 {actual}, not the {} it was installed with",
                    path.display(),
                    f.sha256
                ));
            }
        }
        checked.insert(f.path.clone(), stamp);
    }
    if checked != recorded {
        write_verified(dir, &checked);
    }
    Ok(())
}

/// Records every file of a release just extracted (and hashed) as checked.
fn record_verified(dir: &Path, manifest: &CacheManifest) {
    let stamps: HashMap<String, Stamp> = manifest
        .files
        .iter()
        .filter_map(|f| Some((f.path.clone(), stamp_of(&dir.join(&f.path), &f.sha256)?)))
        .collect();
    write_verified(dir, &stamps);
}

/// Writes the record whole (beside it, then renamed: a concurrent reader sees the old or the new
/// one). A record that cannot be written only means hashing again next time.
fn write_verified(dir: &Path, stamps: &HashMap<String, Stamp>) {
    let Ok(bytes) = serde_json::to_vec(stamps) else { return };
    let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) else {
        return;
    };
    if std::io::Write::write_all(&mut tmp, &bytes).is_ok() {
        let _ = tmp.persist(dir.join(VERIFIED));
    }
}

fn read_manifest(dir: &Path) -> Option<CacheManifest> {
    let text = std::fs::read(dir.join("manifest.json")).ok()?;
    let manifest: CacheManifest = serde_json::from_slice(&text).ok()?;
    // A cache entry whose files went missing or changed size is treated as absent.
    let complete = manifest
        .files
        .iter()
        .all(|f| std::fs::metadata(dir.join(&f.path)).is_ok_and(|m| m.len() == f.size));
    complete.then_some(manifest)
}

fn cached_runtime(build: &Build, dir: &Path, manifest: &CacheManifest, source: Source) -> Runtime {
    let main = build.main_lib();
    Runtime {
        key: build.key.clone(),
        package: build.package.clone(),
        version: Some(build.version.clone()),
        source,
        library: dir.join(&main),
        sha256: manifest.files.iter().find(|f| f.path == main).map(|f| f.sha256.clone()),
    }
}

fn user_runtime(build: &Build, library: PathBuf, source: Source) -> Runtime {
    Runtime {
        key: build.key.clone(),
        package: build.package.clone(),
        version: None,
        source,
        library,
        sha256: None,
    }
}

/// Accepts the library itself or a directory holding it (directly, or in a wheel's layout), and
/// checks that it is one: a file that is not would otherwise only fail inside the worker, as if
/// the golden run had failed.
fn resolve_user_path(build: &Build, path: &Path) -> Result<PathBuf, String> {
    let lib = find_user_library(build, path)?;
    check_library(build, &lib)?;
    Ok(lib)
}

/// Checks that `lib` is a shared library of the platform exporting the entry point of its role:
/// `OrtGetApiBase` for ONNX Runtime, `CreateEpFactories` for an execution-provider plugin.
fn check_library(build: &Build, lib: &Path) -> Result<(), String> {
    let bytes = std::fs::read(lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    let magic: &[&[u8]] = if cfg!(windows) {
        &[b"MZ"]
    } else if cfg!(target_os = "macos") {
        &[b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe"]
    } else {
        &[b"\x7fELF"]
    };
    if !magic.iter().any(|m| bytes.starts_with(m)) {
        return Err(format!("{} is not a shared library", lib.display()));
    }
    let entry = match build.role {
        Role::Standalone => "OrtGetApiBase",
        Role::PluginOn(_) => "CreateEpFactories",
    };
    let has = |symbol: &str| regex::bytes::Regex::new(symbol).is_ok_and(|re| re.is_match(&bytes));
    if matches!(build.role, Role::PluginOn(_)) && has("OrtGetApiBase") {
        return Err(format!(
            "{} is an ONNX Runtime library, not an execution-provider plugin",
            lib.display()
        ));
    }
    if !has(entry) {
        return Err(format!(
            "{} has no {entry}: not {}",
            lib.display(),
            match build.role {
                Role::Standalone => "an ONNX Runtime library",
                Role::PluginOn(_) => "an execution-provider plugin",
            }
        ));
    }
    Ok(())
}

fn find_user_library(build: &Build, path: &Path) -> Result<PathBuf, String> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    if !path.is_dir() {
        return Err("no such file or directory".into());
    }
    let candidates = [path.join(build.main_lib()), path.join(build.main_lib_name())];
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    // Any libonnxruntime build (a version other than the pinned one) or the plugin by its stem.
    let stem = match build.role {
        Role::Standalone if cfg!(windows) => "onnxruntime.dll",
        Role::Standalone => "libonnxruntime.",
        Role::PluginOn(_) => "onnxruntime_providers_qnn",
    };
    for dir in [
        path.to_path_buf(),
        path.join("onnxruntime").join("capi"),
        path.join("lib"),
    ] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut names: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains(stem)))
                .filter(|p| p.is_file())
                .collect();
            names.sort();
            if let Some(first) = names.into_iter().next() {
                return Ok(first);
            }
        }
    }
    Err(format!("no {} found there", build.main_lib_name()))
}
