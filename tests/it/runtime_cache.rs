//! The runtime cache under stress: a fetch interrupted midway, a cached library changed on disk,
//! and `runtime gc` while an audit uses a release. Each test works on a cache of its own
//! (`NPU_AUDIT_CACHE`): a stand-in Python plays pip, or the needed releases are copied from the
//! real cache (provisioned through the tool itself, as users get them).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

/// A stand-in Python (`NPU_AUDIT_PYTHON`) whose `pip download` leaves a partial file in its
/// destination, writes its process id to `pid_file` and hangs: a slow download.
#[cfg(unix)]
fn hanging_pip(dir: &Path, pid_file: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let python = dir.join("python");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\ncase \"$*\" in\n  --version) echo 'Python 3.11.0' ;;\n  '-m pip --version') echo 'pip 24' ;;\n  \
             '-m pip download'*)\n    while [ \"$1\" != -d ]; do shift; done\n    echo partial > \"$2/onnxruntime.whl.part\"\n    \
             echo $$ > '{}'; exec sleep 300 ;;\n  *) echo '{{\"packages\": {{}}, \"dirs\": []}}' ;;\nesac\n",
            pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

/// Entries of the cache's runtime directory whose names start with `prefix`.
fn cache_entries(cache: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(cache.join("runtimes"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (a minute at most) until `done` holds.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process is gone (or a zombie nobody reaped yet).
#[cfg(unix)]
fn gone(pid: i32) -> bool {
    // SAFETY: kill(pid, 0) only asks whether the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    !exists
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// `runtime install` went on fetching through Ctrl-C and SIGTERM (and exited 0 when the download
/// finished within the handler's grace period). Interrupted, it stops pip, removes the partial
/// download and exits 130 by itself.
#[cfg(unix)]
#[test]
fn an_interrupted_runtime_install_stops_pip_and_removes_its_partial_download() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let dir = tempdir();
        let cache = dir.path().join("cache");
        let pid_file = dir.path().join("pip.pid");
        let python = hanging_pip(dir.path(), &pid_file);
        let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
            .env("NPU_AUDIT_PYTHON", &python)
            .env("NPU_AUDIT_CACHE", &cache)
            .args(["runtime", "install", "cpu@1.25.0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("pip download", || {
            std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
        });
        let pip: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        assert!(
            !cache_entries(&cache, ".fetch-").is_empty(),
            "the download has no temporary directory"
        );
        // SAFETY: kill(2) on the child process this test started.
        unsafe {
            libc::kill(child.id() as libc::pid_t, signal);
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "signal {signal}: {stderr}");
        assert!(!stderr.contains("did not stop"), "signal {signal}: {stderr}");
        assert!(gone(pip), "signal {signal}: pip outlived the interrupted install");
        assert_eq!(
            cache_entries(&cache, ".fetch-"),
            Vec::<String>::new(),
            "signal {signal}: the partial download was left in the cache"
        );
        assert!(cache_entries(&cache, "onnxruntime-1.25.0").is_empty());
    }
}
