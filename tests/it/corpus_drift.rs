//! `eval SPEC.toml --task score` (corpus drift) end to end on the tiny decoder-only LM of
//! tests/data/generation: every figure (mean KLD and its standard error, the percentiles, Δp,
//! the same top token with its Wilson interval, both perplexities and their ratio, the curve by
//! position) is held to `scripts/lm_score.py`, an onnxruntime-python scorer written from the
//! contract in docs/generation.md that shares no code with the tool; the chunked prefill, the
//! token-at-a-time step and a padded last chunk are all scored; the gate's bounds, the refusals
//! of bad input, and the pages.

use crate::common;

use std::path::Path;

use common::*;
use npu_audit::data::tensor::{write_npz, Tensor, TensorData};
use serde_json::Value;

fn data(rel: &str) -> String {
    repo(&format!("tests/data/generation/{rel}")).display().to_string()
}

/// Runs `eval SPEC --task score --format json` with `args`: exit code, report, stderr.
fn score(spec: &str, set: &str, args: &[&str]) -> (i32, Value, String) {
    let out = bin()
        .args([
            "eval",
            spec,
            "--task",
            "score",
            "--dataset",
            set,
            "--no-config",
            "--format",
            "json",
        ])
        .args(args)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// `lm_score.py`'s figures for `spec` on `set`, its target on the CPU EP (`cpu` or `cpu:noopt`).
fn independent(spec: &str, set: &str, target: &str) -> Value {
    let py = venv_python("tests/data/numpy-ort-requirements.txt", "numpy-ort");
    let out = run_ok(std::process::Command::new(py).arg(repo("scripts/lm_score.py")).args([
        "--target-ep",
        target,
        spec,
        set,
    ]));
    serde_json::from_slice(&out.stdout).expect("lm_score.py prints JSON")
}

fn row<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("no target {id}"))
}

/// A figure of the tool against the independent one: within `rel` of it, or both tiny.
fn close(what: &str, got: &Value, want: &Value, rel: f64) {
    let (g, w) = (num(got), num(want));
    let ok = (g - w).abs() <= rel * w.abs().max(1e-9) || (g - w).abs() < 1e-12;
    assert!(ok, "{what}: tool {g}, lm_score.py {w}");
}

/// Holds a target's corpus figures to lm_score.py's.
fn check_corpus(c: &Value, want: &Value, rel: f64) {
    assert_eq!(c["positions"], want["positions"]);
    assert_eq!(c["nonfinite_positions"], want["nonfinite_positions"]);
    for k in ["mean", "median", "p90", "p99", "max"] {
        close(&format!("kld.{k}"), &c["kld"][k], &want["kld"][k], rel);
    }
    close("kld.p999", &c["kld"]["p999"], &want["kld"]["p99_9"], rel);
    close("kld.mean_se", &c["kld"]["mean_se"], &want["kld"]["stderr"], rel);
    for k in ["mean", "rms", "p1", "p99"] {
        close(&format!("delta_p.{k}"), &c["delta_p"][k], &want["dp"][k], rel);
    }
    assert_eq!(c["same_top"]["count"], want["same_top"]["count"]);
    for side in 0..2 {
        close(
            "same_top interval",
            &c["same_top"]["interval"][side],
            &want["same_top"]["wilson95"][side],
            1e-9,
        );
    }
    for k in ["reference", "target", "ln_ratio"] {
        close(&format!("perplexity.{k}"), &c["perplexity"][k], &want["ppl"][k], rel);
    }
    let (curve, wanted) = (
        c["by_position"].as_array().unwrap(),
        want["per_position"].as_array().unwrap(),
    );
    assert_eq!(curve.len(), wanted.len());
    for (p, w) in curve.iter().zip(wanted) {
        assert_eq!(p["windows"], w["count"], "position {}", p["position"]);
        close("curve mean KLD", &p["mean_kld"], &w["mean_kld"], rel);
        close("curve same top", &p["same_top"], &w["same_top"], 1e-12);
    }
}

#[test]
fn every_corpus_figure_equals_an_independent_onnxruntime_scorer() {
    let set = data("set_lm_text");
    // The chunked prefill (4 chunks of 4) and the step a token at a time score one text.
    for spec in ["lm_u8_chunked.toml", "lm_u8.toml", "lm_u8_split.toml"] {
        let (code, report, stderr) = score(&data(spec), &set, &["-t", "cpu"]);
        assert_eq!(code, 0, "{spec}: {stderr}");
        assert_eq!(report["task"], "score");
        for target in ["cpu", "cpu:noopt"] {
            let t = row(&report, target);
            assert_eq!(t["status"], "ok", "{spec} {target}: {}", t["error"]);
            let want = independent(&data(spec), &set, target);
            check_corpus(&t["corpus"], &want, 1e-9);
            assert_eq!(t["corpus"]["windows"], 24);
        }
        let reference = &report["reference_corpus"];
        assert_eq!(
            (reference["windows"].as_u64(), reference["positions"].as_u64()),
            (Some(24), Some(336))
        );
    }
}

#[test]
fn a_chunked_prefill_scores_what_a_token_at_a_time_step_scores() {
    let set = data("set_lm_text");
    let figures = |spec: &str| {
        let (code, report, stderr) = score(&data(spec), &set, &["-t", "cpu", "--no-baseline"]);
        assert_eq!(code, 0, "{spec}: {stderr}");
        row(&report, "cpu")["corpus"].clone()
    };
    let (chunked, step) = (figures("lm_u8_chunked.toml"), figures("lm_u8.toml"));
    // The same models in two layouts: float rounding apart, the same figures.
    close("kld mean", &chunked["kld"]["mean"], &step["kld"]["mean"], 1e-4);
    assert_eq!(chunked["same_top"]["count"], step["same_top"]["count"]);
    close(
        "ln ratio",
        &chunked["perplexity"]["ln_ratio"],
        &step["perplexity"]["ln_ratio"],
        1e-4,
    );
}

/// A copy of the text set with every window cut to `n` tokens (`n = 0`: empty).
fn cut_set(dir: &Path, n: usize) -> String {
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(data("set_lm_text")).unwrap() {
        let p = e.unwrap().path();
        let ids: Vec<i64> = values(&npz_array(&p, "input_ids")).iter().map(|v| *v as i64).collect();
        let t = Tensor::new(vec![1, n], TensorData::Int64(ids[..n].to_vec())).unwrap();
        write_npz(&dir.join(p.file_name().unwrap()), &[("input_ids".to_string(), &t)]).unwrap();
    }
    dir.display().to_string()
}

#[test]
fn a_padded_last_chunk_is_masked_as_the_independent_scorer_masks_it() {
    // 1 start token and 13 window tokens: chunks of 4, 4, 4 and 2 padded with the end token.
    let tmp = tempdir();
    let set = cut_set(&tmp.path().join("w13"), 13);
    let spec = data("lm_u8_chunked.toml");
    let (code, report, stderr) = score(&spec, &set, &["-t", "cpu", "--no-baseline"]);
    assert_eq!(code, 0, "{stderr}");
    check_corpus(&row(&report, "cpu")["corpus"], &independent(&spec, &set, "cpu"), 1e-9);
}

#[test]
fn the_gate_holds_each_corpus_limit_to_its_bound_over_windows() {
    let spec = data("lm_u8_chunked.toml");
    let set = data("set_lm_text");
    let (_, free, _) = score(&spec, &set, &["-t", "cpu", "--no-baseline"]);
    let c = &row(&free, "cpu")["corpus"];
    let (mean, upper) = (num(&c["kld"]["mean"]), num(&c["bounds"]["kld_mean_upper"]));
    assert!(upper > mean, "{c}");
    // A limit between the estimate and its bound fails: the estimate alone would pass by luck.
    let between = format!("{}", (mean + upper) / 2.0);
    let (code, report, stderr) = score(&spec, &set, &["-t", "cpu", "--no-baseline", "--max-kld-mean", &between]);
    assert_eq!(code, 1, "{stderr}");
    let rule = &report["gate"]["rules"][1];
    assert_eq!(rule["rule"], "max_kld_mean");
    assert_eq!(
        (rule["measured"].as_f64(), rule["estimate"].as_f64()),
        (Some(upper), Some(mean))
    );
    assert_eq!(rule["bound"], "window_bootstrap");
    // Above the bound it passes; every corpus limit at once, from flags.
    let above = format!("{}", upper * 1.01);
    let p99 = format!("{}", num(&c["bounds"]["kld_p99_upper"]) * 1.01);
    let lower = format!("{}", num(&c["bounds"]["same_top_lower"]) * 0.99);
    let ratio = format!("{}", num(&c["bounds"]["ppl_ratio_upper"]) * 1.01);
    let (code, report, stderr) = score(
        &spec,
        &set,
        &[
            "-t",
            "cpu",
            "--no-baseline",
            "--max-kld-mean",
            &above,
            "--max-kld-p99",
            &p99,
            "--min-same-top",
            &lower,
            "--max-ppl-ratio",
            &ratio,
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["gate"]["verdict"], "pass");
    // The same-top bound is never above the Wilson bound of the positions (336 independent
    // draws at best), and the p99 bound never below the order statistic that bounds it.
    let same = c["same_top"]["count"].as_u64().unwrap();
    let wilson_lower = npu_audit::analyses::accuracy::stats::wilson_lower(same, 336);
    assert!(num(&c["bounds"]["same_top_lower"]) <= wilson_lower + 1e-12);
}

#[test]
fn one_window_cannot_bound_a_corpus_figure_and_the_gate_says_so() {
    let (code, report, stderr) = score(
        &data("lm_u8_chunked.toml"),
        &data("set_lm_text"),
        &["-t", "cpu", "--no-baseline", "--limit", "1", "--max-kld-mean", "10"],
    );
    assert_eq!(code, 1, "{stderr}");
    let rule = &report["gate"]["rules"][1];
    assert_eq!(
        (rule["rule"].as_str(), rule["pass"].as_bool()),
        (Some("max_kld_mean"), Some(false))
    );
    assert!(rule["measured"].as_f64().is_none_or(f64::is_nan), "{rule}");
    let out = bin()
        .args([
            "eval",
            &data("lm_u8_chunked.toml"),
            "--task",
            "score",
            "--dataset",
            &data("set_lm_text"),
        ])
        .args([
            "--no-config",
            "-t",
            "cpu",
            "--no-baseline",
            "--limit",
            "1",
            "--max-kld-mean",
            "10",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("one window cannot bound a corpus figure"), "{text}");
}

#[test]
fn a_policy_sets_corpus_limits_and_a_decode_says_it_does_not_apply_them() {
    let tmp = tempdir();
    let policy = tmp.path().join("npu-audit.toml");
    std::fs::write(
        &policy,
        "[target.\"cpu\"]\nmax_kld_mean = 0.000001\nmin_accuracy = 0.5\n",
    )
    .unwrap();
    let config = policy.display().to_string();
    let run = |task: &str| {
        let out = bin()
            .args(["eval", &data("lm_u8_chunked.toml"), "--task", task, "--dataset"])
            .arg(if task == "score" {
                data("set_lm_text")
            } else {
                data("set_lm")
            })
            .args(["--config", &config, "-t", "cpu", "--no-baseline", "--format", "json"])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.code(), report)
    };
    let (code, report) = run("score");
    assert_eq!(code, Some(1));
    assert_eq!(report["gate"]["rules"][1]["rule"], "max_kld_mean");
    assert!(report["gate"]["rules"][1]["origin"]
        .as_str()
        .unwrap()
        .contains("npu-audit.toml:2"));
    let notes = report["notes"].to_string();
    assert!(notes.contains("min_accuracy is not applied by --task score"), "{notes}");
    let (_, report) = run("generate");
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("max_kld_mean is not applied by --task generate"),
        "{notes}"
    );
    assert!(report["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["rule"] != "max_kld_mean"));
}

#[test]
fn bad_windows_and_flags_are_refused_on_one_line_before_any_session() {
    let tmp = tempdir();
    let spec = data("lm_u8_chunked.toml");
    let base = [
        "eval",
        &spec,
        "--task",
        "score",
        "--no-config",
        "-t",
        "cpu",
        "--dataset",
    ];
    let with = |set: &str, extra: &[&str]| -> Vec<String> {
        base.iter()
            .map(|s| s.to_string())
            .chain(std::iter::once(set.to_string()))
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let refused = |args: Vec<String>, needle: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&args, 2, needle);
    };
    // 1 start token + 16 tokens: past the 16 KV slots.
    let long = tmp.path().join("long");
    std::fs::create_dir_all(&long).unwrap();
    let t = Tensor::new(vec![1, 16], TensorData::Int64((4..20).collect())).unwrap();
    write_npz(&long.join("w.npz"), &[("input_ids".to_string(), &t)]).unwrap();
    refused(
        with(&long.display().to_string(), &[]),
        "need 17 KV slots; kv_length is 16",
    );
    refused(
        with(&cut_set(&tmp.path().join("one"), 1), &[]),
        "a window of 1 token scores nothing",
    );
    refused(with(&cut_set(&tmp.path().join("empty"), 0), &[]), "holds no value");
    // Text where the ids should be.
    let text = tmp.path().join("text");
    std::fs::create_dir_all(&text).unwrap();
    let f = Tensor::new(vec![1, 3], TensorData::Float32(vec![0.5, 1.5, 2.5])).unwrap();
    write_npz(&text.join("w.npz"), &[("input_ids".to_string(), &f)]).unwrap();
    refused(with(&text.display().to_string(), &[]), "input_ids");
    let set = data("set_lm_text");
    refused(
        with(&set, &["--explain", "1"]),
        "--explain is for --task generate and transcribe",
    );
    refused(
        with(&set, &["--max-accuracy-drop", "1"]),
        "--max-accuracy-drop is for --task generate and transcribe",
    );
    refused(
        with(&set, &["--min-same-top", "1.5"]),
        "--min-same-top must be a fraction",
    );
    fails_with(
        &[
            "eval",
            &data("tiny_u8.toml"),
            "--task",
            "score",
            "--dataset",
            &data("set_ed"),
            "--no-config",
        ],
        2,
        "--task score scores a decoder-only spec's windows",
    );
    fails_with(
        &[
            "eval",
            &spec,
            "--task",
            "generate",
            "--dataset",
            &data("set_lm"),
            "--no-config",
            "--max-kld-mean",
            "0.1",
        ],
        2,
        "--max-kld-mean is for --task score",
    );
}

#[test]
fn the_qnn_htp_scores_a_window_through_the_chunked_prefill_and_states_its_cost() {
    let (code, report, stderr) = score(
        &data("lm_u8_chunked.toml"),
        &data("set_lm_text"),
        &["-t", "qnn:sm8650", "--no-baseline", "--limit", "2"],
    );
    assert_eq!(code, 0, "{stderr}");
    let t = row(&report, "qnn:sm8650");
    assert_eq!(t["status"], "ok", "{}", t["error"]);
    let c = &t["corpus"];
    assert_eq!((c["windows"].as_u64(), c["positions"].as_u64()), (Some(2), Some(28)));
    let mean = num(&c["kld"]["mean"]);
    assert!(mean.is_finite() && mean >= 0.0, "{c}");
    assert!(num(&t["summary"]["seconds_per_token"]) > 0.0);
    let prefill = t["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["part"] == "prefill")
        .unwrap();
    // 16 tokens in chunks of 4, two windows: 8 prefill calls, no step.
    assert_eq!(prefill["runs"], 8);
}

#[test]
fn render_gives_the_page_the_terminal_and_markdown_of_a_stored_corpus_report() {
    let tmp = tempdir();
    let json = tmp.path().join("score.json");
    let (code, _, stderr) = score(
        &data("lm_u8_chunked.toml"),
        &data("set_lm_text"),
        &["-t", "cpu", "--out", &json.display().to_string()],
    );
    assert_eq!(code, 0, "{stderr}");
    let shown = run(&["render", &json.display().to_string()]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    for needle in [
        "corpus drift",
        "KLD mean ± SE",
        "same top (95% CI)",
        "mean KLD by position 0–13",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let md = run(&["render", &json.display().to_string(), "--format", "markdown"]);
    assert!(String::from_utf8_lossy(&md.stdout).contains("| target | status | windows | KLD mean ± SE"));
    let page = tmp.path().join("score.html");
    let html = run(&[
        "render",
        &json.display().to_string(),
        "--html",
        &page.display().to_string(),
    ]);
    assert!(html.status.success(), "{}", String::from_utf8_lossy(&html.stderr));
    let dom = headless(&chromium(), &page, &["--dump-dom".to_string()]);
    // One mark per position scored per target: 14 positions, cpu and cpu:noopt.
    assert!(dom.contains("data-plot=\"corpus-kld\""), "{dom}");
    assert!(dom.contains("data-marks=\"28\""), "{dom}");
    assert!(dom.contains("data-plots-rendered=\"1 of 1\""), "{dom}");
}
