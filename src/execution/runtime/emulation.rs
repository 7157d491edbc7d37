//! The phone's own CPU fallback: ONNX Runtime's official aarch64 wheel, run under qemu user-mode
//! emulation of a named Arm core. Nodes the NPU refuses run on the ARM64 CPU EP (NEON, dot-product
//! and i8mm kernels), which computes other bits than the x86 build; emulating the core gives
//! those bits on any x86-64 host, whatever its instruction set.
//!
//! Everything is fetched into the runtime cache without touching the system
//! (`arm64_provision.sh`): a static `qemu-aarch64` from Debian's `qemu-user` (10.x, which
//! presents an Arm `/proc/cpuinfo` to the guest, so ONNX Runtime's CPU detection works), an arm64
//! sysroot with python3.11 extracted from Debian's packages through a private apt configuration,
//! and the aarch64 wheels of onnxruntime and NumPy at the pins of the x86 build. Sessions run in
//! `emulated_worker.py`, which speaks the worker protocol of `exec::child`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The provisioning script, run with the cache directory as its argument.
const PROVISION_SCRIPT: &str = include_str!("arm64_provision.sh");
/// The worker the emulated interpreter runs.
const WORKER: &str = include_str!("../exec/emulated_worker.py");

/// The variables the provisioning script would take a pin or a mirror from.
const PINNED: &[&str] = &[
    "ORT_VERSION",
    "NUMPY_VERSION",
    "EXTRA_WHEELS",
    "QEMU_SUITES",
    "DEBIAN_MIRROR",
    "SECURITY_MIRROR",
    "KEYRING",
    "SYSROOT_PKGS",
    "REFRESH",
    "KEEP_APT",
];

/// The onnxruntime release of the aarch64 wheel: the catalogue's CPU build, so the emulated and
/// the x86 CPU EP differ only in their kernels.
fn ort_version() -> String {
    crate::execution::runtime::catalog::Build::get("cpu").map_or_else(|| "1.31.1".into(), |b| b.version.clone())
}

/// A provisioned emulation: where its parts are and what they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Emulation {
    pub qemu: PathBuf,
    pub sysroot: PathBuf,
    pub site: PathBuf,
    pub worker: PathBuf,
    /// `qemu-user 1:10.0.13+ds-0+deb13u1 trixie ...` as the provisioner recorded it.
    pub qemu_version: String,
    /// The SHA-256 of the manifest of every package and wheel fetched.
    pub manifest_sha256: String,
}

impl Emulation {
    /// One sentence for reports: what computes the figures (the core is in the target's id).
    pub fn describe(&self) -> String {
        let qemu = self
            .qemu_version
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "onnxruntime {} aarch64 wheel in Debian's arm64 python3.11 under qemu user-mode emulation ({qemu}; manifest sha256 {})",
            ort_version(),
            &self.manifest_sha256[..12.min(self.manifest_sha256.len())]
        )
    }

    /// The command that runs the worker on `job` under emulation of `core`: a clean environment
    /// (the host's PYTHON*, LD_* and user site never reach the guest), one BLAS thread.
    pub fn worker_command(&self, core: &str, job: &Path) -> Command {
        let mut cmd = Command::new(&self.qemu);
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("PYTHONPATH", &self.site)
            .env("PYTHONNOUSERSITE", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("OMP_NUM_THREADS", "1")
            .arg("-L")
            .arg(&self.sysroot)
            .arg("-cpu")
            .arg(core)
            .arg(self.sysroot.join("usr/bin/python3.11"))
            .arg("-s")
            .arg("-B")
            .arg(&self.worker)
            .arg(job);
        cmd
    }
}

/// The directory of the emulation in the cache, by the provisioning script's content (a changed
/// script provisions afresh).
fn root() -> PathBuf {
    let pins = format!("{PROVISION_SCRIPT}\n{}", ort_version());
    let tag = &crate::foundation::hash::sha256_hex(pins.as_bytes())[..12];
    super::provision::cache_root().join(format!("arm64-{tag}"))
}

/// What the first use of the emulation fetches and costs (measured on a 2-core x86-64 machine;
/// docs/hosts.md).
pub const FIRST_USE: &str = "about 50 s: 10 MB of Debian packages and 38 MB of wheels, 216 MB on disk";

/// Where the emulation stands on this machine, found without provisioning anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Provisioned in this directory.
    Ready(PathBuf),
    /// Provisioned into this directory on first use.
    NotYet(PathBuf),
    /// It cannot run here, and why.
    Unavailable(String),
}

/// Where the emulation stands: what `targets` says of every `cpu-arm64` core.
pub fn state() -> State {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return State::Unavailable("the ARM64 emulation runs on x86-64 Linux only".into());
    }
    let missing: Vec<&str> = ["apt-get", "dpkg-deb", "gpgv", "tar"]
        .into_iter()
        .filter(|tool| !on_path(tool))
        .collect();
    if !missing.is_empty() {
        return State::Unavailable(format!(
            "provisioning the ARM64 emulation needs {} (Debian's base tools)",
            missing.join(", ")
        ));
    }
    let keyring = Path::new("/usr/share/keyrings/debian-archive-keyring.gpg");
    if !keyring.is_file() {
        return State::Unavailable(format!(
            "provisioning the ARM64 emulation needs Debian's archive keyring ({})",
            keyring.display()
        ));
    }
    let dir = root();
    match dir.join("manifest.txt").is_file() && dir.join("tree.json").is_file() {
        true => State::Ready(dir),
        false => State::NotYet(dir),
    }
}

/// Whether an executable of that name is on `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
}

/// The emulation, provisioned once per process (the script's own stamps make a second process's
/// call cheap); `Err` says why it cannot run here.
pub fn provision() -> Result<Emulation, String> {
    static DONE: OnceLock<Result<Emulation, String>> = OnceLock::new();
    DONE.get_or_init(|| provision_at(&root()).map_err(|e| format!("the ARM64 emulation cannot be set up here: {e:#}")))
        .clone()
}

fn provision_at(dir: &Path) -> Result<Emulation> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        bail!("it runs on x86-64 Linux only");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let lock = std::fs::File::create(dir.join(".lock")).context("cannot create the lock")?;
    lock.lock().context("cannot lock the emulation's directory")?;
    run_script(dir, false)?;
    // What was provisioned is checked file by file against what provisioning left: a file cut
    // short or removed since (a full disk, a killed copy, a hand) would crash the interpreter
    // with a signal that reads as the model crashing the ARM64 CPU EP.
    match tree::damage(dir) {
        Some(Ok(())) => {}
        Some(Err((part, why))) => {
            crate::foundation::console::note(format!(
                "the ARM64 emulation in {} is damaged ({why}): provisioning its {part} again",
                dir.display()
            ));
            // The script redoes a step whose stamp is gone (the sysroot's redoes the site's).
            let _ = std::fs::remove_file(dir.join(format!("{part}.stamp")));
            run_script(dir, false)?;
            tree::record(dir)?;
            if let Some(Err((_, why))) = tree::damage(dir) {
                bail!(
                    "it is damaged ({why}) and provisioning it again did not mend it; remove {} and retry",
                    dir.display()
                );
            }
        }
        None => tree::record(dir)?,
    }
    emulation_in(dir)
}

/// Runs the provisioning script on `dir` (`refresh`: every step again, whatever its stamps say).
fn run_script(dir: &Path, refresh: bool) -> Result<()> {
    let script = dir.join("provision.sh");
    std::fs::write(&script, PROVISION_SCRIPT).context("cannot write the provisioning script")?;
    let python = super::python::interpreter().unwrap_or_else(|| "python3".into());
    let log = dir.join("provision.log");
    let mut cmd = Command::new("bash");
    // The script's pins are the tool's, never the user's shell's.
    for name in PINNED {
        cmd.env_remove(name);
    }
    if refresh {
        cmd.env("REFRESH", "1");
    }
    let out = cmd
        .arg(&script)
        .arg(dir)
        .env("PYTHON", python)
        .env("ORT_VERSION", ort_version())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).context("cannot create the provisioning log")?)
        .output()
        .context("cannot run bash")?;
    if !out.status.success() {
        let tail = std::fs::read_to_string(&log).unwrap_or_default();
        let last = tail.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        bail!("provisioning failed ({}): {last} (log: {})", out.status, log.display());
    }
    Ok(())
}

/// The emulation provisioned in `dir`.
fn emulation_in(dir: &Path) -> Result<Emulation> {
    let worker = dir.join(format!(
        "emulated_worker-{}.py",
        &crate::foundation::hash::sha256_hex(WORKER.as_bytes())[..12]
    ));
    if !worker.exists() {
        std::fs::write(&worker, WORKER).context("cannot write the emulated worker")?;
    }
    let manifest = std::fs::read(dir.join("manifest.txt")).context("no manifest.txt after provisioning")?;
    Ok(Emulation {
        qemu: dir.join("qemu/qemu-aarch64"),
        sysroot: dir.join("sysroot"),
        site: dir.join("site"),
        worker,
        qemu_version: std::fs::read_to_string(dir.join("qemu/VERSION"))
            .unwrap_or_default()
            .trim()
            .to_string(),
        manifest_sha256: crate::foundation::hash::sha256_hex(&manifest),
    })
}

/// What provisioning left in the emulation's directory, file by file (`tree.json`: each file's
/// size, modification time and SHA-256; a link's target), so that a later process finds a file
/// cut short, removed or replaced before it runs a session on it. A file is hashed again only
/// when its modification time changed (a cache restored elsewhere), as the runtime cache does.
mod tree {
    use std::collections::BTreeMap;
    use std::path::Path;

    use anyhow::{Context, Result};
    use serde::{Deserialize, Serialize};

    const TREE: &str = "tree.json";
    /// The parts provisioning makes.
    const PARTS: [&str; 3] = ["qemu", "sysroot", "site"];

    /// One file as provisioning left it.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(untagged)]
    enum Entry {
        File { size: u64, mtime_ns: i64, sha256: String },
        Link { target: String },
    }

    /// Every file under the parts but Python's own caches (which the interpreter may rewrite),
    /// with its metadata; `hash` says whether to hash files (else `sha256` is empty).
    fn walk(dir: &Path, hash: bool) -> BTreeMap<String, Entry> {
        let mut found = BTreeMap::new();
        let mut stack: Vec<std::path::PathBuf> = PARTS.iter().map(|p| dir.join(p)).collect();
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.flatten() {
                let path = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if name == "__pycache__" || name.ends_with(".pyc") {
                    continue;
                }
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
                if meta.is_dir() {
                    stack.push(path);
                } else if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&path).unwrap_or_default().display().to_string();
                    found.insert(rel, Entry::Link { target });
                } else {
                    use std::os::unix::fs::MetadataExt;
                    let mtime_ns = meta
                        .mtime()
                        .saturating_mul(1_000_000_000)
                        .saturating_add(meta.mtime_nsec());
                    let sha256 = if hash {
                        crate::foundation::hash::sha256_file(&path).unwrap_or_default()
                    } else {
                        String::new()
                    };
                    found.insert(
                        rel,
                        Entry::File {
                            size: meta.len(),
                            mtime_ns,
                            sha256,
                        },
                    );
                }
            }
        }
        found
    }

    /// Records the tree as it is now.
    pub fn record(dir: &Path) -> Result<()> {
        let text = serde_json::to_vec(&walk(dir, true))?;
        let tmp = dir.join(format!("{TREE}.tmp"));
        std::fs::write(&tmp, text).context("cannot record the emulation's files")?;
        std::fs::rename(&tmp, dir.join(TREE)).context("cannot record the emulation's files")
    }

    /// `None`: nothing recorded yet; `Some(Ok)`: every file as recorded; `Some(Err)`: the part
    /// (`qemu`, `sysroot`, `site`) of the first file that is not, and what is wrong, in words.
    pub fn damage(dir: &Path) -> Option<Result<(), (String, String)>> {
        let recorded: BTreeMap<String, Entry> = serde_json::from_slice(&std::fs::read(dir.join(TREE)).ok()?).ok()?;
        let now = walk(dir, false);
        for (path, was) in &recorded {
            let why = match (was, now.get(path)) {
                (_, None) => format!("{path} is missing"),
                (Entry::Link { target }, Some(Entry::Link { target: t })) if t == target => continue,
                (Entry::File { size, .. }, Some(Entry::File { size: s, .. })) if s != size => {
                    format!("{path} has {s} bytes where provisioning left {size}")
                }
                (Entry::File { mtime_ns, sha256, .. }, Some(Entry::File { mtime_ns: m, .. })) => {
                    let same = m == mtime_ns
                        || crate::foundation::hash::sha256_file(&dir.join(path)).is_ok_and(|h| &h == sha256);
                    if same {
                        continue;
                    }
                    format!("{path} changed since it was provisioned")
                }
                _ => format!("{path} is not what provisioning left"),
            };
            let part = path.split('/').next().unwrap_or_default().to_string();
            return Some(Err((part, why)));
        }
        Some(Ok(()))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_file_cut_short_removed_or_rewritten_is_named_with_its_part() {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path();
            assert!(damage(dir).is_none());
            for (part, file) in [
                ("qemu", "qemu-aarch64"),
                ("sysroot", "usr/lib/libc.so.6"),
                ("site", "ort/lib.so"),
            ] {
                let path = dir.join(part).join(file);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, format!("{part} bytes")).unwrap();
            }
            std::fs::create_dir_all(dir.join("site/ort/__pycache__")).unwrap();
            std::fs::write(dir.join("site/ort/__pycache__/x.pyc"), "cache").unwrap();
            record(dir).unwrap();
            assert_eq!(damage(dir), Some(Ok(())));
            // Python rewriting its own cache is not damage.
            std::fs::write(dir.join("site/ort/__pycache__/x.pyc"), "other cache").unwrap();
            assert_eq!(damage(dir), Some(Ok(())));
            // Cut short (the SIGBUS of a truncated library).
            std::fs::write(dir.join("site/ort/lib.so"), "site").unwrap();
            let (part, why) = damage(dir).unwrap().unwrap_err();
            assert_eq!(part, "site");
            assert!(why.contains("has 4 bytes where provisioning left 10"), "{why}");
            // Rewritten with the same size, and removed.
            std::fs::write(dir.join("site/ort/lib.so"), "SITE bytes").unwrap();
            let (_, why) = damage(dir).unwrap().unwrap_err();
            assert!(why.contains("changed since it was provisioned"), "{why}");
            std::fs::remove_file(dir.join("qemu/qemu-aarch64")).unwrap();
            std::fs::write(dir.join("site/ort/lib.so"), "site bytes").unwrap();
            let (part, why) = damage(dir).unwrap().unwrap_err();
            assert_eq!((part.as_str(), why.as_str()), ("qemu", "qemu/qemu-aarch64 is missing"));
        }
    }
}
