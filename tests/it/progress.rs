//! Long waits are told where no progress bar is drawn: with stderr piped (a CI log), a command
//! prints a line at a steady interval (`NPU_AUDIT_PROGRESS_SECS`, 0 for none) with the time since
//! it started and what it is doing (sessions done, a runtime still being fetched), and a fetch
//! then says the wheel's size and rate. A hung worker (injected) and a stand-in pip make the
//! waits without a network.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;

/// `compare` of the CNN fixture on the CPU EP whose worker hangs until the 3 s timeout.
fn hung_audit(progress_secs: &str) -> String {
    let out = bin()
        .env("NPU_AUDIT_FAULT_INJECT", "cpu=hang")
        .env("NPU_AUDIT_PROGRESS_SECS", progress_secs)
        .args(["compare", &cnn(), "-t", "cpu", "--no-baseline", "--fingerprint", "off"])
        .args(["--timeout", "3", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_audit_off_a_terminal_says_how_far_it_is_at_a_steady_interval() {
    let told = hung_audit("1");
    let beats: Vec<&str> = told.lines().filter(|l| l.contains("sessions")).collect();
    assert!(beats.len() >= 2, "fewer than two progress lines in 3 s: {told}");
    assert!(
        beats.iter().all(|l| l.starts_with("npu-audit: [") && l.contains("s] ")),
        "{told}"
    );
    // The golden run is done before the hung target's session: its count is said.
    assert!(
        beats.iter().any(|l| l.contains("1/2 sessions; last: golden ok")),
        "{told}"
    );
    let quiet = hung_audit("0");
    assert!(!quiet.lines().any(|l| l.contains("sessions")), "{quiet}");
}

/// A stand-in Python whose `pip download` takes 2.5 s and leaves a 3,000,000-byte "wheel".
#[cfg(unix)]
fn slow_pip(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let python = dir.join("python");
    std::fs::write(
        &python,
        "#!/bin/sh\ncase \"$*\" in\n  --version) echo 'Python 3.11.0' ;;\n  '-m pip --version') echo 'pip 24' ;;\n  \
         '-m pip download'*) while [ \"$1\" != -d ]; do shift; done; sleep 2.5; \
         head -c 3000000 /dev/zero > \"$2/onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl\" ;;\n  \
         *) echo '{\"packages\": {}, \"dirs\": []}' ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

/// The stand-in wheel is not the pinned one, so the fetch ends refused (exit 4); what matters is
/// what was said while it ran and once it arrived.
#[cfg(unix)]
#[test]
fn a_fetch_says_it_is_still_fetching_then_its_size_and_rate() {
    let dir = tempdir();
    let python = slow_pip(dir.path());
    let out = bin()
        .env("NPU_AUDIT_CACHE", dir.path().join("cache"))
        .env("NPU_AUDIT_PYTHON", &python)
        .env("NPU_AUDIT_PROGRESS_SECS", "1")
        .env_remove("NPU_AUDIT_RUNTIME_CPU")
        .args(["runtime", "install", "cpu"])
        .output()
        .unwrap();
    let told = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{told}");
    let still = told
        .lines()
        .filter(|l| l.contains("still fetching onnxruntime==1.31.1"))
        .count();
    assert!(still >= 2, "fewer than two lines in 2.5 s of fetching: {told}");
    let fetched = told
        .lines()
        .find(|l| l.contains("downloaded onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl: 3.0 MB in "))
        .unwrap_or_else(|| panic!("no size and time said: {told}"));
    // 3.0 MB in about 2.5 s: a rate between 0.3 and 1.2 MB/s, whatever the machine's load.
    let rate: f64 = fetched
        .rsplit_once('(')
        .and_then(|(_, r)| r.strip_suffix(" MB/s)"))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no rate in: {fetched}"));
    assert!((0.3..=1.2).contains(&rate), "{fetched}");
}
