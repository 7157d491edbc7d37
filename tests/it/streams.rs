//! `compare --stream` and `pipeline` end to end on real models: silero-vad (an LSTM voice
//! activity detector, its recurrent state fed back) over 12 s of synthetic speech, and the PP-OCR
//! classifier cut into two separately quantized stages. Every per-step figure is checked against
//! an independent rerun (tests/data/stream_rerun.py, tests/data/pipeline_rerun.py: NumPy and the
//! Python ONNX Runtime, written from docs/streams.md), or recomputed by it from the outputs the
//! tool saved; the HTML curves are checked in headless Chromium.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

const SPEECH: &str = "fixtures/inputs/speech_16k.npy";

fn real(name: &str) -> String {
    repo(&format!("fixtures/real/{name}")).display().to_string()
}

fn rerun_python() -> PathBuf {
    venv_python("tests/data/numpy-ort-requirements.txt", "numpy-ort")
}

/// A stream audit of the u8 silero-vad against its fp32 model; its JSON and directory.
struct Stream {
    json: Value,
    dir: tempfile::TempDir,
    code: i32,
}

fn stream(model: &str, targets: &[&str], steps: Option<&str>, extra: &[&str]) -> Stream {
    let dir = tempdir();
    let d = dir.path();
    let mut cmd = bin();
    cmd.args([
        "compare",
        &real(model),
        "--reference",
        &real("silero_vad_fp32.onnx"),
        "--no-baseline",
    ]);
    for t in targets {
        cmd.args(["-t", t]);
    }
    cmd.args([
        "--stream",
        "stateN->state",
        "--decision",
        "output>0.5",
        "--teacher-forcing",
    ])
    .arg("--chunk")
    .arg(format!("input={}:hop=512", repo(SPEECH).display()))
    .args(["--out", d.join("r.json").to_str().unwrap()])
    .args(["--html", d.join("r.html").to_str().unwrap()])
    .args(["--save-outputs", d.join("out").to_str().unwrap()])
    .args(extra);
    if let Some(n) = steps {
        cmd.args(["--steps", n]);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "compare --stream failed ({code}): {stderr}");
    let json = serde_json::from_slice(&std::fs::read(d.join("r.json")).unwrap()).unwrap();
    Stream { json, dir, code }
}

/// The whole 12 s (375 steps) on the CPU EP.
fn cpu_stream() -> &'static Stream {
    static RUN: OnceLock<Stream> = OnceLock::new();
    RUN.get_or_init(|| stream("silero_vad_qdq_u8.onnx", &["cpu"], None, &[]))
}

/// The first 48 steps on the HTP simulator of two chipsets and on OpenVINO.
fn npu_stream() -> &'static Stream {
    static RUN: OnceLock<Stream> = OnceLock::new();
    RUN.get_or_init(|| {
        stream(
            "silero_vad_qdq_u8.onnx",
            &["qnn:sm8650", "qnn:sm8450", "openvino"],
            Some("48"),
            &["--allow-failure", "openvino"],
        )
    })
}

/// The errors of `json` against a committed schema under docs/.
fn schema_errors(schema: &str, json: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(repo(schema)).unwrap()).unwrap();
    let validator = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    validator
        .iter_errors(json)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn stream_of<'a>(report: &'a Value, id: &str) -> &'a Value {
    &target(report, id)["stream"]
}

/// A JSON number, or the strings `inf` / `-inf` the rerun writes for infinities.
fn figure(v: &Value) -> f64 {
    match v.as_str() {
        Some("inf") => f64::INFINITY,
        Some("-inf") => f64::NEG_INFINITY,
        _ => num(v),
    }
}

fn series(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(figure).collect()
}

fn assert_series(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: steps");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let same = g == w || (g - w).abs() <= 1e-9 * w.abs().max(1.0);
        assert!(same, "{what}: step {} is {g}, the rerun says {w}", k + 1);
    }
}

/// Compares a run block of the tool (`free` or `teacher_forced`) with the rerun's.
fn assert_run_matches(what: &str, tool: &Value, rerun: &Value) {
    let outputs = tool["outputs"].as_array().unwrap();
    for name in ["output", "stateN"] {
        let o = outputs.iter().find(|o| o["name"] == name).unwrap();
        assert_series(
            &format!("{what} {name}"),
            &series(&o["sqnr_db"]),
            &series(&rerun["sqnr_db"][name]),
        );
    }
    assert_series(
        &format!("{what} state"),
        &series(&tool["state_sqnr_db"]),
        &series(&rerun["sqnr_db"]["stateN"]),
    );
    let d = &tool["decisions"][0];
    assert_eq!(d["decision"], "output>0.5");
    assert_eq!(d["disagreements"], rerun["disagreements"], "{what}: disagreements");
    if let Some(decisions) = rerun.get("decisions") {
        let golden = decisions["reference"].as_array().unwrap();
        let model = decisions["model"].as_array().unwrap();
        let agrees: Vec<Value> = golden.iter().zip(model).map(|(g, m)| Value::Bool(g == m)).collect();
        assert_eq!(d["agrees"].as_array().unwrap(), &agrees, "{what}: agreement per step");
    }
    assert_eq!(
        tool["divergence_step"], rerun["divergence_step"],
        "{what}: divergence step"
    );
    match (
        tool["growth_db_per_step"].as_f64(),
        rerun["growth_db_per_step"].as_f64(),
    ) {
        (Some(g), Some(w)) => assert_close(&format!("{what} growth"), g, w, 1e-9),
        (g, w) => assert_eq!(g, w, "{what}: growth"),
    }
}

fn rerun(args: &[&str], out: &Path) -> Value {
    rerun_at("10", args, out)
}

/// The rerun with the state diverged below `db` dB.
fn rerun_at(db: &str, args: &[&str], out: &Path) -> Value {
    let py = rerun_python();
    let fixed = [
        "--feed",
        "stateN:state",
        "--decision",
        "output:0.5",
        "--divergence-db",
        db,
    ];
    run_ok(
        std::process::Command::new(py)
            .arg(repo("tests/data/stream_rerun.py"))
            .args(args)
            .args(fixed)
            .args(["--json", out.to_str().unwrap()]),
    );
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

/// The directory `--save-outputs` gives a run id.
fn saved(dir: &Path, id: &str) -> String {
    let name = file_name_of(id);
    assert!(dir.join(&name).is_dir(), "no saved outputs for {id}");
    name
}

/// The bar's CPU part: 375 steps of the u8 model, running free and teacher-forced, equal step by
/// step to a stream the rerun runs itself through Python's ONNX Runtime.
#[test]
fn cpu_stream_equals_an_independent_rerun_step_by_step() {
    let s = cpu_stream();
    assert_eq!(schema_errors("docs/report.schema.json", &s.json), Vec::<String>::new());
    assert_eq!(s.json["stream"]["steps"], 375);
    assert_eq!(s.json["stream"]["feedback"][0], "stateN->state");
    let want = rerun(
        &[
            "--reference",
            &real("silero_vad_fp32.onnx"),
            "--model",
            &real("silero_vad_qdq_u8.onnx"),
            "--audio",
            repo(SPEECH).to_str().unwrap(),
            "--window",
            "576",
            "--hop",
            "512",
            "--input-name",
            "input",
            "--steps",
            "375",
        ],
        &s.dir.path().join("rerun.json"),
    );
    let cpu = stream_of(&s.json, "cpu");
    assert_run_matches("cpu free", &cpu["free"], &want["free"]);
    assert_run_matches("cpu teacher-forced", &cpu["teacher_forced"], &want["teacher_forced"]);
    // The loop accumulates: the free state is worse than one step's error on most steps.
    let free = num(&cpu["free"]["state_sqnr_median_db"]);
    let forced = num(&cpu["teacher_forced"]["state_sqnr_median_db"]);
    assert!(
        forced > free + 3.0,
        "teacher-forced median {forced} dB vs free {free} dB"
    );
}

/// The same steps given as a `--sequence` archive (the input's windows cut here by the rule
/// docs/streams.md states: 64 zeros of context first, then 576 samples every 512; the state
/// member one row, its first value) give the figures of `--chunk`, bit for bit.
#[test]
fn a_sequence_archive_streams_as_the_chunked_file_does() {
    use npu_audit::data::tensor::{npz_bytes, Tensor, TensorData};
    let chunked = stream("silero_vad_qdq_u8.onnx", &["cpu"], Some("40"), &[]);
    let speech = values(&Tensor::read_npy(&repo(SPEECH)).unwrap());
    let padded: Vec<f32> = std::iter::repeat_n(0.0, 64)
        .chain(speech.iter().map(|v| *v as f32))
        .collect();
    let windows: Vec<f32> = (0..40).flat_map(|k| padded[k * 512..k * 512 + 576].to_vec()).collect();
    let input = Tensor::new(vec![40, 1, 576], TensorData::Float32(windows)).unwrap();
    let state = Tensor::new(vec![1, 2, 1, 128], TensorData::Float32(vec![0.0; 256])).unwrap();
    let dir = tempdir();
    let archive = dir.path().join("steps.npz");
    std::fs::write(
        &archive,
        npz_bytes(&[("input".into(), &input), ("state".into(), &state)]).unwrap(),
    )
    .unwrap();
    let out = dir.path().join("r.json");
    let run = bin()
        .args([
            "compare",
            &real("silero_vad_qdq_u8.onnx"),
            "--reference",
            &real("silero_vad_fp32.onnx"),
        ])
        .args([
            "-t",
            "cpu",
            "--no-baseline",
            "--stream",
            "stateN->state",
            "--decision",
            "output>0.5",
        ])
        .args(["--sequence", archive.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let json: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let (a, b) = (
        &stream_of(&json, "cpu")["free"],
        &stream_of(&chunked.json, "cpu")["free"],
    );
    assert_eq!(a["state_sqnr_db"], b["state_sqnr_db"]);
    assert_eq!(a["decisions"], b["decisions"]);
    assert_eq!(json["stream"]["steps"], 40);
}

/// Below -1 dB the u8 state diverges later than at step 1: the divergence step and the growth of
/// the error up to it equal the rerun's, recomputed from the saved outputs.
#[test]
fn a_lower_threshold_moves_the_divergence_and_measures_the_growth() {
    let s = stream("silero_vad_qdq_u8.onnx", &["cpu"], None, &["--divergence-sqnr", "-1"]);
    let out = s.dir.path().join("out");
    let (golden, dir) = (saved(&out, "golden"), out.to_str().unwrap());
    let json = s.dir.path().join("rerun.json");
    let want = rerun_at(
        "-1",
        &["--saved-outputs", dir, "--reference-run", &golden, "--run", "cpu"],
        &json,
    );
    let free = &stream_of(&s.json, "cpu")["free"];
    assert_run_matches("cpu free below -1 dB", free, &want["free"]);
    let step = free["divergence_step"].as_u64().unwrap();
    assert!(step > 1, "diverges at step {step}");
    assert!(free["growth_db_per_step"].as_f64().is_some());
}

/// The bar's NPU part: every target that ran has per-step figures (free and teacher-forced)
/// equal to the rerun's recomputation from the outputs the tool saved; a target that did not run
/// says why, and the audit goes on.
#[test]
fn npu_stream_figures_equal_a_recomputation_from_the_saved_outputs() {
    let s = npu_stream();
    let out = s.dir.path().join("out");
    let golden = saved(&out, "golden");
    let mut ran = 0;
    for id in ["qnn:sm8650", "qnn:sm8450", "openvino"] {
        let t = target(&s.json, id);
        if t["status"] != "ok" {
            assert!(t["error"].as_str().is_some_and(|e| !e.is_empty()), "{id} says nothing");
            assert!(t.get("stream").is_none(), "{id} did not run but has a stream");
            continue;
        }
        ran += 1;
        for (block, run_id) in [
            ("free", id.to_string()),
            ("teacher_forced", format!("{id}@teacher-forced")),
        ] {
            let dir = out.to_str().unwrap();
            let run = saved(&out, &run_id);
            let json = s.dir.path().join(format!("{run}.json"));
            let want = rerun(
                &["--saved-outputs", dir, "--reference-run", &golden, "--run", &run],
                &json,
            );
            assert_run_matches(&format!("{id} {block}"), &stream_of(&s.json, id)[block], &want["free"]);
        }
        let steps = stream_of(&s.json, id)["free"]["state_sqnr_db"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(steps, 48, "{id}");
    }
    assert!(ran >= 2, "the HTP simulator ran no stream");
}

/// OpenVINO's CPU plugin refuses the quantized LSTM (its weights come out of DequantizeLinear,
/// it wants constants): a finding, and the audit goes on. The float model streams there, and its
/// figures equal the recomputation from the saved outputs.
#[test]
fn openvino_streams_the_float_model_and_refuses_the_quantized_lstm() {
    let refused = target(&npu_stream().json, "openvino");
    assert_eq!(refused["status"], "failed");
    assert!(
        refused["error"].as_str().unwrap().contains("LSTM"),
        "{}",
        refused["error"]
    );
    let s = stream("silero_vad_fp32.onnx", &["openvino"], Some("48"), &[]);
    let out = s.dir.path().join("out");
    let (golden, dir) = (saved(&out, "golden"), out.to_str().unwrap());
    for (block, id) in [("free", "openvino"), ("teacher_forced", "openvino@teacher-forced")] {
        let run = saved(&out, id);
        let json = s.dir.path().join(format!("{run}.json"));
        let want = rerun(
            &["--saved-outputs", dir, "--reference-run", &golden, "--run", &run],
            &json,
        );
        assert_run_matches(
            &format!("openvino {block}"),
            &stream_of(&s.json, "openvino")[block],
            &want["free"],
        );
    }
}

#[test]
fn stream_limits_gate_the_audit_from_flags_and_the_policy_file() {
    let s = stream(
        "silero_vad_qdq_u8.onnx",
        &["cpu"],
        Some("120"),
        &["--min-decision-agreement", "0.999", "--max-divergence-step", "1"],
    );
    assert_eq!(s.code, 1);
    let free = &stream_of(&s.json, "cpu")["free"];
    let rules = s.json["gate"]["rules"].as_array().unwrap();
    let rule = |name: &str| rules.iter().find(|r| r["rule"] == name).unwrap();
    let agreement = rule("min_decision_agreement");
    assert_eq!(num(&agreement["measured"]), num(&free["decisions"][0]["agreement"]));
    assert_eq!(agreement["output"], "output>0.5");
    let disagreements = free["decisions"][0]["disagreements"].as_u64().unwrap();
    assert_eq!(agreement["pass"], Value::Bool(disagreements == 0));
    let divergence = rule("max_divergence_step");
    assert_eq!(num(&divergence["measured"]), num(&free["divergence_step"]));
    assert_eq!(
        divergence["pass"],
        Value::Bool(free["divergence_step"].as_u64().unwrap() > 1)
    );

    let policy = s.dir.path().join("npu-audit.toml");
    std::fs::write(
        &policy,
        "[defaults]\nmin_decision_agreement = 0.5\nmax_divergence_step = 0\n",
    )
    .unwrap();
    let again = stream(
        "silero_vad_qdq_u8.onnx",
        &["cpu"],
        Some("120"),
        &["--config", policy.to_str().unwrap()],
    );
    assert_eq!(again.code, 0, "{}", again.json["gate"]);
    let origins: Vec<&str> = again.json["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["origin"].as_str())
        .collect();
    assert!(origins.iter().any(|o| o.ends_with("npu-audit.toml:3")), "{origins:?}");
}

/// One curve per target and run with a point per step at the height its SQNR gives, and one mark
/// per step that decided otherwise, as the page draws them in Chromium.
#[test]
fn the_stream_curves_follow_the_json_in_chromium() {
    let s = cpu_stream();
    let page = s.dir.path().join("r.html");
    let dom = headless_url(
        &chromium(),
        &format!("file://{}", page.display()),
        &s.dir.path().join("r.dom"),
        &["--dump-dom".to_string()],
    );
    let free = &stream_of(&s.json, "cpu")["free"];
    for run in ["free", "teacher-forced"] {
        let needle = format!(r#"class="stream-curve" data-target="cpu" data-run="{run}" data-steps="375""#);
        assert!(dom.contains(&needle), "{needle}");
    }
    let strip = format!(
        r#"class="decision-strip" data-target="cpu" data-run="free" data-disagreements="{}""#,
        free["decisions"][0]["disagreements"]
    );
    assert!(dom.contains(&strip), "{strip}");
    // The free curve's points: the lowest point on the page is the lowest SQNR.
    let start = dom.find(r#"data-run="free" data-steps"#).unwrap();
    let curve = &dom[start..start + dom[start..].find("</g>").unwrap()];
    let ys: Vec<f64> = curve
        .split("points=\"")
        .skip(1)
        .flat_map(|p| {
            p[..p.find('"').unwrap()]
                .split(' ')
                .map(|xy| xy.split(',').nth(1).unwrap().parse::<f64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let values = series(&free["state_sqnr_db"]);
    assert_eq!(ys.len(), values.iter().filter(|v| !v.is_nan()).count());
    let lowest_value = values.iter().copied().fold(f64::INFINITY, f64::min);
    let lowest_point = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let at = values.iter().position(|v| *v == lowest_value).unwrap();
    assert_eq!(ys[at], lowest_point, "the lowest SQNR is not drawn lowest");
    let marks = dom.matches(r#"class="disagree""#).count() as u64;
    let all: u64 = ["free", "teacher_forced"]
        .iter()
        .map(|b| {
            stream_of(&s.json, "cpu")[b]["decisions"][0]["disagreements"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(marks, all);
}

#[test]
fn bad_streams_are_refused_with_one_line_and_exit_2() {
    let u8m = real("silero_vad_qdq_u8.onnx");
    let fp32 = real("silero_vad_fp32.onnx");
    let chunk = format!("input={}:hop=512", repo(SPEECH).display());
    let base = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["compare", &u8m, "--reference", &fp32, "-t", "cpu", "--chunk", &chunk]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    for (extra, needle) in [
        (vec!["--stream", "stateN"], "is not OUTPUT->INPUT"),
        (vec!["--stream", "stateN->nope"], "has no input 'nope'"),
        (vec!["--stream", "nope->state"], "has no output 'nope'"),
        (
            vec!["--stream", "output->state"],
            "returns shape [1,1] but takes [2,1,128]",
        ),
        (
            vec!["--stream", "stateN->state", "--decision", "output>="],
            "is not OUTPUT>THRESHOLD",
        ),
        (
            vec!["--stream", "stateN->state", "--steps", "9999"],
            "more windows than the array holds",
        ),
        (vec!["--stream", "stateN->state", "--samples", "3"], "use --steps"),
    ] {
        let args = base(&extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&refs, 2, needle);
    }
    fails_with(&["compare", &u8m, "--steps", "3"], 2, "--stream");
    fails_with(&["compare", &u8m, "--min-decision-agreement", "0.9"], 2, "add --stream");
    let on_state = ["--stream", "stateN->state", "--chunk", "state=x.npy"];
    fails_with(
        &base(&on_state).iter().map(String::as_str).collect::<Vec<_>>(),
        2,
        "is fed back",
    );
    // An output flag naming a step file would replace the run's own input (a copy here).
    let dir = tempdir();
    let copy = dir.path().join("speech.npy");
    std::fs::copy(repo(SPEECH), &copy).unwrap();
    let chunk = format!("input={}:hop=512", copy.display());
    for flag in ["--out", "--html"] {
        let over = [
            "compare",
            &u8m,
            "--reference",
            &fp32,
            "-t",
            "cpu",
            "--stream",
            "stateN->state",
        ];
        let mut args: Vec<&str> = over.to_vec();
        args.extend(["--chunk", &chunk, flag, copy.to_str().unwrap()]);
        fails_with(&args, 2, "input");
    }
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(repo(SPEECH)).unwrap());
}

/// The bar's pipeline: the PP-OCR classifier as a backbone feeding a head, each quantized on its
/// own, on the CPU EP (equal to the rerun) and the HTP of SM8650; the final drift attributed.
#[test]
fn a_two_model_pipeline_is_audited_end_to_end_and_attributed() {
    let dir = tempdir();
    let out = dir.path().join("p.json");
    let run = bin()
        .args([
            "pipeline",
            &real("ppocr_cls_pipeline.toml"),
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
        ])
        .args(["--inputs", repo("fixtures/inputs/ppocr_seed3.npz").to_str().unwrap()])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let json: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let py = rerun_python();
    let rerun_json = dir.path().join("rerun.json");
    run_ok(
        std::process::Command::new(py)
            .arg(repo("tests/data/pipeline_rerun.py"))
            .args([
                real("ppocr_cls_stage1_qdq_u8.onnx"),
                real("ppocr_cls_stage1_fp32.onnx"),
                real("ppocr_cls_stage2_qdq_u8.onnx"),
                real("ppocr_cls_stage2_fp32.onnx"),
            ])
            .arg(repo("fixtures/inputs/ppocr_seed3.npz"))
            .args(["features=features", rerun_json.to_str().unwrap()]),
    );
    let want: Value = serde_json::from_slice(&std::fs::read(&rerun_json).unwrap()).unwrap();
    let targets = json["targets"].as_array().unwrap();
    let cpu = targets.iter().find(|t| t["id"] == "cpu").unwrap();
    let backbone = &cpu["stages"][0]["outputs"][0];
    let head = &cpu["stages"][1]["outputs"][0];
    assert_close(
        "backbone",
        num(&backbone["chained_sqnr_db"]),
        figure(&want["stage1"]),
        1e-9,
    );
    for (tool, rerun) in [
        ("introduced_sqnr_db", "introduced"),
        ("propagated_sqnr_db", "propagated"),
        ("chained_sqnr_db", "chained"),
    ] {
        assert_close(tool, num(&head[tool]), figure(&want[rerun]), 1e-9);
    }
    assert_eq!(num(&cpu["final_sqnr_db"]), num(&head["chained_sqnr_db"]));
    for t in targets {
        // The walk back: the head is the origin when it introduces at least the noise that arrives.
        let head = &t["stages"][1]["outputs"][0];
        let own = num(&head["introduced_sqnr_db"]) <= num(&head["propagated_sqnr_db"]);
        let want_origin = if own { "head" } else { "backbone" };
        assert_eq!(t["origin"], want_origin, "{}", t["id"]);
    }
    assert_eq!(schema_errors("docs/pipeline.schema.json", &json), Vec::<String>::new());
    let sm8650 = targets.iter().find(|t| t["id"] == "qnn:sm8650").unwrap();
    assert!(sm8650["failed"].is_null() && num(&sm8650["final_sqnr_db"]).is_finite());
}

#[test]
fn pipeline_limits_files_and_schema() {
    let dir = tempdir();
    let toml = dir.path().join("p.toml");
    let stage = |name: &str, model: &str, feeds: &str| {
        format!("[[stage]]\nname = \"{name}\"\nmodel = \"{}\"\n{feeds}\n", real(model))
    };
    std::fs::write(&toml, stage("a", "ppocr_cls_stage1_qdq_u8.onnx", "")).unwrap();
    let p = toml.to_str().unwrap();
    fails_with(&["pipeline", p, "-t", "cpu"], 2, "at least two [[stage]]");
    std::fs::write(
        &toml,
        stage("a", "ppocr_cls_stage1_qdq_u8.onnx", "")
            + &stage("b", "ppocr_cls_stage2_qdq_u8.onnx", "feeds = { features = \"a.nope\" }"),
    )
    .unwrap();
    fails_with(&["pipeline", p, "-t", "cpu"], 2, "has no output 'nope'");
    let inputs = repo("fixtures/inputs/ppocr_seed3.npz");
    let strict = [
        "pipeline",
        real("ppocr_cls_pipeline.toml").leak(),
        "-t",
        "cpu",
        "--inputs",
        inputs.to_str().unwrap(),
        "--min-sqnr",
        "60",
    ];
    let out = bin().args(strict).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));

    let derived = bin().args(["schema", "pipeline"]).output().unwrap();
    let committed = std::fs::read_to_string(repo("docs/pipeline.schema.json")).unwrap();
    assert!(
        String::from_utf8_lossy(&derived.stdout) == committed,
        "docs/pipeline.schema.json differs from the derived schema: run `cargo run -- schema pipeline > docs/pipeline.schema.json`"
    );
}

/// A value declaration with named dimensions where `dims` has a name, fixed ones elsewhere.
fn value_info(name: &str, dims: &[&str]) -> npu_audit::data::model::pb::ValueInfoProto {
    use npu_audit::data::model::pb::tensor_shape_proto::dimension::Value as DimValue;
    let mut info = tensor_value_info(name, 1, &vec![1; dims.len()]);
    if let Some(npu_audit::data::model::pb::type_proto::Value::TensorType(t)) =
        info.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        for (d, text) in t.shape.as_mut().unwrap().dim.iter_mut().zip(dims) {
            d.value = Some(match text.parse::<i64>() {
                Ok(n) => DimValue::DimValue(n),
                Err(_) => DimValue::DimParam(text.to_string()),
            });
        }
    }
    info
}

/// A KV-cache style model: `present = Concat(past, x)` along axis 1 (`past` [1, len, 2], `x`
/// [1, 1, 2]) and `y = ReduceSum(present)`.
fn kv_cache_model(model: &Path) {
    let mut concat = node("Concat", "past", "present");
    concat.input.push("x".into());
    concat.attribute.push(npu_audit::data::model::pb::AttributeProto {
        name: Some("axis".into()),
        i: Some(1),
        r#type: Some(2),
        ..Default::default()
    });
    let sum = node("ReduceSum", "present", "y");
    write_model(
        model,
        vec![concat, sum],
        vec![
            value_info("past", &["1", "len", "2"]),
            value_info("x", &["1", "1", "2"]),
        ],
        vec![
            value_info("present", &["1", "next", "2"]),
            value_info("y", &["1", "1", "1"]),
        ],
    );
}

/// A KV-cache style state that grows every step: `present = Concat(past, x)` along axis 1, fed
/// back as `past`, starting empty. Every step runs with the longer cache, on the audited model
/// and the golden run alike (the model against itself: exact at every step).
#[test]
fn a_growing_state_is_fed_back_with_its_new_shape_every_step() {
    let dir = tempdir();
    let model = dir.path().join("kv.onnx");
    kv_cache_model(&model);
    let m = model.to_str().unwrap();
    let saved = dir.path().join("out");
    let out = bin()
        .args(["compare", m, "--reference", m, "-t", "cpu", "--no-baseline"])
        .args([
            "--stream",
            "present->past",
            "--steps",
            "5",
            "--input-shape",
            "past:1,0,2",
        ])
        .args([
            "--gen",
            "x=uniform:-1,1",
            "--out",
            "-",
            "--save-outputs",
            saved.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let free = &stream_of(&json, "cpu")["free"];
    assert_eq!(free["state_sqnr_db"].as_array().unwrap().len(), 5);
    assert!(free["divergence_step"].is_null());
    for (k, len) in [(0, 1), (4, 5)] {
        let present = npz_array(&saved.join(format!("cpu/s{k}.npz")), "present");
        assert_eq!(present.shape, vec![1, len, 2], "step {}", k + 1);
    }
}

/// A pipeline file is a few KB; a 10 MB one took 758 MB of memory to parse. One over 1 MiB is
/// refused, saying so, before it is parsed.
#[test]
fn a_pipeline_file_over_one_mib_is_refused_before_it_is_parsed() {
    let dir = tempdir();
    let toml = dir.path().join("big.toml");
    std::fs::write(&toml, "# padding\n".repeat(120_000)).unwrap();
    fails_with(
        &["pipeline", toml.to_str().unwrap(), "-t", "cpu"],
        2,
        "larger than 1 MiB",
    );
}

/// The KV-cache stream of `steps` steps on `cpu` (and `extra` targets and flags) against itself.
fn kv_stream(model: &Path, steps: usize, extra: &[&str]) -> std::process::Command {
    let m = model.to_str().unwrap();
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"));
    cmd.env_remove("NPU_AUDIT_FAULT_INJECT")
        .args([
            "compare",
            m,
            "--reference",
            m,
            "-t",
            "cpu",
            "--no-baseline",
            "--fingerprint",
            "off",
        ])
        .args([
            "--stream",
            "present->past",
            "--input-shape",
            "past:1,0,2",
            "--gen",
            "x=uniform:-1,1",
        ])
        .args(["--steps", &steps.to_string()])
        .args(extra);
    cmd
}

/// A state fed back that grows every step was written whole at every step: 5,000 steps of a
/// small KV cache took 546 MB of the work directory (RAM, in /dev/shm), the square of the steps.
/// A step is now kept as what it adds to the one before: the target's outputs of 300 steps, read
/// while a second target hangs (the work directory is still there), hold under a third of what
/// the whole tensors would. Every step still reads back whole: each `y = ReduceSum(present)` the
/// runtime computed on the real tensor is the sum of the `present` read back.
#[cfg(unix)]
#[test]
fn a_growing_state_is_kept_as_what_each_step_adds() {
    use std::time::{Duration, Instant};
    let dir = tempdir();
    let model = dir.path().join("kv.onnx");
    kv_cache_model(&model);
    let steps = 300;
    let tmp = tempdir();
    let mut audit = kv_stream(&model, steps, &["-t", "cpu:noopt", "--jobs", "3"])
        .env("TMPDIR", tmp.path())
        .env("NPU_AUDIT_FAULT_INJECT", "cpu:noopt=hang")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out_dir = || {
        work_dirs(tmp.path())
            .into_iter()
            .map(|w| w.join("targets/0-cpu/out"))
            .find(|o| o.join("result.json").exists())
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while out_dir().is_none() {
        assert!(Instant::now() < deadline, "the cpu target never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = out_dir().unwrap();
    let kept: u64 = (0..steps)
        .flat_map(|s| ["o0.npy", "o1.npy"].map(|f| out.join(format!("s{s}")).join(f)))
        .map(|f| std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0))
        .sum();
    audit.kill().unwrap();
    audit.wait().unwrap();
    // Whole files: a 128-byte header and the data, `present` [1, s + 1, 2] and `y` [1, 1, 1].
    let whole: u64 = (0..steps as u64).map(|s| 128 + 8 * (s + 1) + 128 + 4).sum();
    assert!(
        kept > 0 && kept < whole / 3,
        "{kept} bytes kept for {whole} bytes of whole tensors"
    );

    let saved = dir.path().join("saved");
    let run = kv_stream(
        &model,
        steps,
        &["--format", "json", "--save-outputs", saved.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let json: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert!(stream_of(&json, "cpu")["free"]["divergence_step"].is_null());
    for s in [0, 1, steps / 2, steps - 1] {
        let file = saved.join(format!("cpu/s{s}.npz"));
        let present = npz_array(&file, "present");
        assert_eq!(present.shape, vec![1, s + 1, 2], "step {}", s + 1);
        let y = values(&npz_array(&file, "y"))[0];
        assert_close(&format!("step {}", s + 1), values(&present).iter().sum(), y, 1e-4);
    }
}

/// The golden run keeps a growing state as deltas, which only this binary's worker reads: a
/// teacher-forced emulated ARM64 target is fed those steps written whole, and runs them exactly.
#[test]
fn an_emulated_target_is_teacher_forced_with_a_growing_state() {
    let dir = tempdir();
    let model = dir.path().join("kv.onnx");
    kv_cache_model(&model);
    let out = kv_stream(
        &model,
        4,
        &["-t", "cpu-arm64:neoverse-n1", "--teacher-forcing", "--format", "json"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let forced = &stream_of(&json, "cpu-arm64:neoverse-n1")["teacher_forced"];
    let present = forced["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "present")
        .unwrap_or_else(|| panic!("no teacher-forced present: {forced}"));
    assert_eq!(present["bit_identical_steps"], 4, "{present}");
}
