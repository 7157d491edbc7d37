//! `triage` end to end on the real PP-OCR classifier: a synthetic fleet of device reports built
//! here from what the HTP simulation of two chipsets and the CPU EP produce (saved by `compare`),
//! moved by one quantization step, replaced by noise, NaN or a malformed file. Every verdict is
//! the one the construction implies, and every SQNR is recomputed here from the saved outputs.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use npu_audit::data::tensor::{write_npz, Tensor, TensorData};
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
    let m = npu_audit::data::model::pb::ModelProto::decode(bytes.as_slice()).unwrap();
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
    let mut args: Vec<String> = vec!["triage".into(), model()];
    args.extend(reports.iter().map(|p| p.display().to_string()));
    for a in ["--golden", &golden(), "--format", "json"] {
        args.push(a.into());
    }
    for c in candidates {
        args.push("-t".into());
        args.push((*c).into());
    }
    // The default store is the user's: here, a data directory of the test's own.
    let data = tempdir();
    let out = bin().env("NPU_AUDIT_DATA", data.path()).args(&args).output().unwrap();
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
    // A key outside device.json's schema is kept and listed, not a reason to refuse the report.
    assert_eq!(verdict(&t, "h_hostile"), "reproduced");
    assert_eq!(entry(&t, "h_hostile")["device"]["unknown_keys"]["shell"], "rm -rf /");
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

/// The golden run's input samples as `--inputs` files in `dir`.
fn golden_inputs(dir: &Path) -> Vec<PathBuf> {
    (0..2)
        .map(|k| {
            let t = Tensor::read_npy(&repo("golden/ppocr_cls_fp32/inputs").join(format!("s{k}/i0.npy"))).unwrap();
            let path = dir.join(format!("golden_s{k}.npz"));
            write_npz(&path, &[("x".to_string(), &t)]).unwrap();
            path
        })
        .collect()
}

/// `triage` against the fp32 reference model (run here on every input set; the golden run's
/// inputs are the default ones), with `extra` flags.
fn triage_with(reports: &[&Path], extra: &[&str]) -> (i32, Value, String) {
    let mut args: Vec<String> = vec!["triage".into(), model()];
    args.extend(reports.iter().map(|p| p.display().to_string()));
    let reference = repo("fixtures/real/ppocr_cls_fp32.onnx").display().to_string();
    for a in ["--reference", &reference, "--format", "json"] {
        args.push(a.into());
    }
    let inputs_dir = tempdir();
    for p in golden_inputs(inputs_dir.path()) {
        args.push("--inputs".into());
        args.push(p.display().to_string());
    }
    for c in ["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8450"] {
        args.push("-t".into());
        args.push(c.into());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = bin().args(&args).output().unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The golden run's inputs with its two samples swapped, stacked as a report's `inputs.npz`.
fn swapped_inputs(dir: &Path) -> PathBuf {
    let g = |k: usize| Tensor::read_npy(&repo("golden/ppocr_cls_fp32/inputs").join(format!("s{k}/i0.npy"))).unwrap();
    let (a, b) = (g(1), g(0));
    let mut shape = vec![2];
    shape.extend(&a.shape);
    let TensorData::Float32(mut flat) = a.data else {
        panic!("float input")
    };
    let TensorData::Float32(rest) = b.data else {
        panic!("float input")
    };
    flat.extend(rest);
    let path = dir.join("inputs.npz");
    write_npz(
        &path,
        &[("x".to_string(), &Tensor::new(shape, TensorData::Float32(flat)).unwrap())],
    )
    .unwrap();
    path
}

#[test]
fn a_rerun_reads_back_what_the_store_keeps_and_runs_only_new_inputs() {
    let dir = tempdir();
    let saved = simulated(dir.path());
    let run = saved_runs(&saved);
    let (s8650, s8450, cpu) = (run("qnn_sm8650"), run("qnn_sm8450"), run("cpu"));
    let fleet = dir.path().join("fleet");
    let sm8650 = serde_json::json!({"soc_model": "SM8650"});
    report(&fleet, "a_sim", &s8650, sm8650.clone());
    report(&fleet, "b_cpu", &cpu, sm8650.clone());
    let db = dir.path().join("store.db");
    let db_arg = db.to_str().unwrap();
    let store = |t: &Value| {
        let s = &t["store"];
        ["reports_from_store", "reports_triaged", "runs_from_store", "runs_made"]
            .map(|k| s[k].as_u64().unwrap_or_else(|| panic!("no {k} in {s}")))
    };
    let (code, first, err) = triage_with(&[&fleet], &["--db", db_arg]);
    assert_eq!(code, 0, "{err}");
    // Four candidates on one input set.
    assert_eq!(store(&first), [0, 2, 0, 4]);
    let (_, second, _) = triage_with(&[&fleet], &["--db", db_arg]);
    assert_eq!(store(&second), [2, 0, 0, 0]);
    assert_eq!(first["reports"], second["reports"]);
    assert_eq!(first["candidate_runs"], second["candidate_runs"]);
    // A new report on the same inputs: triaged now, from runs read back.
    report(&fleet, "c_other", &s8450, sm8650.clone());
    let (_, third, _) = triage_with(&[&fleet], &["--db", db_arg]);
    assert_eq!(store(&third), [2, 1, 4, 0]);
    assert_eq!(verdict(&third, "c_other"), "other_chipset");
    // A report fed other inputs (the golden samples swapped): four runs on them, reproduced.
    let swapped: Vec<Vec<f32>> = vec![s8650[1].clone(), s8650[0].clone()];
    let d = report(&fleet, "d_swapped", &swapped, sm8650.clone());
    std::fs::rename(swapped_inputs(dir.path()), d.join("inputs.npz")).unwrap();
    let (code, fourth, err) = triage_with(&[&fleet], &["--db", db_arg]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(store(&fourth), [3, 1, 0, 4]);
    assert_eq!(verdict(&fourth, "d_swapped"), "reproduced");
    // A damaged entry is a cache miss: triaged again from the kept runs, with the same figures.
    let status = std::process::Command::new(std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into()))
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"update reports set entry='{broken'\"); c.commit()",
            db_arg,
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let (code, healed, err) = triage_with(&[&fleet], &["--db", db_arg]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(store(&healed), [0, 4, 8, 0]);
    assert_eq!(healed["reports"], fourth["reports"]);
    // The summary is the last triage's fleet, from the store alone.
    let out = bin()
        .args(["triage", "--summary", "--db", db_arg, "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary.as_array().unwrap().len(), 1);
    assert_eq!(summary[0]["reports"].as_array().unwrap().len(), 4);
    assert_eq!(summary[0]["fleet"]["by_chipset"], fourth["fleet"]["by_chipset"]);
    assert_eq!(summary[0]["fleet"]["kind"], fourth["fleet"]["kind"]);
}

#[test]
fn a_file_that_is_not_a_triage_store_is_refused_and_left_as_it_is() {
    let dir = tempdir();
    let fleet = dir.path().join("fleet");
    let gold = saved_golden_as_report(&fleet);
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database\n").unwrap();
    let other = dir.path().join("other.sqlite");
    // SQLite's own file format header, a database of another program (application_id 0).
    let status = std::process::Command::new(std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into()))
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('create table t(x)'); c.commit()",
            other.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    for f in [&text, &other] {
        let before = std::fs::read(f).unwrap();
        let (code, _, err) = triage_with(&[&gold], &["--db", f.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("triage store") && err.lines().count() == 1, "{err}");
        assert_eq!(std::fs::read(f).unwrap(), before);
    }
    // An output naming the store is refused before any work; nothing is written.
    let store = dir.path().join("store.db");
    let (code, _, err) = triage_with(
        &[&gold],
        &["--db", store.to_str().unwrap(), "--out", store.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("names the triage store"), "{err}");
    assert!(!store.exists());
    let (code, _, err) = triage_with(
        &[],
        &["--summary", "--db", dir.path().join("none.db").to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
}

/// A report whose outputs are the golden run's own (any verdict will do; it exists to be read).
fn saved_golden_as_report(fleet: &Path) -> PathBuf {
    let g = |k: usize| {
        let t = Tensor::read_npy(&repo("golden/ppocr_cls_fp32/outputs").join(format!("s{k}/o0.npy"))).unwrap();
        values(&t).into_iter().map(|v| v as f32).collect::<Vec<f32>>()
    };
    report(
        fleet,
        "golden",
        &[g(0), g(1)],
        serde_json::json!({"soc_model": "SM8650"}),
    )
}

fn raw_f32(path: &Path, values: &[f32]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

/// A `qnn-net-run`-style directory of `samples` with the output file at `file` (relative to
/// `Result_N/`) and `device` as `device.json`.
fn net_run_report(dir: &Path, name: &str, files: &[&str], samples: &[Vec<f32>], device: Value) -> PathBuf {
    let run = dir.join(name);
    for (k, sample) in samples.iter().enumerate() {
        for file in files {
            raw_f32(&run.join(format!("Result_{k}/{file}")), sample);
        }
    }
    std::fs::write(run.join("device.json"), device.to_string()).unwrap();
    run
}

/// Reports as apps write them: the output file spelled as `qnn-net-run` (`/` as `_`) and
/// `snpe-net-run` (subdirectories) write it, keys `device.json` does not define, and a chipset
/// whose simulation cannot compile the model here (SM8350: QNN error 1002 on this classifier).
#[test]
fn reports_as_apps_write_them_are_read_and_a_chipset_that_cannot_compile_is_said() {
    let dir = tempdir();
    let saved = simulated(dir.path());
    let s8650 = saved_runs(&saved)("qnn_sm8650");
    let app = serde_json::json!({"soc_model": "SM8650", "app_build": "4711", "locale": {"lang": "de"}});
    let slash = net_run_report(
        dir.path(),
        "slash",
        &["save_infer_model_scale_0.tmp_1.raw"],
        &s8650,
        app.clone(),
    );
    let snpe = net_run_report(dir.path(), "snpe", &["save_infer_model/scale_0.tmp_1.raw"], &s8650, app);
    let two = net_run_report(
        dir.path(),
        "two_files",
        &[
            "save_infer_model/scale_0.tmp_1.raw",
            "save_infer_model_scale_0_tmp_1.raw",
        ],
        &s8650,
        serde_json::json!({"soc_model": "SM8650"}),
    );
    // What the SM8350 sent matches nothing that runs here (9 steps from SM8650's simulation).
    let step = output_step() as f32;
    let drifted: Vec<Vec<f32>> = s8650
        .iter()
        .map(|s| s.iter().map(|v| v + 9.0 * step).collect())
        .collect();
    let old = report(
        dir.path(),
        "sm8350",
        &drifted,
        serde_json::json!({"soc_model": "SM8350"}),
    );
    let t = triage_against(
        &[&slash, &snpe, &two, &old],
        &["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8350"],
    );
    for (name, spelling) in [("slash", "slash_as_underscore"), ("snpe", "subdirectories")] {
        let e = entry(&t, name);
        assert_eq!(verdict(&t, name), "reproduced", "{}", e["verdict"]);
        assert_eq!(e["output_files"][0]["spelling"], spelling);
        assert_eq!(e["output_files"][0]["output"], OUTPUT);
        assert_eq!(e["device"]["unknown_keys"]["app_build"], "4711");
        assert_eq!(e["device"]["unknown_keys"]["locale"]["lang"], "de");
    }
    assert_eq!(
        entry(&t, "snpe")["output_files"][0]["file"],
        "save_infer_model/scale_0.tmp_1.raw"
    );
    assert_eq!(verdict(&t, "two_files"), "malformed");
    let why = entry(&t, "two_files")["verdict"]["sentence"].as_str().unwrap();
    assert!(why.contains("has 2 files"), "{why}");
    let e = entry(&t, "sm8350");
    assert_eq!(verdict(&t, "sm8350"), "own_chipset_failed", "{}", e["verdict"]);
    let why = e["verdict"]["sentence"].as_str().unwrap();
    assert!(why.contains("qnn:sm8350 failed") && why.contains("1002"), "{why}");
}

#[test]
fn a_qnn_net_run_directory_with_its_input_list_is_reproduced_on_those_inputs() {
    let dir = tempdir();
    let saved = simulated(dir.path());
    let s8650 = saved_runs(&saved)("qnn_sm8650");
    let golden_x = |k: usize| {
        let t = Tensor::read_npy(&repo("golden/ppocr_cls_fp32/inputs").join(format!("s{k}/i0.npy"))).unwrap();
        values(&t).into_iter().map(|v| v as f32).collect::<Vec<f32>>()
    };
    // The device ran the golden samples in the other order, listed by device paths.
    let run = dir.path().join("qnn_run");
    raw_f32(&run.join("inputs/x_a.raw"), &golden_x(1));
    raw_f32(&run.join("x_b.raw"), &golden_x(0));
    std::fs::write(
        run.join("input_list.txt"),
        "#save_infer_model/scale_0.tmp_1\nx:=/data/local/tmp/npu/inputs/x_a.raw\n/data/local/tmp/npu/x_b.raw\n",
    )
    .unwrap();
    for (k, sample) in [&s8650[1], &s8650[0]].iter().enumerate() {
        raw_f32(
            &run.join(format!("Result_{k}/save_infer_model_scale_0_tmp_1.raw")),
            sample,
        );
    }
    let (code, t, err) = triage_with(&[&run], &["--chipset", "SM8650", "--no-db"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        verdict(&t, "qnn_run"),
        "reproduced",
        "{}",
        entry(&t, "qnn_run")["verdict"]
    );
    assert_ne!(entry(&t, "qnn_run")["inputs"], "golden");
    // A list that points outside the report names a file the report does not hold.
    std::fs::write(run.join("input_list.txt"), "x:=../../../etc/passwd\n/data/x_b.raw\n").unwrap();
    let (code, t, err) = triage_with(&[&run], &["--chipset", "SM8650", "--no-db"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(verdict(&t, "qnn_run"), "malformed");
    let why = entry(&t, "qnn_run")["verdict"]["sentence"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("passwd is not in the report"), "{why}");
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
