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

/// The real cache's directory of a release (provisioned through the tool itself first).
fn real_release(key: &str, dir_name: &str) -> PathBuf {
    let out = bin().args(["runtime", "install", key]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let cache = std::env::var_os("NPU_AUDIT_CACHE")
        .filter(|v| !v.is_empty())
        .map_or_else(npu_audit::execution::runtime::provision::cache_root, PathBuf::from);
    cache.join("runtimes").join(dir_name)
}

/// Copies a release directory into `cache`: its files copied, or hard-linked when `link` (for a
/// test that never writes them).
fn add_release(cache: &Path, from: &Path, link: bool) -> PathBuf {
    let to = cache.join("runtimes").join(from.file_name().unwrap());
    let mut stack = vec![from.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let dest = to.join(p.strip_prefix(from).unwrap());
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            if !(link && std::fs::hard_link(&p, &dest).is_ok()) {
                std::fs::copy(&p, &dest).unwrap();
            }
        }
    }
    to
}

/// A stand-in Python with no packages whose `pip download` fails: no fetch can succeed.
#[cfg(unix)]
fn offline_python(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let python = dir.join("python");
    std::fs::write(
        &python,
        "#!/bin/sh\ncase \"$*\" in\n  --version) echo 'Python 3.11.0' ;;\n  '-m pip --version') echo 'pip 24' ;;\n  \
         '-m pip download'*) echo 'ERROR: no network here' >&2; exit 1 ;;\n  *) echo '{\"packages\": {}, \"dirs\": []}' ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

/// 64 bytes flipped in the cached `libonnxruntime.so.1.31.1` (its size unchanged, even its
/// modification time put back) went unnoticed: the audit loaded it, exited 0 and reported the
/// pinned SHA-256. A cached library is verified before it is loaded; a damaged one is fetched
/// again, and when that fails (no network here) the audit stops saying which file is damaged.
#[cfg(unix)]
#[test]
fn a_damaged_cached_runtime_is_never_loaded() {
    let dir = tempdir();
    let cache = dir.path().join("cache");
    let release = add_release(&cache, &real_release("cpu", "onnxruntime-1.31.1-linux-x86_64"), false);
    let python = offline_python(dir.path());
    let audit = || {
        bin()
            .env("NPU_AUDIT_CACHE", &cache)
            .env("NPU_AUDIT_PYTHON", &python)
            .env_remove("NPU_AUDIT_RUNTIME_CPU")
            .args(["compare", &cnn(), "-t", "cpu", "--no-baseline", "--fingerprint", "off"])
            .output()
            .unwrap()
    };
    let out = audit();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let lib = release.join("onnxruntime/capi/libonnxruntime.so.1.31.1");
    let modified = std::fs::metadata(&lib).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&lib).unwrap();
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + 64] {
        *b ^= 0xff;
    }
    std::fs::write(&lib, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&lib)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    let out = audit();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("libonnxruntime.so.1.31.1") && stderr.contains("damaged") && stderr.contains("no network here"),
        "{stderr}"
    );
    // Nor on the next run: the damage is found again, not remembered as checked.
    assert_eq!(audit().status.code(), Some(4));
}

/// `runtime gc --keep-days 0` removed release 1.32.0 while an audit of `cpu@1.32.0` was running
/// (its worker then failed "dlopen failed"). A running audit holds every release it uses; gc
/// keeps those, saying so, and removes them once the audit is gone.
#[cfg(unix)]
#[test]
fn runtime_gc_keeps_a_release_a_running_audit_uses() {
    let dir = tempdir();
    let cache = dir.path().join("cache");
    add_release(&cache, &real_release("cpu", "onnxruntime-1.31.1-linux-x86_64"), true);
    let used = add_release(
        &cache,
        &real_release("cpu@1.32.0", "onnxruntime-1.32.0-linux-x86_64"),
        true,
    );
    let tmp = tempdir();
    let mut audit = std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
        .env("NPU_AUDIT_CACHE", &cache)
        .env("TMPDIR", tmp.path())
        .env("NPU_AUDIT_FAULT_INJECT", "cpu@1.32.0=hang")
        .args([
            "compare",
            &cnn(),
            "-t",
            "cpu@1.32.0",
            "--no-baseline",
            "--fingerprint",
            "off",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The target's worker is running (and hangs): its release was provisioned long before.
    wait_for("the target's worker", || {
        work_dirs(tmp.path())
            .iter()
            .any(|w| w.join("targets/0-cpu_1.32.0/worker.log").exists())
    });
    let gc = || {
        let out = bin()
            .env("NPU_AUDIT_CACHE", &cache)
            .args(["runtime", "gc", "--keep-days", "0", "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["version"] == "1.32.0")
            .cloned()
            .expect("gc lists 1.32.0")
    };
    let row = gc();
    let running = audit.try_wait().unwrap().is_none();
    audit.kill().unwrap();
    audit.wait().unwrap();
    assert!(running, "the audit ended before gc ran");
    assert!(used.exists(), "gc removed a release a running audit uses: {row}");
    assert_eq!(row["removed"], false, "{row}");
    assert!(row["why"].as_str().unwrap().contains("in use"), "{row}");
    // The audit is gone: the release goes.
    let row = gc();
    assert_eq!(row["removed"], true, "{row}");
    assert!(!used.exists());
}
