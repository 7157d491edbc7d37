//! The machine's Python, used only to find ONNX Runtime wheels that are already installed and to
//! fetch missing ones with `pip download` (the official builds ship only as wheels).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::error::environment;

/// The Python interpreter to use: `NPU_AUDIT_PYTHON`, else `python3`, else `python`.
pub fn interpreter() -> Option<String> {
    if let Ok(p) = std::env::var("NPU_AUDIT_PYTHON") {
        if !p.is_empty() {
            return Some(p);
        }
    }
    ["python3", "python"]
        .into_iter()
        .map(str::to_string)
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// An installed Python distribution: its version and the directory its files are relative to.
#[derive(Debug, Clone)]
pub struct InstalledPackage {
    pub version: String,
    pub root: PathBuf,
}

const FIND_PACKAGES: &str = r#"
import json, sys
import importlib.metadata as md
out = {}
for name in sys.argv[1:]:
    try:
        d = md.distribution(name)
        out[name] = {"version": d.version, "root": str(d.locate_file(""))}
    except Exception:
        pass
print(json.dumps(out))
"#;

/// Looks up installed distributions by name. Any problem (no Python, odd output) means "none".
pub fn installed_packages(names: &[&str]) -> HashMap<String, InstalledPackage> {
    let Some(python) = interpreter() else {
        return HashMap::new();
    };
    let output = Command::new(python)
        .arg("-c")
        .arg(FIND_PACKAGES)
        .args(names)
        .stderr(Stdio::null())
        .output();
    let Ok(output) = output else {
        return HashMap::new();
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&output.stdout) else {
        return HashMap::new();
    };
    let mut found = HashMap::new();
    if let Some(map) = value.as_object() {
        for (name, v) in map {
            if let (Some(version), Some(root)) = (v["version"].as_str(), v["root"].as_str()) {
                found.insert(
                    name.clone(),
                    InstalledPackage {
                        version: version.to_string(),
                        root: PathBuf::from(root),
                    },
                );
            }
        }
    }
    found
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

/// Downloads one wheel with `pip download --no-deps` into `dest` and returns its path.
pub fn pip_download(package: &str, version: &str, dest: &Path) -> Result<PathBuf> {
    let python = interpreter().ok_or_else(|| {
        environment(format!(
            "cannot fetch {package} {version}: no Python interpreter found; install Python 3 with pip \
             (e.g. `apt-get install python3-pip`) or point the runtime's environment variable at an existing library"
        ))
    })?;
    let pip_ok = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !pip_ok {
        return Err(environment(format!(
            "cannot fetch {package} {version}: `{python} -m pip` is not available; install pip \
             (e.g. `apt-get install python3-pip`) or point the runtime's environment variable at an existing library"
        )));
    }
    let spec = format!("{package}=={version}");
    let base = |cmd: &mut Command| {
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
    };
    let mut first = Command::new(&python);
    base(&mut first);
    let out = first.output().context("cannot run pip")?;
    let mut errors = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success() {
        // The running interpreter may be too new for the wheel: ask for a CPython 3.11 wheel.
        let mut second = Command::new(&python);
        base(&mut second);
        second.args(["--python-version", "3.11"]);
        for p in fallback_platforms() {
            second.args(["--platform", p]);
        }
        let out = second.output().context("cannot run pip")?;
        if !out.status.success() {
            errors.push_str(&String::from_utf8_lossy(&out.stderr));
            let last = errors
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string();
            return Err(environment(format!(
                "pip could not download {spec}: {last}"
            )));
        }
    }
    let wheel = std::fs::read_dir(dest)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"));
    match wheel {
        Some(w) => Ok(w),
        None => bail!(
            "pip reported success but left no wheel for {spec} in {}",
            dest.display()
        ),
    }
}
