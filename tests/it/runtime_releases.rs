//! Runtime releases as an axis of the audit, end to end with real releases fetched from the
//! Python index (two QNN plugin releases and two ONNX Runtime cores, plus the incompatible 2.3.0
//! plugin): every figure a test asserts about a release is recomputed here from the outputs the
//! audit saved, never taken from the tool.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value;

const OUTPUT: &str = "save_infer_model/scale_0.tmp_1";

fn ppocr() -> String {
    repo("fixtures/real/ppocr_cls_qdq_u8.onnx").display().to_string()
}

fn golden() -> String {
    repo("golden/ppocr_cls_fp32").display().to_string()
}

/// A release's saved outputs, every sample, as bits and as values.
fn saved(dir: &Path, id: &str) -> Vec<f64> {
    let sub = id.replace([':', '@', '+', ','], "_");
    (0..2)
        .flat_map(|k| values(&npz_array(&dir.join(&sub).join(format!("s{k}.npz")), OUTPUT)))
        .collect()
}

fn differing(a: &[f64], b: &[f64]) -> u64 {
    a.iter().zip(b).filter(|(x, y)| x.to_bits() != y.to_bits()).count() as u64
}

fn agreement<'a>(r: &'a Value, a: &str, b: &str) -> &'a Value {
    r["agreement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| (e["a"] == a && e["b"] == b) || (e["a"] == b && e["b"] == a))
        .unwrap_or_else(|| panic!("no agreement {a} ~ {b}"))
}

#[test]
fn two_qnn_releases_of_one_chipset_are_two_targets_with_their_own_figures() {
    let dir = tempdir();
    let saved_dir = dir.path().join("saved");
    let (a, b) = ("qnn:sm8650@2.5.0", "qnn:sm8650@2.7.0");
    let (code, report, stderr) = compare_json(&[
        &ppocr(),
        "--golden",
        &golden(),
        "-t",
        a,
        "-t",
        b,
        "-t",
        "cpu",
        "--fingerprint",
        "off",
        "--save-outputs",
        saved_dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Each release on its plugin and the core the catalogue says it runs on.
    let runtime = |id: &str| {
        let rt = &target(&report, id)["runtime"];
        (rt["plugin"]["version"].clone(), rt["version"].clone())
    };
    assert_eq!(runtime(a), (Value::from("2.5.0"), Value::from("1.32.0")));
    assert_eq!(runtime(b), (Value::from("2.7.0"), Value::from("1.31.1")));
    // Their figures, recomputed from what each saved against the golden run's outputs.
    let gold = saved(&saved_dir, "golden");
    for id in [a, b] {
        let mine = saved(&saved_dir, id);
        let want = plain_metrics(&mine, &gold).sqnr_db;
        assert_close(id, num(&output(&report, id, OUTPUT)["sqnr_db"]), want, 1e-9);
    }
    // Their disagreement: the two releases do not agree bit for bit on this model.
    let (x, y) = (saved(&saved_dir, a), saved(&saved_dir, b));
    let d = differing(&x, &y);
    assert!(d > 0, "2.5.0 and 2.7.0 gave the same bits");
    assert_eq!(agreement(&report, a, b)["differing_elements"], d);
    let groups = &report["bit_exact_groups"][0]["groups"];
    assert!(
        groups
            .as_array()
            .unwrap()
            .iter()
            .all(|g| !(g.as_array().unwrap().contains(&Value::from(a))
                && g.as_array().unwrap().contains(&Value::from(b))))
    );
}

#[test]
fn two_core_releases_of_the_cpu_ep_agree_bit_for_bit() {
    let (code, report, stderr) = compare_json(&[&cnn(), "-t", "cpu", "-t", "cpu@1.30.0", "--fingerprint", "off"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(target(&report, "cpu@1.30.0")["runtime"]["version"], "1.30.0");
    assert_eq!(target(&report, "cpu")["runtime"]["version"], "1.31.1");
    for e in report["agreement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["a"] == "cpu" && e["b"] == "cpu@1.30.0")
    {
        assert_eq!(e["differing_elements"], 0, "{e}");
    }
}

#[test]
fn a_plugin_on_a_core_it_does_not_run_on_fails_with_the_runtime_s_words_never_a_cpu_result() {
    let id = "qnn:sm8650@2.3.0+ort1.31.1";
    let out = run(&["compare", &cnn(), "-t", id, "--fingerprint", "off", "--format", "json"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = target(&report, id);
    assert_eq!(t["status"], "failed");
    assert_eq!(t["failed_at"], "create_session");
    assert!(
        t["error"].as_str().unwrap().contains("ort_version_supported=0"),
        "{}",
        t["error"]
    );
    assert_eq!(t["outputs"], serde_json::json!([]));
    assert!(report["notes"].as_array().unwrap().iter().any(|n| n
        .as_str()
        .unwrap()
        .contains("the catalogue records that onnxruntime-qnn 2.3.0 fails on onnxruntime 1.31.1")));
}

#[test]
fn bisection_names_the_first_release_that_differs_and_the_layer() {
    let dir = tempdir();
    let saved_dir = dir.path().join("saved");
    let releases = ["2.5.0", "2.6.0", "2.7.0"];
    let mut args = vec![
        "compare".to_string(),
        ppocr(),
        "--golden".into(),
        golden(),
        "--fingerprint".into(),
        "off".into(),
    ];
    for r in releases {
        args.extend(["-t".into(), format!("qnn:sm8650@{r}")]);
    }
    args.extend(["--save-outputs".into(), saved_dir.display().to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(run(&refs).status.code(), Some(0));
    // The first release whose saved outputs differ from 2.5.0's.
    let from = saved(&saved_dir, "qnn:sm8650@2.5.0");
    let first = releases[1..]
        .iter()
        .find(|r| differing(&saved(&saved_dir, &format!("qnn:sm8650@{r}")), &from) > 0)
        .expect("a release differs");
    let out = run(&[
        "runtime",
        "bisect",
        &ppocr(),
        "--golden",
        &golden(),
        "-t",
        "qnn:sm8650",
        "--from",
        "2.5.0",
        "--to",
        "2.7.0",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let found: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(found["first_differing"], *first);
    let steps = found["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    for s in &steps[1..] {
        let mine = saved(&saved_dir, s["target"].as_str().unwrap());
        assert_eq!(s["changes"][0]["differing"], differing(&mine, &from), "{s}");
    }
    let layers = &found["layers"];
    assert!(layers["first_code_difference"]["node"].is_string(), "{layers}");
    let before = releases[releases.iter().position(|r| r == first).unwrap() - 1];
    assert_eq!(layers["against"], before);
}

#[test]
fn the_policy_runs_each_target_on_its_releases_and_gates_the_upgrade() {
    let dir = tempdir();
    let policy = dir.path().join("npu-audit.toml");
    std::fs::write(
        &policy,
        "targets = [\"qnn:sm8650\"]\n[runtime]\nqnn = [\"2.5.0\", \"2.7.0\"]\nmax_sqnr_change_db = 0.01\nrequire_bit_exact = true\n",
    )
    .unwrap();
    let saved_dir = dir.path().join("saved");
    let (code, report, stderr) = compare_json(&[
        &ppocr(),
        "--golden",
        &golden(),
        "--config",
        policy.to_str().unwrap(),
        "--fingerprint",
        "off",
        "--save-outputs",
        saved_dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    let rules: Vec<&Value> = report["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["rule"].as_str().unwrap().starts_with("release_"))
        .collect();
    assert_eq!(rules.len(), 2, "{rules:?}");
    let (a, b) = ("qnn:sm8650@2.5.0", "qnn:sm8650@2.7.0");
    let gold = saved(&saved_dir, "golden");
    let sqnr = |id: &str| plain_metrics(&saved(&saved_dir, id), &gold).sqnr_db;
    for r in rules {
        assert_eq!(r["target"], b);
        assert_eq!(r["pass"], false);
        match r["rule"].as_str().unwrap() {
            "release_sqnr_change_db" => assert_close("change", num(&r["measured"]), (sqnr(b) - sqnr(a)).abs(), 1e-9),
            "release_bit_exact" => {
                let d = differing(&saved(&saved_dir, a), &saved(&saved_dir, b));
                assert_eq!(num(&r["measured"]), d as f64);
            }
            other => panic!("{other}"),
        }
    }
}

#[test]
fn release_names_are_checked_against_the_catalogue() {
    fails_with(
        &["compare", &cnn(), "-t", "qnn:sm8650@9.9.9"],
        2,
        "no release 9.9.9 of qnn in the catalogue",
    );
    fails_with(
        &["compare", &cnn(), "-t", "cpu@1.30.0+ort1.2.3"],
        2,
        "+ort names the core release of a plugin EP",
    );
    fails_with(
        &["compare", &cnn(), "-t", "qnn:sm8650@two"],
        2,
        "release 'two' is not VERSION",
    );
    let dir = tempdir();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, "[runtime]\nqnn = [\"2.9.0\"]\n").unwrap();
    fails_with(
        &["check-config", p.to_str().unwrap()],
        2,
        "p.toml:2:8: no release 2.9.0 of qnn in the catalogue",
    );
    let out = run(&["runtime", "list", "--all", "--format", "json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let qnn23 = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "qnn" && r["version"] == "2.3.0")
        .unwrap();
    assert_eq!(
        qnn23["wheel_sha256"],
        "087bb672ca0cabd3c7fed07084478fe78658cfa09fae1cb013099d7b2289dc72"
    );
    assert!(qnn23["refused"][0]
        .as_str()
        .unwrap()
        .starts_with("1.28.0 .. 1.32.0: create_session"));
}

/// A fake cached release in `cache`: its manifest, one library of `bytes` bytes, last used
/// `idle_days` ago (`None`: never recorded).
fn cached(cache: &Path, package: &str, version: &str, idle_days: Option<u64>) -> std::path::PathBuf {
    let dir = cache.join("runtimes").join(format!("{package}-{version}-linux-x86_64"));
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(dir.join("lib/libx.so"), vec![0u8; 1000]).unwrap();
    let manifest = serde_json::json!({
        "package": package, "version": version, "wheel": "x.whl", "wheel_sha256": "00",
        "files": [{"path": "lib/libx.so", "size": 1000, "sha256": "00"}]
    });
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    if let Some(days) = idle_days {
        let f = std::fs::File::create(dir.join(".last-used")).unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86400))
            .unwrap();
    }
    dir
}

#[test]
fn gc_removes_releases_unused_for_a_while_and_keeps_defaults_and_recent_ones() {
    let cache = tempdir();
    let old = cached(cache.path(), "onnxruntime", "1.25.0", Some(40));
    let never = cached(cache.path(), "onnxruntime-qnn", "2.4.0", None);
    let recent = cached(cache.path(), "onnxruntime", "1.30.0", Some(2));
    let default = cached(cache.path(), "onnxruntime", "1.31.1", Some(400));
    let dry = bin()
        .env("NPU_AUDIT_CACHE", cache.path())
        .args(["runtime", "gc", "--dry-run", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(dry.status.code(), Some(0));
    assert!(old.exists() && never.exists(), "--dry-run removed something");
    let out = bin()
        .env("NPU_AUDIT_CACHE", cache.path())
        .args(["runtime", "gc", "--keep-days", "30", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 4);
    assert!(!old.exists() && !never.exists());
    assert!(recent.exists() && default.exists());
}

#[cfg(unix)]
#[test]
fn a_downloaded_wheel_that_is_not_the_pinned_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let cache = dir.path().join("cache");
    let python = dir.path().join("python");
    // pip "downloads" a wheel of the right name with other contents.
    std::fs::write(
        &python,
        "#!/bin/sh\ncase \"$*\" in\n  --version) echo 'Python 3.11.0' ;;\n  '-m pip --version') echo 'pip 24' ;;\n  '-m pip download'*)\n    while [ \"$1\" != -d ]; do shift; done\n    echo tampered > \"$2/onnxruntime-1.25.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl\" ;;\n  *) echo '{\"packages\": {}, \"dirs\": []}' ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = bin()
        .env("NPU_AUDIT_PYTHON", &python)
        .env("NPU_AUDIT_CACHE", &cache)
        .args(["runtime", "install", "cpu@1.25.0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("not the pinned a349feb15476092372eb045a340cd88e53f7965ce5b489ebf5fea20c0bd49add"),
        "{stderr}"
    );
    assert!(!cache.join("runtimes/onnxruntime-1.25.0-linux-x86_64").exists());
}
