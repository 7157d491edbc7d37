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
    crate::runtime::catalog::Build::get("cpu").map_or_else(|| "1.31.1".into(), |b| b.version.clone())
}

/// A provisioned emulation: where its parts are and what they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    let tag = &crate::hash::sha256_hex(pins.as_bytes())[..12];
    super::provision::cache_root().join(format!("arm64-{tag}"))
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
    let script = dir.join("provision.sh");
    std::fs::write(&script, PROVISION_SCRIPT).context("cannot write the provisioning script")?;
    let python = super::python::interpreter().unwrap_or_else(|| "python3".into());
    let log = dir.join("provision.log");
    let mut cmd = Command::new("bash");
    // The script's pins are the tool's, never the user's shell's.
    for name in PINNED {
        cmd.env_remove(name);
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
    let worker = dir.join(format!(
        "emulated_worker-{}.py",
        &crate::hash::sha256_hex(WORKER.as_bytes())[..12]
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
        manifest_sha256: crate::hash::sha256_hex(&manifest),
    })
}
