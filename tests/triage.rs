//! `triage` end to end on the real PP-OCR classifier: a synthetic fleet of device reports built
//! here from what the HTP simulation of two chipsets and the CPU EP produce (saved by `compare`),
//! moved by one quantization step, replaced by noise, NaN or a malformed file. Every verdict is
//! the one the construction implies, and every SQNR is recomputed here from the saved outputs.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use npu_audit::tensor::{write_npz, Tensor, TensorData};
use prost::Message;
use serde_json::Value;

const OUTPUT: &str = "save_infer_model/scale_0.tmp_1";

fn model() -> String {
    repo("fixtures/real/ppocr_cls_qdq_u8.onnx").display().to_string()
}

fn golden() -> String {
    repo("golden/ppocr_cls_fp32").display().to_string()
}

/// The output's quantization step: the scale of its DequantizeLinear, read from the model.
fn output_step() -> f64 {
    let bytes = std::fs::read(model()).unwrap();
    let m = npu_audit::model::pb::ModelProto::decode(bytes.as_slice()).unwrap();
    let init = m
        .graph
        .unwrap()
        .initializer
        .into_iter()
        .find(|t| t.name.as_deref() == Some("softmax_0.tmp_0_scale"))
        .unwrap();
    match init.float_data.first() {
        Some(v) => *v as f64,
        None => f32::from_le_bytes(init.raw_data.unwrap()[..4].try_into().unwrap()) as f64,
    }
}

/// Every run's two samples of the output, saved by `compare`.
fn saved_runs(dir: &Path) -> impl Fn(&str) -> Vec<Vec<f32>> + '_ {
    move |run: &str| {
        (0..2)
            .map(|k| {
                let t = npz_array(&dir.join(run).join(format!("s{k}.npz")), OUTPUT);
                values(&t).into_iter().map(|v| v as f32).collect()
            })
            .collect()
    }
}

/// A report directory with `samples` stacked as `outputs.npz` and `device` as `device.json`.
fn report(dir: &Path, name: &str, samples: &[Vec<f32>], device: Value) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let per = samples[0].len();
    let flat: Vec<f32> = samples.iter().flatten().copied().collect();
    let t = Tensor::new(vec![samples.len(), 1, per], TensorData::Float32(flat)).unwrap();
    write_npz(&d.join("outputs.npz"), &[(OUTPUT.to_string(), &t)]).unwrap();
    std::fs::write(d.join("device.json"), device.to_string()).unwrap();
    d
}

fn triage(reports: &[&Path]) -> Value {
    triage_against(reports, &["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8450"])
}

fn triage_against(reports: &[&Path], candidates: &[&str]) -> Value {
    let mut args: Vec<String> = vec!["triage".into()];
    args.extend(reports.iter().map(|p| p.display().to_string()));
    for a in ["--model", &model(), "--golden", &golden(), "--format", "json"] {
        args.push(a.into());
    }
    for c in candidates {
        args.push("--candidate".into());
        args.push((*c).into());
    }
    let out = bin().args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn entry<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["reports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("no report {name}"))
}

fn verdict(t: &Value, name: &str) -> String {
    entry(t, name)["verdict"]["kind"].as_str().unwrap().to_string()
}

fn sqnr(o: &[Vec<f32>], g: &[Vec<f32>]) -> f64 {
    let f = |v: &[Vec<f32>]| v.iter().flatten().map(|x| *x as f64).collect::<Vec<f64>>();
    plain_metrics(&f(o), &f(g)).sqnr_db
}

/// Runs `compare` once to get what every candidate produces on the golden inputs.
fn simulated(dir: &Path) -> PathBuf {
    let saved = dir.join("saved");
    let (code, _, stderr) = compare_json(&[
        &model(),
        "--golden",
        &golden(),
        "-t",
        "qnn:sm8650",
        "-t",
        "qnn:sm8450",
        "-t",
        "cpu",
        "--fingerprint",
        "off",
        "--save-outputs",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    saved
}

#[test]
fn each_report_gets_the_verdict_its_construction_implies() {
    let dir = tempdir();
    let saved = simulated(dir.path());
    let run = saved_runs(&saved);
    let (gold, s8650, s8450, cpu) = (run("golden"), run("qnn_sm8650"), run("qnn_sm8450"), run("cpu"));
    let step = output_step() as f32;
    let fleet = dir.path().join("fleet");
    let sm8650 = serde_json::json!({"soc_model": "SM8650", "device_model": "S24"});
    let mut moved = s8650.clone();
    moved[0][0] += step;
    let noise: Vec<Vec<f32>> = s8650
        .iter()
        .map(|s| s.iter().map(|v| v + 9.0 * step).collect())
        .collect();
    let nan: Vec<Vec<f32>> = s8650.iter().map(|s| vec![f32::NAN; s.len()]).collect();
    let paths = [
        report(&fleet, "a_sim", &s8650, sm8650.clone()),
        report(&fleet, "b_cpu", &cpu, sm8650.clone()),
        report(
            &fleet,
            "c_other",
            &s8450,
            serde_json::json!({"board_platform": "pineapple"}),
        ),
        report(
            &fleet,
            "d_round",
            &moved,
            serde_json::json!({"chipset": "Snapdragon 8 Gen 3"}),
        ),
        report(&fleet, "e_noise", &noise, sm8650.clone()),
        report(&fleet, "f_nan", &nan, sm8650.clone()),
        report(&fleet, "g_taro", &noise, serde_json::json!({"board_platform": "taro"})),
    ];
    let hostile = report(
        &fleet,
        "h_hostile",
        &s8650,
        serde_json::json!({"soc_model": "SM8650", "shell": "rm -rf /"}),
    );
    let mut all: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    all.push(&hostile);
    let t = triage(&all);
    assert_eq!(verdict(&t, "a_sim"), "reproduced");
    assert_eq!(verdict(&t, "b_cpu"), "cpu_fallback");
    assert_eq!(verdict(&t, "c_other"), "other_chipset");
    assert_eq!(verdict(&t, "d_round"), "rounding");
    assert_eq!(verdict(&t, "e_noise"), "unexplained");
    assert_eq!(verdict(&t, "f_nan"), "garbage");
    assert_eq!(verdict(&t, "g_taro"), "unidentified");
    assert_eq!(verdict(&t, "h_hostile"), "malformed");
    assert!(entry(&t, "h_hostile")["verdict"]["sentence"]
        .as_str()
        .unwrap()
        .contains("unknown field `shell`"));
    // The rounding report is one step from the simulation in one element.
    let steps = &entry(&t, "d_round")["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["target"] == "qnn:sm8650")
        .unwrap()["steps"];
    assert_eq!(
        (steps["off_by_one"].as_u64(), steps["max_steps"].as_u64()),
        (Some(1), Some(1))
    );
    // The noise report is 9 steps from it everywhere.
    let noise_entry = entry(&t, "e_noise");
    let to_sim = noise_entry["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["target"] == "qnn:sm8650")
        .unwrap();
    assert_eq!(to_sim["steps"]["max_steps"].as_u64(), Some(9));
    // SQNR against the golden run, recomputed from what was saved.
    for (name, outs) in [
        ("a_sim", &s8650),
        ("b_cpu", &cpu),
        ("d_round", &moved),
        ("e_noise", &noise),
    ] {
        assert_close(name, num(&entry(&t, name)["sqnr_db"]), sqnr(outs, &gold), 1e-5);
    }
}

#[test]
fn a_fleet_says_whether_the_quantization_or_one_chipset_is_to_blame() {
    let dir = tempdir();
    let saved = simulated(dir.path());
    let run = saved_runs(&saved);
    let (noopt, s8450) = (run("cpu_noopt"), run("qnn_sm8450"));
    let step = output_step() as f32;
    // Every chipset as the CPU EP on the quantized model, each moved by one step somewhere.
    let alike = dir.path().join("alike");
    for (i, chip) in ["SM8650", "SM8450", "SM8550"].iter().enumerate() {
        for j in 0..2 {
            let mut o = noopt.clone();
            let n = o[j].len();
            o[j][i % n] += step;
            report(
                &alike,
                &format!("{chip}_{j}"),
                &o,
                serde_json::json!({ "soc_model": chip }),
            );
        }
    }
    let t = triage(&[&alike]);
    assert_eq!(t["fleet"]["kind"], "quantization", "{}", t["fleet"]["sentence"]);
    assert_eq!(t["fleet"]["by_chipset"].as_array().unwrap().len(), 3);
    // One chipset as its simulation (far below the CPU EP on this model), the others as the CPU.
    let one = dir.path().join("one");
    for j in 0..3 {
        report(
            &one,
            &format!("sm8450_{j}"),
            &s8450,
            serde_json::json!({"soc_model": "SM8450"}),
        );
        report(
            &one,
            &format!("sm8650_{j}"),
            &noopt,
            serde_json::json!({"soc_model": "SM8650"}),
        );
    }
    let t = triage(&[&one]);
    assert_eq!(t["fleet"]["kind"], "npu", "{}", t["fleet"]["sentence"]);
    assert_eq!(t["fleet"]["concentrated_on"], serde_json::json!(["sm8450"]));
    let gold = run("golden");
    let excess = sqnr(&noopt, &gold) - sqnr(&s8450, &gold);
    let g = t["fleet"]["by_chipset"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == "sm8450")
        .unwrap();
    assert_close("excess", num(&g["median_excess_db"]), excess, 1e-5);
}

/// An Android log of a session whose QNN backend did not load: ORT's lines in logcat's
/// `threadtime` format, as the QNN EP and the session print them.
const FALLBACK_LOG: &str = "\
11-23 10:01:02.301  1234  1250 I onnxruntime: [I:onnxruntime:, qnn_provider_factory.cc:253 CreateEpImpl] Creating QNN EP
11-23 10:01:02.345  1234  1250 E onnxruntime: [E:onnxruntime:, qnn_execution_provider.cc:2290 GetCapabilityImpl] QNN SetupBackend failed Unable to load backend, error:  libQnnHtp.so: cannot open shared object file: No such file or directory
11-23 10:01:02.346  1234  1250 I onnxruntime: [I:onnxruntime:, qnn_execution_provider.cc:1152 GetCapability] Number of partitions supported by QNN EP: 0
11-23 10:01:02.390  1234  1250 V onnxruntime: [V:onnxruntime:, session_state.cc:1581 VerifyEachNodeIsAssignedToAnEp]  All nodes placed on [CPUExecutionProvider]. Number of nodes: 449
11-23 10:01:02.391  1234  1250 I MyApp   : ORT Build Info: git-branch=rel-1.31.1, git-commit-id=0123abcd, build type=Release
";

/// ONNX Runtime's own log of a session whose graph QNN cut in three and failed to finalize.
const PARTIAL_LOG: &str = "\
2026-11-23 22:44:32.86 [I:onnxruntime:, qnn_execution_provider.cc:1152 GetCapability] Number of partitions supported by QNN EP: 3, number of nodes in the graph: 60, number of nodes supported by QNN: 58
2026-11-23 22:44:32.87 [V:onnxruntime:, qnn_backend_manager.cc:466 QnnLogging] QnnDsp <E> Failed to finalize graph (id: 1) with err 1002
2026-11-23 22:44:32.88 [E:onnxruntime:, qnn_model.cc:387 FinalizeGraphs] Failed to finalize QNN graph. Error code: 1002
";

#[test]
fn logs_explain_a_cpu_fallback_and_contradict_device_json() {
    let dir = tempdir();
    let saved = dir.path().join("saved");
    let (code, _, stderr) = compare_json(&[
        &model(),
        "--golden",
        &golden(),
        "-t",
        "cpu",
        "--fingerprint",
        "off",
        "--save-outputs",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let cpu = saved_runs(&saved)("cpu");
    let fleet = dir.path().join("fleet");
    let with_log = |name: &str, device: Value| {
        let d = report(&fleet, name, &cpu, device);
        std::fs::create_dir_all(d.join("logs")).unwrap();
        std::fs::write(d.join("logs/logcat.txt"), FALLBACK_LOG).unwrap();
        d
    };
    let said_qnn = with_log(
        "a_qnn",
        serde_json::json!({"soc_model": "SM8650", "ep": "QNNExecutionProvider", "onnxruntime_version": "1.31.1"}),
    );
    let old_ort = with_log(
        "b_old_ort",
        serde_json::json!({"soc_model": "SM8650", "onnxruntime_version": "1.22.0"}),
    );
    // Outputs nothing reproduces, and a log with a QNN finalize error in a graph cut in three.
    let step = output_step() as f32;
    let noise: Vec<Vec<f32>> = cpu.iter().map(|s| s.iter().map(|v| v + 9.0 * step).collect()).collect();
    let odd = report(&fleet, "c_odd", &noise, serde_json::json!({"soc_model": "SM8650"}));
    std::fs::create_dir_all(odd.join("logs")).unwrap();
    std::fs::write(odd.join("logs/ort.log"), PARTIAL_LOG).unwrap();
    let t = triage_against(&[&said_qnn, &old_ort, &odd], &["cpu:noopt", "cpu"]);
    assert_eq!(verdict(&t, "c_odd"), "unexplained");
    let sentence = entry(&t, "c_odd")["verdict"]["sentence"].as_str().unwrap();
    assert!(
        sentence.ends_with(
            "; the log says: QNN took 58 of 60 nodes in 3 partitions (QNN error 1002 QNN_COMMON_ERROR_MEM_ALLOC)"
        ),
        "{sentence}"
    );
    let err = &entry(&t, "c_odd")["logs"]["qnn_errors"][0];
    assert_eq!((err["code"].as_u64(), err["count"].as_u64()), (Some(1002), Some(2)));
    for name in ["a_qnn", "b_old_ort"] {
        let e = entry(&t, name);
        assert_eq!(verdict(&t, name), "cpu_fallback");
        let sentence = e["verdict"]["sentence"].as_str().unwrap();
        assert!(
            sentence.ends_with("; the log says: QNN took 0 of 449 nodes (the QNN backend failed to load)"),
            "{sentence}"
        );
        let fb = &e["logs"]["fallback"];
        assert_eq!(
            [
                &fb["partitions"],
                &fb["nodes_total"],
                &fb["nodes_on_qnn"],
                &fb["nodes_on_cpu"]
            ],
            [0, 449, 0, 449].map(Value::from).each_ref()
        );
        assert_eq!(e["logs"]["ort_version"], "1.31.1");
        assert_eq!(e["logs"]["lines_read"], 5);
        let evidence: Vec<&str> = e["log_evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert!(evidence.contains(&"logcat.txt:4: All nodes placed on [CPUExecutionProvider]. Number of nodes: 449"));
        assert!(evidence
            .iter()
            .any(|l| l.starts_with("logcat.txt:2: QNN SetupBackend failed Unable to load backend")));
    }
    let contradictions = |name: &str| entry(&t, name)["logs"]["contradictions"].as_array().unwrap().clone();
    assert_eq!(
        contradictions("b_old_ort"),
        [Value::from(
            "device.json says onnxruntime_version 1.22.0, the log shows ONNX Runtime 1.31.1"
        )]
    );
    let qnn = contradictions("a_qnn");
    assert_eq!(qnn.len(), 1, "{qnn:?}");
    assert!(qnn[0].as_str().unwrap().starts_with(
        "device.json says ep QNNExecutionProvider, but the QNN backend failed to load: QNN SetupBackend failed"
    ));
}
