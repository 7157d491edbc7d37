//! npu-audit as a Python wheel (pyproject.toml, scripts/wheel), the way users who are not Rust
//! developers install it. `scripts/wheel --profile dev` builds the wheel and installs it with pip
//! (fresh venv), `uv tool install` and `pipx install`, each of which must audit the CNN fixture;
//! then this test reads the wheel itself (only the binary and its metadata, the metadata
//! Cargo.toml's, RECORD's hashes, the manylinux tag against the glibc symbol versions the binary
//! needs) and installs it into a fresh venv of its own, whose `cpu:noopt` outputs must be
//! onnxruntime-python's bits (fixtures/expected/).
//!
//! The wheel is built in a target directory of its own, `<target>/wheel-test`, without debug info
//! (`CARGO_PROFILE_DEV_DEBUG=0`; the symbols are stripped anyway): maturin builds with
//! `cargo rustc --bin npu-audit`, whose feature resolution leaves out the dev-dependencies, so the
//! test build's dependencies (some with other features) cannot be reused; and while it writes the
//! wheel maturin moves the binary out of its target directory, which tests running
//! `target/debug/npu-audit` at the same time must not see. Measured on 2 cores: 143 s of CPU from
//! scratch, 29 s after a change of the sources; 7 s with the installs and audits when nothing
//! changed.

use crate::common;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use sha2::{Digest, Sha256};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Cargo's target directory of this test build (the binary is `<target>/debug/npu-audit`).
fn target_dir() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_npu-audit"));
    bin.parent()
        .and_then(Path::parent)
        .expect("binary inside a target directory")
        .to_path_buf()
}

/// Runs `scripts/wheel --profile dev` into `out` (it checks pip, uv and pipx installs itself) and
/// returns the wheel it printed.
fn build_wheel(out: &Path) -> PathBuf {
    let mut cmd = Command::new(repo("scripts/wheel"));
    cmd.args(["--profile", "dev", "--out"])
        .arg(out)
        .arg("--target-dir")
        .arg(target_dir().join("wheel-test"))
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env_remove("NPU_AUDIT_FAULT_INJECT");
    let o = run_ok(&mut cmd);
    let stderr = String::from_utf8_lossy(&o.stderr);
    for how in ["pip install into a fresh venv", "uv tool install", "pipx install"] {
        assert!(stderr.contains(&format!("{how}: ok")), "{how} not checked:\n{stderr}");
    }
    let printed = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let wheel = PathBuf::from(printed);
    assert_eq!(wheel.parent(), Some(out), "{}", wheel.display());
    wheel
}

/// Every member of the wheel with its bytes and unix mode.
fn members(wheel: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    (0..z.len())
        .map(|i| {
            let mut f = z.by_index(i).unwrap();
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).unwrap();
            (f.name().to_string(), bytes, f.unix_mode().unwrap_or(0))
        })
        .collect()
}

/// RFC 4648 base64 with the URL-safe alphabet and no padding, as wheel RECORDs write hashes.
fn urlsafe_b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The highest `GLIBC_2.N` symbol version named in an ELF binary's strings (its version needs).
fn newest_glibc_minor(binary: &[u8]) -> Option<u32> {
    let needle = b"GLIBC_2.";
    binary
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .filter_map(|(i, _)| {
            let digits: String = binary[i + needle.len()..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|&b| b as char)
                .collect();
            digits.parse().ok()
        })
        .max()
}

/// The wheel holds the binary as its one script and metadata from Cargo.toml, nothing else; RECORD
/// hashes every member; a manylinux tag is no older than the newest glibc the binary needs.
fn check_contents(wheel: &Path) {
    let name = wheel.file_name().unwrap().to_str().unwrap();
    let prefix = format!("npu_audit-{VERSION}-py3-none-");
    let platforms = name
        .strip_prefix(&prefix)
        .and_then(|p| p.strip_suffix(".whl"))
        .unwrap_or_else(|| panic!("{name}: not {prefix}PLATFORM.whl"));
    let members = members(wheel);
    let script = format!("npu_audit-{VERSION}.data/scripts/npu-audit");
    let info = format!("npu_audit-{VERSION}.dist-info/");
    for (member, _, _) in &members {
        assert!(*member == script || member.starts_with(&info), "{member} in the wheel");
        let code = member.ends_with(".py") || member.ends_with(".so") || member.contains(".so.");
        assert!(!code, "{member} in the wheel");
    }
    let get = |m: &str| {
        let (_, bytes, mode) = members
            .iter()
            .find(|(n, _, _)| n == m)
            .unwrap_or_else(|| panic!("no {m}"));
        (bytes.clone(), *mode)
    };
    let (binary, mode) = get(&script);
    assert_eq!(mode & 0o111, 0o111, "{script} is not executable: {mode:o}");
    assert_eq!(&binary[..4], b"\x7fELF");
    let text = |m: &str| String::from_utf8(get(&format!("{info}{m}")).0).unwrap();
    let metadata = text("METADATA");
    for line in [
        "Name: npu-audit".to_string(),
        format!("Version: {VERSION}"),
        format!("Summary: {}", env!("CARGO_PKG_DESCRIPTION")),
        format!("License: {}", env!("CARGO_PKG_LICENSE")),
        "Requires-Python: >=3.8".to_string(),
    ] {
        assert!(
            metadata.lines().any(|l| l == line),
            "METADATA lacks {line:?}:\n{metadata}"
        );
    }
    assert!(!metadata.contains("Requires-Dist"), "{metadata}");
    assert!(text("WHEEL").lines().any(|l| l == format!("Tag: py3-none-{platforms}")));
    assert_eq!(
        get(&format!("{info}licenses/LICENSE")).0,
        std::fs::read(repo("LICENSE")).unwrap()
    );
    check_record(&text("RECORD"), &members);
    check_platforms(platforms, &binary);
}

/// Every member but RECORD is listed with the SHA-256 and size of its bytes.
fn check_record(record: &str, members: &[(String, Vec<u8>, u32)]) {
    for (member, bytes, _) in members.iter().filter(|(n, _, _)| !n.ends_with("/RECORD")) {
        let want = format!(
            "{member},sha256={},{}",
            urlsafe_b64(&Sha256::digest(bytes)),
            bytes.len()
        );
        assert!(record.lines().any(|l| l == want), "RECORD lacks {want}:\n{record}");
    }
    assert_eq!(record.lines().count(), members.len(), "{record}");
}

/// Each platform tag is for this machine's architecture, and a manylinux_2_N tag is no older than
/// the newest GLIBC_2.M symbol version the binary needs (M <= N).
fn check_platforms(platforms: &str, binary: &[u8]) {
    let newest = newest_glibc_minor(binary);
    for tag in platforms.split('.') {
        assert!(tag.ends_with(&format!("_{}", std::env::consts::ARCH)), "{tag}");
        if let Some(rest) = tag.strip_prefix("manylinux_2_") {
            let minor: u32 = rest.split('_').next().unwrap().parse().unwrap();
            let needed = newest.expect("a glibc binary names GLIBC_2.N versions");
            assert!(needed <= minor, "{tag}, but the binary needs GLIBC_2.{needed}");
        }
    }
}

/// The wheel in a fresh venv of this test's own: its `npu-audit` reports the crate's version, audits
/// the CNN fixture on `cpu` with exit code 0, and its `cpu:noopt` run is onnxruntime-python's, bit
/// for bit (fixtures/expected/, made by fixtures/make_fixtures.py).
fn check_fresh_venv(wheel: &Path, dir: &Path) {
    let venv = dir.join("venv");
    let host = std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into());
    run_ok(Command::new(host).args(["-m", "venv"]).arg(&venv));
    run_ok(
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--no-index", "--no-deps"])
            .arg(wheel),
    );
    let exe = venv.join("bin/npu-audit");
    let version = run_ok(Command::new(&exe).arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("npu-audit {VERSION}")
    );
    let saved = dir.join("outputs");
    let mut cmd = Command::new(&exe);
    cmd.arg("compare")
        .arg(repo("fixtures/models/cnn_qdq_u8.onnx"))
        .arg("--reference")
        .arg(repo("fixtures/models/cnn_fp32.onnx"))
        .arg("--inputs")
        .arg(repo("fixtures/inputs/cnn_seed7.npz"))
        .args(["-t", "cpu", "--format", "json", "--save-outputs"])
        .arg(&saved)
        .env("NO_COLOR", "1")
        .env_remove("NPU_AUDIT_FAULT_INJECT");
    let out = run_ok(&mut cmd);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(target(&report, "cpu")["status"], "ok");
    assert_eq!(target(&report, "cpu:noopt")["status"], "ok");
    let expected = repo("fixtures/expected/cnn_qdq_u8__ort_noopt.npz");
    for name in ["logits", "probs"] {
        let got = npz_array(&saved.join("cpu_noopt/s0.npz"), name);
        let want = npz_array(&expected, name);
        assert_eq!(got.data.to_le_bytes(), want.data.to_le_bytes(), "{name}");
    }
}

#[test]
fn a_dev_wheel_installs_with_pip_uv_and_pipx_and_audits_the_fixture() {
    let dir = tempdir();
    let out = dir.path().join("dist");
    let wheel = build_wheel(&out);
    check_contents(&wheel);
    check_fresh_venv(&wheel, dir.path());
}
