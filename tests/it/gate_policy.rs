//! The release gate end to end: every rule kind passing and failing on real fixture runs at
//! values computed independently (NumPy figures in fixtures/expected, top-1 recomputed here from
//! the saved outputs), baseline mode against a previous report, `--shard` + `merge` equal to a
//! single run, stored per-layer activations, and bad policy files and merges.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value;

fn expected(target: &str, output: &str, field: &str) -> f64 {
    let m: Value = serde_json::from_slice(&std::fs::read(repo("fixtures/expected/metrics.json")).unwrap()).unwrap();
    let pair = m["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["target"] == target)
        .unwrap();
    num(&pair["outputs"][output][field])
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// `(measured, limit, pass, origin)` of one rule.
fn rule(report: &Value, rule: &str, target: &str, output: &str) -> (f64, f64, bool, String) {
    let r = report["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == rule && r["target"] == target && r["output"] == output)
        .unwrap_or_else(|| panic!("no rule {rule} {target} {output} in {}", report["gate"]));
    (
        num(&r["measured"]),
        num(&r["limit"]),
        r["pass"].as_bool().unwrap(),
        r["origin"].as_str().unwrap().to_string(),
    )
}

#[test]
fn output_rules_pass_and_fail_at_the_numpy_figures() {
    let dir = tempdir();
    let key = "models/cnn_qdq_u8.onnx";
    let (sqnr_l, sqnr_p) = (expected(key, "logits", "sqnr_db"), expected(key, "probs", "sqnr_db"));
    let (abs_l, abs_p) = (expected(key, "logits", "max_abs"), expected(key, "probs", "max_abs"));
    // Each limit a hair beyond the NumPy figure on one output and short of it on the other.
    let policy = write(
        dir.path(),
        "npu-audit.toml",
        &format!(
            "[defaults]\nrequire_bit_exact = true\n\n[defaults.outputs.logits]\nmin_sqnr_db = {}\nmax_abs = {}\nmin_top1_agreement = 1.0\n\n[defaults.outputs.probs]\nmin_sqnr_db = {}\nmax_abs = {}\n",
            sqnr_l - 1e-6,
            abs_l + 1e-7,
            sqnr_p + 1e-6,
            abs_p - 1e-7
        ),
    );
    let inputs = repo("fixtures/inputs/cnn_seed7.npz").display().to_string();
    let (code, r, stderr) = compare_json(&[
        &cnn(),
        "--reference",
        &cnn_fp32(),
        "--inputs",
        &inputs,
        "-t",
        "cpu:noopt",
        "--no-baseline",
        "--config",
        &policy,
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(r["gate"]["verdict"], "fail");
    let (m, l, pass, origin) = rule(&r, "min_sqnr_db", "cpu:noopt", "logits");
    assert_close("sqnr logits", m, sqnr_l, 1e-9);
    assert!(pass && l < m && origin.ends_with("npu-audit.toml:5"), "{origin}");
    let (m, _, pass, origin) = rule(&r, "min_sqnr_db", "cpu:noopt", "probs");
    assert_close("sqnr probs", m, sqnr_p, 1e-9);
    assert!(!pass && origin.ends_with("npu-audit.toml:10"), "{origin}");
    let (m, _, pass, _) = rule(&r, "max_abs", "cpu:noopt", "logits");
    assert_close("max_abs logits", m, abs_l, 1e-12);
    assert!(pass);
    let (m, _, pass, _) = rule(&r, "max_abs", "cpu:noopt", "probs");
    assert_close("max_abs probs", m, abs_p, 1e-12);
    assert!(!pass);
    assert_eq!(
        rule(&r, "min_top1_agreement", "cpu:noopt", "logits"),
        (1.0, 1.0, true, format!("{policy}:7"))
    );
    // Not a single element is bit-identical (NumPy: bit_identical 0 of 10).
    let (m, l, pass, _) = rule(&r, "bit_exact", "cpu:noopt", "probs");
    assert_eq!((m, l, pass), (10.0, 0.0, false));
    assert!(rule(&r, "ran", "cpu:noopt", "(run)").2);

    // Bit-exact passing: the fp32 model against itself on the same runtime and settings.
    let (code, r, stderr) = compare_json(&[
        &cnn_fp32(),
        "--reference",
        &cnn_fp32(),
        "--inputs",
        &inputs,
        "-t",
        "cpu:noopt",
        "--no-baseline",
        "--require-bit-exact",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        rule(&r, "bit_exact", "cpu:noopt", "probs"),
        (0.0, 0.0, true, "--require-bit-exact".into())
    );
}

#[test]
fn top1_rules_match_argmax_agreement_recomputed_from_the_saved_outputs() {
    let dir = tempdir();
    let saved = dir.path().join("saved");
    let policy = write(
        dir.path(),
        "p.toml",
        "[target.\"cpu:noopt\"]\nmin_top1_agreement = 0.95\n[target.\"qnn:sm8650\"]\nmin_top1_agreement = 0.95\n[defaults.outputs.hidden]\nmax_abs = 100\n",
    );
    let (_, r, stderr) = compare_json(&[
        &repo("fixtures/models/transformer_qdq_u8.onnx").display().to_string(),
        "--reference",
        &repo("fixtures/models/transformer_fp32.onnx").display().to_string(),
        "--inputs",
        &repo("fixtures/inputs/transformer_seed7.npz").display().to_string(),
        "--class-axis",
        "hidden=1",
        "-t",
        "cpu:noopt",
        "-t",
        "qnn:sm8650",
        "--no-baseline",
        "--save-outputs",
        &saved.display().to_string(),
        "--config",
        &policy,
    ]);
    // Top-1 along axis 1 of the [1, T, D] hidden state: for each feature, the token with the
    // largest value.
    let gold = npz_array(&saved.join("golden/s0.npz"), "hidden");
    let rows = |t: &npu_audit::data::tensor::Tensor| -> Vec<usize> {
        let (tokens, d) = (t.shape[1], t.shape[2]);
        let v = values(t);
        (0..d)
            .map(|f| (0..tokens).fold(0, |best, i| if v[i * d + f] > v[best * d + f] { i } else { best }))
            .collect()
    };
    let g = rows(&gold);
    let mut outcomes = Vec::new();
    for (id, dirname, limit) in [("cpu:noopt", "cpu_noopt", 0.95), ("qnn:sm8650", "qnn_sm8650", 0.95)] {
        let t = rows(&npz_array(&saved.join(format!("{dirname}/s0.npz")), "hidden"));
        let agree = g.iter().zip(&t).filter(|(a, b)| a == b).count() as f64 / g.len() as f64;
        let (m, l, pass, _) = rule(&r, "min_top1_agreement", id, "hidden");
        assert_close(id, m, agree, 1e-12);
        assert_eq!((l, pass), (limit, agree >= limit), "{stderr}");
        outcomes.push(pass);
    }
    assert_eq!(
        outcomes,
        [true, false],
        "the limits were chosen to give one pass and one fail"
    );

    // A top-1 limit named for an output without a class axis fails (nothing to measure);
    // set for every output, it skips that output.
    let named = write(
        dir.path(),
        "n.toml",
        "[defaults.outputs.hidden]\nmin_top1_agreement = 0.5\n",
    );
    let every = write(dir.path(), "e.toml", "[defaults]\nmin_top1_agreement = 0.5\n");
    let t = repo("fixtures/models/transformer_qdq_u8.onnx").display().to_string();
    let (code, r, _) = compare_json(&[&t, "-t", "cpu:noopt", "--no-baseline", "--config", &named]);
    let (m, _, pass, _) = rule(&r, "min_top1_agreement", "cpu:noopt", "hidden");
    assert!(m.is_nan() && !pass && code == 1);
    let (code, r, _) = compare_json(&[&t, "-t", "cpu:noopt", "--no-baseline", "--config", &every]);
    assert_eq!((code, r["gate"]["verdict"].as_str()), (0, Some("pass")));
    assert_eq!(r["gate"]["rules"].as_array().unwrap().len(), 1, "only `ran`");
}

#[test]
fn placement_and_run_rules_pass_and_fail_at_the_expected_placement() {
    let dir = tempdir();
    let want: Value =
        serde_json::from_slice(&std::fs::read(repo("fixtures/expected/placement.json")).unwrap()).unwrap();
    let fallback = repo("fixtures/models/fallback_qdq_u8.onnx").display().to_string();
    let partitions = want["qnn_partitions"].as_u64().unwrap() as f64;
    let policy = write(
        dir.path(),
        "p.toml",
        &format!(
            "[groups]\nhtp = [\"qnn:sm8650\", \"qnn:sm8850\"]\n[target.\"qnn:sm8650\"]\nmax_fallback_nodes = 1\nmax_partitions = {partitions}\n[target.\"qnn:sm8850\"]\nmax_fallback_nodes = 0\nmax_partitions = {}\nfail_on_fallback = true\n",
            partitions - 1.0
        ),
    );
    let (code, r, stderr) = compare_json(&[&fallback, "-t", "qnn:sm8650", "-t", "qnn:sm8850", "--config", &policy]);
    assert_eq!(code, 1, "{stderr}");
    // One compute node (Celu) falls back; the graph is cut into the expected partitions.
    assert_eq!(rule(&r, "max_fallback_nodes", "qnn:sm8650", "(placement)").0, 1.0);
    assert!(rule(&r, "max_fallback_nodes", "qnn:sm8650", "(placement)").2);
    assert!(!rule(&r, "max_fallback_nodes", "qnn:sm8850", "(placement)").2);
    assert_eq!(
        rule(&r, "max_partitions", "qnn:sm8650", "(placement)"),
        (partitions, partitions, true, format!("{policy}:5"))
    );
    assert!(!rule(&r, "max_partitions", "qnn:sm8850", "(placement)").2);
    assert_eq!(rule(&r, "fail_on_fallback", "qnn:sm8850", "(placement)").0, 1.0);
    // fail_on_fallback passes where nothing falls back (the CNN on the HTP).
    let (code, r, _) = compare_json(&[&cnn(), "-t", "qnn:sm8650", "--fail-on-fallback"]);
    assert_eq!(
        rule(&r, "fail_on_fallback", "qnn:sm8650", "(placement)"),
        (0.0, 0.0, true, "--fail-on-fallback".into())
    );
    assert_eq!(code, 0);

    // A target that refuses the model on every host: `ran` fails (exit 3) unless the policy
    // allows it.
    let refused = crate::common::REFUSED_TARGET;
    let (code, r, _) = compare_json(&[&cnn(), "-t", "cpu", "-t", refused, "--min-sqnr", "0"]);
    assert_eq!((code, rule(&r, "ran", refused, "(run)").2), (3, false));
    let allow = write(
        dir.path(),
        "a.toml",
        &format!(
            "allow_failure = [\"{}\"]\n[defaults]\nmin_sqnr_db = 0\n",
            crate::common::REFUSED_PATTERN
        ),
    );
    let (code, r, _) = compare_json(&[&cnn(), "-t", "cpu", "-t", refused, "--config", &allow]);
    assert_eq!(code, 0);
    assert_eq!(
        rule(&r, "ran", refused, "(run)"),
        (0.0, 1.0, true, "allowed to fail: it failed; not gated".into())
    );
    assert_eq!(
        r["gate"]["policy"]["allowed_to_fail"],
        serde_json::json!([crate::common::REFUSED_PATTERN])
    );
}

#[test]
fn baseline_mode_fails_only_when_drift_got_worse_than_the_previous_report() {
    let dir = tempdir();
    let prev = dir.path().join("prev.json");
    let base = [
        "--gen",
        "image=uniform:-1,1",
        "--seed",
        "7",
        "--samples",
        "2",
        "-t",
        "cpu",
        "-t",
        "qnn:sm8650",
    ];
    let out = run(&[
        &["compare", &cnn(), "--out", &prev.display().to_string()][..],
        &base[..],
    ]
    .concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let policy = write(
        dir.path(),
        "npu-audit.toml",
        "mode = \"baseline\"\n[defaults]\nmin_sqnr_db = 99\nmax_sqnr_regression_db = 0.25\n[baseline]\nreport = \"prev.json\"\n",
    );
    // The same model and inputs: no regression anywhere, and the absolute limit is not applied.
    let cnn = cnn();
    let with_policy = [&[cnn.as_str(), "--config", &policy][..], &base[..]].concat();
    let (code, r, stderr) = compare_json(&with_policy);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["gate"]["policy"]["mode"], "baseline");
    let rules = r["gate"]["rules"].as_array().unwrap();
    assert!(rules.iter().all(|x| x["rule"] != "min_sqnr_db"));
    let regressions: Vec<&Value> = rules.iter().filter(|x| x["rule"] == "sqnr_regression_db").collect();
    assert_eq!(regressions.len(), 4, "2 targets x 2 outputs");
    assert!(regressions
        .iter()
        .all(|x| num(&x["measured"]) == 0.0 && x["pass"] == true));

    // The previous release was 0.3 dB better on qnn probs (more than the 0.25 margin) and
    // 0.2 dB better on cpu logits (within it).
    let mut old: Value = serde_json::from_slice(&std::fs::read(&prev).unwrap()).unwrap();
    let now = |id: &str, o: &str| num(&output(&old, id, o)["sqnr_db"]);
    let (q, c) = (now("qnn:sm8650", "probs"), now("cpu", "logits"));
    for t in old["targets"].as_array_mut().unwrap() {
        let id = t["id"].as_str().unwrap().to_string();
        for out in t["outputs"].as_array_mut().unwrap() {
            match (id.as_str(), out["name"].as_str().unwrap()) {
                ("qnn:sm8650", "probs") => out["sqnr_db"] = (q + 0.3).into(),
                ("cpu", "logits") => out["sqnr_db"] = (c + 0.2).into(),
                _ => {}
            }
        }
    }
    std::fs::write(&prev, serde_json::to_vec(&old).unwrap()).unwrap();
    let (code, r, _) = compare_json(&with_policy);
    assert_eq!(code, 1);
    let (m, l, pass, origin) = rule(&r, "sqnr_regression_db", "qnn:sm8650", "probs");
    assert_close("lost dB", m, 0.3, 1e-9);
    assert_eq!((l, pass), (0.25, false));
    assert!(
        origin.ends_with("npu-audit.toml:4 vs ") || origin.contains("npu-audit.toml:4 vs "),
        "{origin}"
    );
    let (m, _, pass, _) = rule(&r, "sqnr_regression_db", "cpu", "logits");
    assert_close("lost dB", m, 0.2, 1e-9);
    assert!(pass);

    // Other inputs than the previous report's: refused, naming the input.
    fails_with(
        &[
            "compare",
            &cnn,
            "--config",
            &policy,
            "--gen",
            "image=uniform:-1,1",
            "--seed",
            "8",
            "-t",
            "cpu",
        ],
        2,
        "was made on other inputs (sample 0 input 'image' differs)",
    );
}

/// A report without what differs between two runs of the same audit (timings, log paths,
/// session counts, shard bookkeeping).
fn stable(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in ["timing", "seconds", "log", "sessions", "shard", "merged_from", "notes"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

#[test]
fn shards_merged_equal_a_single_run() {
    let dir = tempdir();
    let d = dir.path();
    let policy = write(
        d,
        "p.toml",
        "[defaults]\nmin_sqnr_db = 26\n[target.\"qnn:*\"]\nmax_partitions = 1\n",
    );
    let args = [
        "--reference",
        &cnn_fp32(),
        "--gen",
        "image=uniform:-1,1",
        "--seed",
        "3",
        "--samples",
        "2",
        "-t",
        "cpu",
        "-t",
        "qnn:sm8650",
        "-t",
        "qnn:sm8850",
        "--layers",
        "all",
        "--config",
        &policy,
    ];
    let single = d.join("single.json");
    let code = |a: &[&str]| run(a).status.code();
    let single_code = code(
        &[
            &["compare", &cnn(), "--out", &single.display().to_string()][..],
            &args[..],
        ]
        .concat(),
    );
    let mut parts = Vec::new();
    for i in 1..=2 {
        let sub = d.join(format!("shard{i}"));
        std::fs::create_dir(&sub).unwrap();
        let out = sub.join("report.json");
        // The second part is found as a GitLab `parallel:` job would name it.
        let shard = if i == 1 { "1/2".to_string() } else { "auto".into() };
        let (model, out_arg) = (cnn(), out.display().to_string());
        let all = [
            &["compare", &model, "--shard", &shard, "--out", &out_arg][..],
            &args[..],
        ]
        .concat();
        let c = bin()
            .args(&all)
            .env("CI_NODE_INDEX", i.to_string())
            .env("CI_NODE_TOTAL", "2")
            .output()
            .unwrap()
            .status
            .code();
        assert!(matches!(c, Some(0 | 1)));
        parts.push(out);
    }
    let s1: Value = serde_json::from_slice(&std::fs::read(&parts[0]).unwrap()).unwrap();
    assert_eq!(
        s1["shard"]["targets"],
        serde_json::json!(["cpu", "qnn:sm8850", "cpu:noopt"])
    );
    assert_eq!(s1["shard"]["outputs_dir"], "report.outputs");
    // Moving a shard's report together with its outputs keeps the merge working (CI artifacts).
    let moved = d.join("artifacts");
    std::fs::rename(d.join("shard2"), &moved).unwrap();
    let report2 = moved.join("report.json").display().to_string();
    // Merges the two shards into `name` with `extra` flags; the merged report.
    let merge_into = |name: &str, extra: &[&str]| -> Value {
        let merged = d.join(name).display().to_string();
        let first = parts[0].display().to_string();
        let out = run(&[
            &["merge", first.as_str(), report2.as_str(), "--out", merged.as_str()][..],
            extra,
        ]
        .concat());
        assert_eq!(
            out.status.code(),
            single_code,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stable(serde_json::from_slice(&std::fs::read(&merged).unwrap()).unwrap())
    };
    let a = stable(serde_json::from_slice(&std::fs::read(&single).unwrap()).unwrap());
    let b = merge_into("merged.json", &[]);
    assert_eq!(
        a["agreement"].as_array().unwrap().len(),
        6 * 2,
        "4 targets: 6 pairs x 2 outputs"
    );
    assert_eq!(a, b, "merged report differs from the single run");

    // Bad merges: nothing is written, one line names the report.
    let junk = d.join("junk.json");
    let no_out = d.join("never.json");
    let o = no_out.display().to_string();
    fails_with(
        &["merge", &parts[0].display().to_string(), "--out", &o],
        2,
        "shard(s) 2/2 missing",
    );
    let other = d.join("other.json");
    let c = code(&[
        "compare",
        &repo("fixtures/models/fallback_qdq_u8.onnx").display().to_string(),
        "-t",
        "cpu",
        "--shard",
        "2/2",
        "--out",
        &other.display().to_string(),
    ]);
    assert_eq!(c, Some(0));
    fails_with(
        &[
            "merge",
            &parts[0].display().to_string(),
            &other.display().to_string(),
            "--out",
            &o,
        ],
        2,
        &format!("{}: the model's sha256: ", other.display()),
    );
    let mut v: Value = serde_json::from_slice(&std::fs::read(&parts[0]).unwrap()).unwrap();
    v["schema_version"] = 99.into();
    std::fs::write(&junk, serde_json::to_vec(&v).unwrap()).unwrap();
    fails_with(
        &["merge", &junk.display().to_string(), "--out", &o],
        2,
        "a compare report of schema version 99; this npu-audit reads version",
    );
    std::fs::write(
        &junk,
        "{\n  \"schema_version\": 1,\n  \"tool\": {\"name\": \"npu-audit\", \"version\": \"0\"},\n  \"targets\": 3\n}",
    )
    .unwrap();
    fails_with(&["merge", &junk.display().to_string(), "--out", &o], 2, "junk.json:");
    fails_with(
        &[
            "merge",
            &parts[0].display().to_string(),
            &parts[0].display().to_string(),
            "--out",
            &o,
        ],
        2,
        "shard 1/2 is also",
    );

    // Saved outputs moved apart from their report are named with --outputs REPORT=DIR.
    let elsewhere = d.join("elsewhere");
    std::fs::rename(moved.join("report.outputs"), &elsewhere).unwrap();
    let out = run(&["merge", &parts[0].display().to_string(), &report2, "--out", &o]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("agreement between targets of different shards is missing"),
        "a merge without the outputs says what is missing"
    );
    std::fs::remove_file(&no_out).unwrap();
    let spec = format!("{report2}={}", elsewhere.display());
    let c = merge_into("merged2.json", &["--outputs", &spec]);
    assert_eq!(a["agreement"], c["agreement"]);
    fails_with(
        &[
            "merge",
            &parts[0].display().to_string(),
            &report2,
            "--outputs",
            "x.json=/tmp",
            "--out",
            &o,
        ],
        2,
        "--outputs x.json=/tmp: x.json is not one of the reports merged",
    );
    // A saved output replaced after the shard ran is refused, naming the file.
    let npz = elsewhere.join("qnn_sm8650/s0.npz");
    let mut bytes = std::fs::read(&npz).unwrap();
    let last = bytes.len() - 30;
    bytes[last] ^= 1;
    std::fs::write(&npz, bytes).unwrap();
    fails_with(
        &[
            "merge",
            &parts[0].display().to_string(),
            &report2,
            "--outputs",
            &spec,
            "--out",
            &o,
        ],
        2,
        "the saved outputs were changed since the shard ran",
    );
    assert!(!no_out.exists());
}

#[test]
fn bad_policy_files_give_one_line_with_file_and_line_and_write_nothing() {
    let dir = tempdir();
    let out = dir.path().join("report.json");
    let o = out.display().to_string();
    let cases = [
        ("[defaults\nmin_sqnr_db = 1\n", ":1:"),
        ("[defaults]\nmin_sqnr = 30\n", ":2:1: unknown field `min_sqnr`"),
        (
            "[defaults]\nmax_abs = \"tiny\"\n",
            ":2:11: invalid type: string \"tiny\", expected f64",
        ),
        (
            "[target.\"qnn:sm8650\".outputs.probs]\nmax_partitions = 1\n",
            ":2:1: unknown field `max_partitions`",
        ),
        (
            "[defaults.outputs.probz]\nmax_abs = 1\n",
            ":1: 'probz' is not an output of the model",
        ),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let p = write(dir.path(), &format!("p{i}.toml"), text);
        fails_with(
            &["compare", &cnn(), "-t", "cpu", "--config", &p, "--out", &o],
            2,
            &format!("{p}{needle}"),
        );
        let p = Path::new(&p);
        if i < 4 {
            fails_with(&["check-config", &p.display().to_string()], 2, needle);
        }
    }
    assert!(!out.exists());
    fails_with(
        &["compare", &cnn(), "--config", "/nonexistent.toml"],
        2,
        "--config /nonexistent.toml: no such file",
    );
    // A valid file prints what each target gets and where each limit was set.
    let p = write(
        dir.path(),
        "ok.toml",
        "targets = [\"cpu\", \"qnn:sm8650\"]\n[defaults]\nmin_sqnr_db = 30\n[target.\"qnn:*\"]\nmin_sqnr_db = 25\n",
    );
    let out = run(&["check-config", &p]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("cpu:\n  min_sqnr_db = 30 (") && text.contains("ok.toml:3)"),
        "{text}"
    );
    assert!(
        text.contains("qnn:sm8650:\n  min_sqnr_db = 25 (") && text.contains("ok.toml:5)"),
        "{text}"
    );
}

#[test]
fn a_golden_run_with_activations_replaces_the_reference_run_and_detects_tampering() {
    let dir = tempdir();
    let g = dir.path().join("golden");
    let gs = g.display().to_string();
    let fp32 = repo("fixtures/models/ladder_fp32.onnx").display().to_string();
    let q = repo("fixtures/models/ladder_qdq_u8.onnx").display().to_string();
    let gen = ["--gen", "x=uniform:-4,4", "--seed", "5", "--samples", "2"];
    let out = run(&[&["golden", "create", &fp32, "--out", &gs, "--layers"][..], &gen[..]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, stored, _) = compare_json(&[&q, "--golden", &gs, "-t", "qnn:sm8650", "--layers", "all"]);
    let (_, live, _) = compare_json(
        &[
            &[q.as_str(), "--reference", &fp32, "-t", "qnn:sm8650", "--layers", "all"][..],
            &gen[..],
        ]
        .concat(),
    );
    assert!(
        stored["layer_audit"]["problems"].as_array().unwrap().is_empty(),
        "{}",
        stored["layer_audit"]
    );
    for id in ["qnn:sm8650", "cpu:noopt"] {
        let (a, b) = (&target(&stored, id)["layers"], &target(&live, id)["layers"]);
        assert_eq!(a.as_array().unwrap().len(), 6);
        assert_eq!(stable(a.clone()), stable(b.clone()), "{id}");
    }
    // The reference did not run: one session fewer.
    assert_eq!(
        stored["layer_audit"]["sessions"].as_u64().unwrap() + 1,
        live["layer_audit"]["sessions"].as_u64().unwrap()
    );
    // A reference that is not the golden run's model: refused unless told otherwise.
    let other = ["compare", &q, "--golden", &gs, "-t", "cpu", "--reference", &cnn_fp32()];
    fails_with(&other, 2, "is not the model the golden run");
    let (code, r, _) = compare_json(&[&other[1..], &["--allow-golden-mismatch"][..]].concat());
    assert_eq!(code, 0);
    assert!(r["notes"]
        .to_string()
        .contains("compared anyway (--allow-golden-mismatch)"));
    // An altered activation archive is refused, naming the file.
    let npz = g.join("layers/s1.npz");
    let mut bytes = std::fs::read(&npz).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    std::fs::write(&npz, bytes).unwrap();
    fails_with(
        &["compare", &q, "--golden", &gs, "-t", "cpu"],
        2,
        "layers/s1.npz was altered",
    );
    std::fs::remove_file(&npz).unwrap();
    fails_with(
        &["compare", &q, "--golden", &gs, "-t", "cpu"],
        2,
        "layers/s1.npz is missing",
    );
}
