//! Generated inputs are the documented generator's bytes (checked against the NumPy
//! implementation in fixtures/make_fixtures.py), and golden runs round-trip and detect tampering.

use crate::common;

use common::*;
use npu_audit::data::model::pb::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto};
use npu_audit::data::tensor::{read_npz, DType, Tensor};
use prost::Message;

fn onnx_code(dtype: &str) -> i32 {
    match dtype {
        "float32" => 1,
        "uint8" => 2,
        "int8" => 3,
        "int64" => 7,
        "bool" => 9,
        "float16" => 10,
        "float64" => 11,
        "int32" => 6,
        "int16" => 5,
        "uint16" => 4,
        other => panic!("dtype {other}"),
    }
}

/// A model with `n` inputs of one type and shape, each passed through an Identity.
fn identity_model(n: usize, dtype: &str, shape: &[usize]) -> Vec<u8> {
    let info = |name: String| tensor_value_info(&name, onnx_code(dtype), shape);
    let graph = GraphProto {
        node: (0..n)
            .map(|i| NodeProto {
                input: vec![format!("in{i}")],
                output: vec![format!("out{i}")],
                name: Some(format!("id{i}")),
                op_type: Some("Identity".into()),
                ..Default::default()
            })
            .collect(),
        name: Some("identity".into()),
        input: (0..n).map(|i| info(format!("in{i}"))).collect(),
        output: (0..n).map(|i| info(format!("out{i}"))).collect(),
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(9),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn generated_inputs_are_the_documented_generators_bytes() {
    let cases: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo("fixtures/inputs/prng_cases.json")).unwrap()).unwrap();
    let arrays = read_npz(&repo("fixtures/inputs/prng_cases.npz")).unwrap();
    let dir = tempdir();
    let mut checked = 0;
    for (key, case) in cases["cases"].as_object().unwrap() {
        let dtype = case["dtype"].as_str().unwrap();
        let shape: Vec<usize> = case["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let index = case["input_index"].as_u64().unwrap() as usize;
        let sample = case["sample"].as_u64().unwrap() as usize;
        let model = dir.path().join(format!("{key}.onnx"));
        std::fs::write(&model, identity_model(index + 1, dtype, &shape)).unwrap();
        let golden = dir.path().join(format!("{key}.golden"));
        let out = run(&[
            "golden",
            "create",
            model.to_str().unwrap(),
            "--out",
            golden.to_str().unwrap(),
            "--gen",
            case["spec"].as_str().unwrap(),
            "--seed",
            &case["seed"].to_string(),
            "--samples",
            &(sample + 1).to_string(),
        ]);
        assert!(out.status.success(), "{key}: {}", String::from_utf8_lossy(&out.stderr));
        let got = Tensor::read_npy(&golden.join(format!("inputs/s{sample}/i{index}.npy"))).unwrap();
        let want = &arrays
            .iter()
            .find(|(n, _)| n == key)
            .unwrap_or_else(|| panic!("no array {key}"))
            .1;
        assert_eq!(got.shape, want.shape, "{key}");
        assert_eq!(got.dtype(), want.dtype(), "{key}");
        assert_eq!(
            got.data.to_le_bytes(),
            want.data.to_le_bytes(),
            "{key}: bytes differ from the NumPy generator"
        );
        // The Identity model returns its input: the stored golden output is the same tensor.
        let echoed = Tensor::read_npy(&golden.join(format!("outputs/s{sample}/o{index}.npy"))).unwrap();
        assert_eq!(echoed.data.to_le_bytes(), want.data.to_le_bytes(), "{key}");
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} generator cases");
    let _ = DType::Float32;
}

#[test]
fn a_golden_run_reproduces_the_reference_and_detects_tampering() {
    let dir = tempdir();
    let golden = dir.path().join("cnn");
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    let qdq = repo("fixtures/models/cnn_qdq_u8.onnx");
    let out = run(&[
        "golden",
        "create",
        fp32.to_str().unwrap(),
        "--out",
        golden.to_str().unwrap(),
        "--seed",
        "4",
        "--samples",
        "2",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(golden.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["reference_model"]["sha256"],
        npu_audit::foundation::hash::sha256_hex(&std::fs::read(&fp32).unwrap())
    );
    assert_eq!(manifest["runtime"]["version"], "1.31.1");
    assert_eq!(manifest["samples"].as_array().unwrap().len(), 2);

    // Comparing against the stored run gives the same figures as running the reference again.
    let common_args = ["-t", "cpu", "--no-baseline"];
    let (code, from_golden, stderr) = compare_json(
        &[
            &[qdq.to_str().unwrap(), "--golden", golden.to_str().unwrap()][..],
            &common_args,
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(from_golden["reference"]["kind"], "golden");
    assert_eq!(from_golden["inputs"]["source"], "golden");
    let (code, from_model, _) = compare_json(
        &[
            &[
                qdq.to_str().unwrap(),
                "--reference",
                fp32.to_str().unwrap(),
                "--seed",
                "4",
                "--samples",
                "2",
            ][..],
            &common_args,
        ]
        .concat(),
    );
    assert_eq!(code, 0);
    for name in ["logits", "probs"] {
        assert_eq!(
            output(&from_golden, "cpu", name)["sqnr_db"],
            output(&from_model, "cpu", name)["sqnr_db"],
            "{name}"
        );
        assert_eq!(
            output(&from_golden, "cpu", name)["max_abs"],
            output(&from_model, "cpu", name)["max_abs"],
            "{name}"
        );
    }
    assert_eq!(from_golden["inputs"]["tensors"], from_model["inputs"]["tensors"]);

    // A reference that is not the golden run's model is refused.
    let out = run(&[
        "compare",
        qdq.to_str().unwrap(),
        "--golden",
        golden.to_str().unwrap(),
        "--reference",
        qdq.to_str().unwrap(),
        "-t",
        "cpu",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not the model the golden run"));

    // An altered output is detected, naming the file.
    let victim = golden.join("outputs/s1/o0.npy");
    let mut bytes = std::fs::read(&victim).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&victim, bytes).unwrap();
    let out = run(&[
        "compare",
        qdq.to_str().unwrap(),
        "--golden",
        golden.to_str().unwrap(),
        "-t",
        "cpu",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("outputs/s1/o0.npy was altered"), "{stderr}");
    std::fs::remove_file(&victim).unwrap();
    let out = run(&[
        "compare",
        qdq.to_str().unwrap(),
        "--golden",
        golden.to_str().unwrap(),
        "-t",
        "cpu",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("outputs/s1/o0.npy is missing"));

    // golden create refuses to overwrite without --force.
    let out = run(&[
        "golden",
        "create",
        fp32.to_str().unwrap(),
        "--out",
        golden.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
}

#[test]
fn the_committed_golden_runs_verify_and_this_runtime_reproduces_them() {
    let cases: [(&str, &str, &str, &[&str]); 3] = [
        (
            "cnn_fp32",
            "fixtures/models/cnn_fp32.onnx",
            "fixtures/models/cnn_qdq_u8.onnx",
            &["--gen", "uniform:-1,1", "--seed", "7", "--samples", "4"],
        ),
        (
            "transformer_fp32",
            "fixtures/models/transformer_fp32.onnx",
            "fixtures/models/transformer_qdq_a16w8.onnx",
            &["--gen", "normal:0,1", "--seed", "7", "--samples", "4"],
        ),
        (
            "ppocr_cls_fp32",
            "fixtures/real/ppocr_cls_fp32.onnx",
            "fixtures/real/ppocr_cls_qdq_u8.onnx",
            &[
                "--gen",
                "uniform:-1,1",
                "--seed",
                "3",
                "--samples",
                "2",
                "--input-shape",
                "x:1,3,48,192",
            ],
        ),
    ];
    let dir = tempdir();
    for (name, fp32, qdq, flags) in cases {
        let committed = repo(&format!("golden/{name}"));
        let again = dir.path().join(name);
        let model = repo(fp32).display().to_string();
        let out_dir = again.display().to_string();
        let mut args = vec!["golden", "create", model.as_str(), "--out", out_dir.as_str()];
        args.extend_from_slice(flags);
        let out = run(&args);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let manifest = |d: &std::path::Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(d.join("manifest.json")).unwrap()).unwrap()
        };
        let (old, new) = (manifest(&committed), manifest(&again));
        assert_eq!(old["reference_model"], new["reference_model"], "{name}");
        assert_eq!(
            old["samples"], new["samples"],
            "{name}: this runtime does not reproduce the stored golden run"
        );
        let (code, report, stderr) = compare_json(&[
            repo(qdq).to_str().unwrap(),
            "--golden",
            committed.to_str().unwrap(),
            "-t",
            "cpu:noopt",
        ]);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert_eq!(report["reference"]["kind"], "golden");
    }
}

#[test]
fn tensor_hashes_are_those_of_numpy_save() {
    // The fixture archives were written by numpy.savez: each entry is numpy.save's bytes.
    use std::io::Read;
    for file in ["fixtures/inputs/cnn_seed7.npz", "fixtures/inputs/prng_cases.npz"] {
        let mut archive = zip::ZipArchive::new(std::fs::File::open(repo(file)).unwrap()).unwrap();
        for i in 0..archive.len() {
            let mut entry = archive.by_index(i).unwrap();
            let mut numpy_bytes = Vec::new();
            entry.read_to_end(&mut numpy_bytes).unwrap();
            let tensor = Tensor::read_npy_from(&mut numpy_bytes.as_slice()).unwrap();
            assert_eq!(tensor.to_npy_bytes().unwrap(), numpy_bytes, "{file}: {}", entry.name());
        }
    }
}
