//! The triage store from the outside: where it may be (never created through a link planted where
//! the default store goes), and what each way it can be unusable says (one line, the documented
//! exit code, and the way out: another `--db`, or `--no-db`). Triage of the CNN fixture against
//! its committed golden run, with only the CPU EP as candidate.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// `triage` of `reports` (store as `extra` says), returning (exit code, JSON, stderr).
fn triage_with(reports: &[&Path], extra: &[&str]) -> (i32, Value, String) {
    triage_as(reports, extra, false)
}

/// [`triage_with`], as an unprivileged user when `unprivileged` and the tests run as root (root
/// writes files whatever their mode says).
fn triage_as(reports: &[&Path], extra: &[&str], unprivileged: bool) -> (i32, Value, String) {
    let golden = repo("golden/cnn_fp32");
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"));
    cmd.env_remove("NPU_AUDIT_FAULT_INJECT").arg("triage");
    if extra.contains(&"--summary") {
        cmd.args(["--model", &cnn()]);
    } else {
        cmd.arg(cnn());
    }
    cmd.args(reports)
        .args(["--golden", golden.to_str().unwrap()])
        .args(["-t", "cpu", "--format", "json"])
        .args(extra);
    // The default store is the user's: each test's own data directory, beside its fleet.
    if let Some(dir) = reports.first().and_then(|r| r.parent()) {
        cmd.env("NPU_AUDIT_DATA", dir.join("data"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: geteuid has no preconditions.
        if unprivileged && unsafe { libc::geteuid() } == 0 {
            cmd.uid(65534).gid(65534);
        }
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fleet directory with one report of the golden run's own outputs.
fn fleet(dir: &Path) -> PathBuf {
    let fleet = dir.join("fleet");
    std::fs::create_dir_all(&fleet).unwrap();
    let outputs: Vec<(String, npu_audit::data::tensor::Tensor)> = ["logits", "probs"]
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let flat: Vec<f32> = (0..4)
                .flat_map(|s| {
                    let t = npu_audit::data::tensor::Tensor::read_npy(
                        &repo("golden/cnn_fp32/outputs").join(format!("s{s}/o{k}.npy")),
                    )
                    .unwrap();
                    values(&t).into_iter().map(|v| v as f32).collect::<Vec<f32>>()
                })
                .collect();
            let t = npu_audit::data::tensor::Tensor::new(
                vec![4, 1, 10],
                npu_audit::data::tensor::TensorData::Float32(flat),
            );
            (name.to_string(), t.unwrap())
        })
        .collect();
    add_report(&fleet, "a", &outputs);
    fleet
}

fn add_report(fleet: &Path, name: &str, outputs: &[(String, npu_audit::data::tensor::Tensor)]) {
    let r = fleet.join(name);
    std::fs::create_dir_all(&r).unwrap();
    let refs: Vec<(String, &npu_audit::data::tensor::Tensor)> = outputs.iter().map(|(n, t)| (n.clone(), t)).collect();
    npu_audit::data::tensor::write_npz(&r.join("outputs.npz"), &refs).unwrap();
    std::fs::write(r.join("device.json"), r#"{"soc_model": "SM8650"}"#).unwrap();
}

/// Asserts a refusal of the store: `code`, one line naming the store and `needle`, and the way out.
fn assert_store_error(got: &(i32, Value, String), code: i32, needle: &str) {
    let (c, _, err) = got;
    assert_eq!(*c, code, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("triage store ") && err.contains(needle),
        "expected '{needle}' in: {err}"
    );
    assert!(err.contains("--db") && err.contains("--no-db"), "no way out in: {err}");
}

/// Without `--db`, the store is `triage.db` in the user's data directory (`NPU_AUDIT_DATA`
/// here), said on stderr, and nothing is written beside the reports; a second run reads its
/// entry back from there.
#[test]
fn the_default_store_is_the_users_and_is_said() {
    let dir = tempdir();
    let fleet = fleet(dir.path());
    let store = dir.path().join("data/triage.db");
    let (code, first, err) = triage_with(&[&fleet], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(store.is_file(), "no store at {}", store.display());
    assert!(
        err.contains(&format!("triage store: {}", store.display())),
        "where the store went is not said: {err}"
    );
    let beside: Vec<String> = std::fs::read_dir(&fleet)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(beside, ["a"], "triage wrote into the fleet directory");
    let (code, second, err) = triage_with(&[&fleet], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(second["store"]["path"], store.display().to_string());
    assert_eq!(second["store"]["reports_from_store"], 1, "{}", second["store"]);
    assert_eq!(first["reports"], second["reports"]);
}

/// A dangling link named like the default store made triage create its database wherever the
/// link pointed. The default store (in the user's data directory, never in the fleet) is never
/// used through a link; a `--db` the user names may be a link to an existing file, never a
/// dangling one.
#[cfg(unix)]
#[test]
fn the_store_is_never_created_through_a_link() {
    use std::os::unix::fs::symlink;
    let dir = tempdir();
    let fleet = fleet(dir.path());
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let planted = outside.join("planted.db");
    std::fs::create_dir(dir.path().join("data")).unwrap();
    symlink(&planted, dir.path().join("data/triage.db")).unwrap();
    let got = triage_with(&[&fleet], &[]);
    assert_store_error(&got, 2, "triage.db is a symbolic link");
    assert!(!planted.exists(), "a store was made through the planted link");
    // A --db through a dangling link: refused, nothing made.
    let dangling = dir.path().join("dangling.db");
    let target = outside.join("target.db");
    symlink(&target, &dangling).unwrap();
    let got = triage_with(&[&fleet], &["--db", dangling.to_str().unwrap()]);
    assert_store_error(&got, 2, "a symbolic link to a missing file");
    assert!(!target.exists(), "a store was made through a dangling --db link");
    // A --db link to an existing store: followed.
    let real = outside.join("real.db");
    let (code, _, err) = triage_with(&[&fleet], &["--db", real.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let via = dir.path().join("via.db");
    symlink(&real, &via).unwrap();
    let (code, json, err) = triage_with(&[&fleet], &["--db", via.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["store"]["reports_from_store"], 1, "{json}");
}

/// `--db /dev/null` said "disk I/O error"; a corrupt page gave exit 4 with no way out while a
/// truncated store gave 2. Each says what is wrong, with exit 2 and the way out.
#[test]
fn an_unusable_store_is_refused_saying_why_with_the_way_out() {
    let dir = tempdir();
    let fleet = fleet(dir.path());
    assert_store_error(
        &triage_with(&[&fleet], &["--db", "/dev/null"]),
        2,
        "is a character device, not a triage store file",
    );
    let store = |name: &str| {
        let db = dir.path().join(name);
        let (code, _, err) = triage_with(&[&fleet], &["--db", db.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        (std::fs::read(&db).unwrap(), db)
    };
    // Every page after the first (the header and the schema) overwritten.
    let (bytes, corrupt) = store("corrupt.db");
    assert!(bytes.len() > 8192, "the store has only {} bytes", bytes.len());
    let mut damaged = bytes[..4096].to_vec();
    damaged.extend(std::iter::repeat_n(0xA5u8, bytes.len() - 4096));
    std::fs::write(&corrupt, damaged).unwrap();
    assert_store_error(
        &triage_with(&[&fleet], &["--db", corrupt.to_str().unwrap()]),
        2,
        "is damaged",
    );
    let (bytes, truncated) = store("truncated.db");
    std::fs::write(&truncated, &bytes[..1000]).unwrap();
    assert_store_error(
        &triage_with(&[&fleet], &["--db", truncated.to_str().unwrap()]),
        2,
        "is damaged",
    );
}

/// A store another process holds locked past the 30 s SQLite waits: said as locked (exit 4, the
/// machine's state), not as "not an SQLite database (database is locked)".
#[test]
fn a_store_locked_by_another_process_is_said_to_be_locked() {
    use std::io::BufRead;
    let dir = tempdir();
    let fleet = fleet(dir.path());
    let db = dir.path().join("locked.db");
    let (code, _, err) = triage_with(&[&fleet], &["--db", db.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let mut holder = std::process::Command::new(std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into()))
        .args([
            "-c",
            "import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1], isolation_level=None); \
             c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(300)",
            db.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    let out = bin()
        .args(["triage", "--summary", "--db", db.to_str().unwrap()])
        .output()
        .unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_store_error(
        &(out.status.code().unwrap_or(-1), Value::Null, err),
        4,
        "is locked by another process",
    );
}

/// A store the user may only read was refused even when nothing needed writing. A rerun that
/// finds every report stored, and `--summary`, read it; a triage with something new to keep says
/// the store is read-only before any work.
#[cfg(unix)]
#[test]
fn a_read_only_store_serves_what_needs_no_writing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(dir.path(), 0o755);
    let fleet = fleet(dir.path());
    let stores = dir.path().join("stores");
    std::fs::create_dir(&stores).unwrap();
    let db = stores.join("s.db");
    let db_arg = db.to_str().unwrap();
    let (code, _, err) = triage_with(&[&fleet], &["--db", db_arg]);
    assert_eq!(code, 0, "{err}");
    mode(&db, 0o444);
    mode(&stores, 0o555);
    let (code, json, err) = triage_as(&[&fleet], &["--db", db_arg], true);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["store"]["reports_from_store"], 1, "{json}");
    let (code, json, err) = triage_as(&[], &["--summary", "--db", db_arg], true);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json[0]["reports"].as_array().map(Vec::len), Some(1), "{json}");
    // A new report: nothing runs, the store is said to be read-only.
    let outputs = npu_audit::data::tensor::read_npz(&fleet.join("a/outputs.npz")).unwrap();
    let scaled: Vec<(String, npu_audit::data::tensor::Tensor)> = outputs
        .into_iter()
        .map(|(n, t)| {
            let v: Vec<f32> = values(&t).into_iter().map(|v| v as f32 * 0.5).collect();
            (
                n,
                npu_audit::data::tensor::Tensor::new(t.shape.clone(), npu_audit::data::tensor::TensorData::Float32(v))
                    .unwrap(),
            )
        })
        .collect();
    add_report(&fleet, "b", &scaled);
    assert_store_error(&triage_as(&[&fleet], &["--db", db_arg], true), 2, "is read-only");
}
