//! The real transformer fixture (all-MiniLM-L6-v2's first two layers, `fixtures/real/minilm_*`)
//! end to end: placement drawn as the runtime runs it, the three levels of first departure, and
//! figures that do not depend on the machine. Expected figures come from `make_minilm.py` (NumPy
//! and ONNX Runtime in Python, `fixtures/expected/minilm.json`), never from the tool.

use crate::common;

use common::*;
use serde_json::Value;

fn expected() -> Value {
    serde_json::from_slice(&std::fs::read(repo("fixtures/expected/minilm.json")).expect("minilm.json")).expect("json")
}

fn a16w8() -> String {
    repo("fixtures/real/minilm_l2_qdq_a16w8.onnx").display().to_string()
}

fn fp32() -> String {
    repo("fixtures/real/minilm_l2_fp32.onnx").display().to_string()
}

fn input(name: &str) -> String {
    repo(&format!("fixtures/inputs/{name}.npz")).display().to_string()
}

/// `compare` of the a16w8 model against the fp32 one on `inputs`, plus `extra`; must succeed.
fn audit(inputs: &str, extra: &[&str]) -> Value {
    let (model, reference, feed) = (a16w8(), fp32(), input(inputs));
    let mut args = vec![
        model.as_str(),
        "--reference",
        reference.as_str(),
        "--inputs",
        feed.as_str(),
        "--fingerprint",
        "off",
    ];
    args.extend_from_slice(extra);
    let (code, report, stderr) = compare_json(&args);
    assert_eq!(code, 0, "{stderr}");
    report
}

#[test]
fn fragmented_placement_is_drawn_as_it_runs_with_the_cpu_nodes_between_the_qnn_partitions() {
    let erf_nodes = expected()["models"]["minilm_l2_qdq_a16w8"]["op_counts"]["Erf"]
        .as_u64()
        .expect("the model's Erf count") as usize;
    assert_eq!(erf_nodes, 2);
    let report = audit("minilm_text0", &["-t", "qnn:sm8650"]);
    let p = &target(&report, "qnn:sm8650")["placement"];
    let parts = p["partitions"].as_array().expect("partitions");
    let qnn: Vec<&Value> = parts.iter().filter(|x| x["ep"] == "QNNExecutionProvider").collect();
    // Two Erf nodes cut the QNN graph into three compiled partitions.
    assert_eq!(p["ep_partitions"], erf_nodes + 1);
    assert_eq!(
        qnn.len(),
        erf_nodes + 1,
        "one strip entry per compiled partition: {parts:?}"
    );
    // The runs tile the graph in execution order.
    let mut next = 0;
    for x in parts {
        assert_eq!(x["first_index"], next, "{parts:?}");
        let last = x["last_index"].as_u64().unwrap();
        assert_eq!(x["nodes"].as_u64().unwrap(), last + 1 - next);
        next = last + 1;
    }
    assert_eq!(next, p["total_nodes"].as_u64().unwrap());
    // Between two QNN runs, exactly the Erf node the CPU took.
    let erf_runs: Vec<usize> = (0..parts.len())
        .filter(|&k| parts[k]["op_types"] == serde_json::json!({"Erf": 1}))
        .collect();
    assert_eq!(erf_runs.len(), erf_nodes);
    for &k in &erf_runs {
        assert_eq!(parts[k]["ep"], "CPUExecutionProvider");
        assert_eq!(parts[k - 1]["ep"], "QNNExecutionProvider");
        assert_eq!(parts[k + 1]["ep"], "QNNExecutionProvider");
        // The crossings meet the CPU run at the cut: its input comes from QNN, its output goes
        // back.
        let erf = parts[k]["first_node"].as_str().unwrap();
        let crossings = p["crossings"].as_array().unwrap();
        assert!(crossings.iter().any(
            |c| c["to_ep"] == "CPUExecutionProvider" && c["consumers"].as_array().unwrap().iter().any(|n| n == erf)
        ));
        assert!(crossings
            .iter()
            .any(|c| c["from_ep"] == "CPUExecutionProvider" && c["producer"] == erf));
    }
    // The runtime's reason, one message of two sentences, reads as two sentences.
    for f in p["fallback"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["op_type"] == "Erf")
    {
        let reason = f["reason"].as_str().unwrap();
        assert!(reason.contains("not supported by QNN EP. Erf node"), "{reason}");
    }
}

/// The first layer in `layers` that `rule` accepts, by node name.
fn first_where(layers: &[Value], rule: impl Fn(&Value) -> bool) -> Option<String> {
    layers
        .iter()
        .find(|l| rule(l))
        .map(|l| l["node"].as_str().unwrap().to_string())
}

fn sqnr(v: &Value) -> Option<f64> {
    match v {
        Value::Null => None,
        v => Some(num(v)),
    }
}

#[test]
fn the_first_departure_is_named_at_three_levels_and_float_noise_is_none_of_them() {
    let report = audit("minilm_text0", &["-t", "qnn:sm8650", "--layers", "all"]);
    let rules = &report["layer_audit"]["divergence"];
    assert_eq!(rules["tolerance_lsb"], 1);
    let tolerance = rules["tolerance_lsb"].as_u64().unwrap();
    let (float_tol, loss_db, ceiling) = (
        num(&rules["float_tolerance"]),
        num(&rules["sqnr_loss_db"]),
        num(&rules["sqnr_ceiling_db"]),
    );
    let qnn = target(&report, "qnn:sm8650");
    let base = target(&report, "cpu:noopt");
    let layers = qnn["layers"].as_array().unwrap();
    let summary = &qnn["layer_summary"];

    // The baseline's layers against the golden run, against NumPy/ORT in Python.
    let want = &expected()["tests"]["minilm_text0"]["codes"]["minilm_l2_qdq_a16w8"];
    let mut checked = 0;
    for row in want
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r.get("sqnr_db_vs_fp32").is_some())
    {
        let Some(l) = base["layers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["tensor"] == row["tensor"])
        else {
            continue;
        };
        let (got, want) = (num(&l["sqnr_db"]), num(&row["sqnr_db_vs_fp32"]));
        assert!(
            got == want || (got - want).abs() < 1e-6,
            "{}: {got} dB, NumPy {want} dB",
            row["tensor"]
        );
        checked += 1;
    }
    assert!(checked >= 70, "only {checked} layers compared with the fixture's");

    // Level 1: the first quantized layer whose codes differ at all.
    let code = first_where(layers, |l| {
        l["quantized"] == true && l["vs_baseline"]["differing"].as_u64() > Some(0)
    });
    assert_eq!(code.as_deref(), Some("/embeddings/Add"));
    assert_eq!(summary["first_code_difference"]["node"], "/embeddings/Add");
    assert_eq!(summary["first_code_difference"]["max_steps"], 1);
    // Level 2: beyond one step (codes) or a float16 step of the range (floats).
    let beyond = first_where(layers, |l| {
        let c = &l["vs_baseline"];
        if l["quantized"] == true {
            c["max_steps"].as_u64().unwrap_or(0) > tolerance
        } else {
            c["max_rel_error"].as_f64().is_some_and(|r| r > float_tol)
        }
    });
    assert_eq!(beyond.as_deref(), Some("/embeddings/LayerNorm/LayerNormalization"));
    assert_eq!(
        summary["first_beyond_rounding"]["node"],
        "/embeddings/LayerNorm/LayerNormalization"
    );
    assert!(summary["first_beyond_rounding"]["max_steps"].as_u64() > Some(tolerance));
    assert_eq!(summary["first_divergence"], summary["first_beyond_rounding"]);
    // Level 3: more than 3 dB below the baseline on the same layer, SQNR counted up to 100 dB.
    let by_index = |i: &Value| {
        base["layers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| &b["index"] == i)
            .cloned()
    };
    let loss = first_where(layers, |l| {
        let Some(b) = by_index(&l["index"]) else { return false };
        match (sqnr(&l["sqnr_db"]), sqnr(&b["sqnr_db"])) {
            (Some(own), Some(was)) => was.min(ceiling) - own.min(ceiling) > loss_db,
            _ => false,
        }
    });
    assert_eq!(loss.as_deref(), Some("/encoder/layer.0/attention/self/MatMul"));
    let s = &summary["first_sqnr_loss"];
    assert_eq!(s["node"], "/encoder/layer.0/attention/self/MatMul");
    assert!(num(&s["baseline_sqnr_db"]) - num(&s["sqnr_db"]) > loss_db);

    // The gate reads the same definition: the largest loss of any layer.
    let worst = layers
        .iter()
        .filter_map(|l| {
            let b = by_index(&l["index"])?;
            Some(sqnr(&b["sqnr_db"])?.min(ceiling) - sqnr(&l["sqnr_db"])?.min(ceiling))
        })
        .fold(0.0, f64::max);
    assert!(worst > loss_db);
    let (model, reference, feed) = (a16w8(), fp32(), input("minilm_text0"));
    let gated = |limit: f64| {
        let limit = limit.to_string();
        let (code, r, _) = compare_json(&[
            &model,
            "--reference",
            &reference,
            "--inputs",
            &feed,
            "--fingerprint",
            "off",
            "-t",
            "qnn:sm8650",
            "--layers",
            "all",
            "--max-layer-sqnr-loss",
            &limit,
        ]);
        let rule = r["gate"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["rule"] == "max_layer_sqnr_loss_db")
            .cloned();
        (code, rule.expect("a layer rule"))
    };
    let (code, rule) = gated(loss_db);
    assert_eq!(
        (code, &rule["pass"], &rule["output"]),
        (1, &Value::Bool(false), &Value::from("(layers)"))
    );
    assert!((num(&rule["measured"]) - worst).abs() < 1e-9, "{rule}");
    assert_eq!(gated(worst + 0.01).0, 0);
    // Without the per-layer audit the rule cannot be checked, and does not pass.
    let (code, r, _) = compare_json(&[
        &model,
        "--reference",
        &reference,
        "--inputs",
        &feed,
        "--fingerprint",
        "off",
        "-t",
        "cpu",
        "--max-layer-sqnr-loss",
        "3",
    ]);
    let rule = r["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["rule"] == "max_layer_sqnr_loss_db")
        .cloned();
    assert_eq!(
        (code, rule.map(|x| x["measured"].clone())),
        (1, Some(Value::from("nan")))
    );

    // Before all of them, the float mask sum differs from the baseline in its last bits only:
    // noise, named at no level.
    let noise = layers
        .iter()
        .find(|l| l["node"] == "/pooling/ReduceSum_1")
        .expect("the mask sum");
    assert_eq!(noise["quantized"], false);
    assert!(noise["vs_baseline"]["differing"].as_u64() > Some(0));
    assert!(num(&noise["vs_baseline"]["max_rel_error"]) < 1e-6);
    let first_index = summary["first_code_difference"]["index"].as_u64().unwrap();
    assert!(noise["index"].as_u64().unwrap() < first_index);

    // Bisection looks for the same level with cuts through the main flow (the attention mask
    // reaches every layer beside it), and names the same layer.
    let bisected = audit("minilm_text0", &["-t", "qnn:sm8650", "--layers", "bisect"]);
    let b = &target(&bisected, "qnn:sm8650")["layer_summary"];
    assert_eq!(
        b["first_beyond_rounding"]["node"], "/embeddings/LayerNorm/LayerNormalization",
        "{b}"
    );
    assert!(b["bisect"]["sessions"].as_u64().unwrap() < layers.len() as u64);

    // The terminal names the three levels, each with its node.
    let dir = tempdir();
    let saved = dir.path().join("r.json");
    std::fs::write(&saved, serde_json::to_vec(&report).unwrap()).unwrap();
    let table = String::from_utf8(run(&["render", saved.to_str().unwrap()]).stdout).unwrap();
    for (level, node) in [
        ("first code difference (any code): #", "/embeddings/Add (Add)"),
        (
            "first beyond rounding (> 1 LSB",
            "/embeddings/LayerNorm/LayerNormalization (LayerNormalization)",
        ),
        (
            "first SQNR loss (> 3.00 dB below the baseline): #",
            "/encoder/layer.0/attention/self/MatMul (MatMul)",
        ),
    ] {
        let line = table
            .lines()
            .find(|l| l.contains(level))
            .unwrap_or_else(|| panic!("no '{level}' in:\n{table}"));
        assert!(line.contains(node), "{line}");
    }
}

#[test]
fn figures_do_not_depend_on_the_machine_and_thread_sensitivity_is_measured() {
    // On the seeded input, the CPU EP's a16w8 outputs change between 1 and 2 intra-op threads
    // (ONNX Runtime in Python, in the fixture script).
    let sensitive =
        &expected()["tests"]["minilm_seed7"]["cpu_opt_threads1_vs_threads2_differing"]["minilm_l2_qdq_a16w8"];
    assert!(sensitive["token_embeddings"].as_u64() > Some(0));
    let keep = |v: &Value| strip_keys(v, &["timing", "seconds", "log", "sessions"]);
    let one = audit("minilm_seed7", &["-t", "cpu", "-t", "qnn:sm8650", "--jobs", "1"]);
    let two = audit("minilm_seed7", &["-t", "cpu", "-t", "qnn:sm8650", "--jobs", "2"]);
    assert_eq!(keep(&one), keep(&two), "--jobs changed a figure");
    assert_eq!(one["reference"]["intra_op_threads"], 1);
    for t in one["targets"].as_array().unwrap() {
        assert_eq!(t["intra_op_threads"], 1, "{}", t["id"]);
    }
    // --repeat measures which targets depend on the thread count: the CPU EP does, by the
    // fixture script's count of elements; QNN does not.
    let probed = audit(
        "minilm_seed7",
        &["-t", "cpu", "-t", "qnn:sm8650", "--repeat", "2", "--thread-probe", "2"],
    );
    let probe = &target(&probed, "cpu")["determinism"]["thread_probe"];
    assert_eq!(probe["threads"], 2);
    assert_eq!(probe["against_threads"], 1);
    assert_eq!(probe["bit_identical"], false);
    for d in probe["differences"].as_array().unwrap() {
        let output = d["output"].as_str().unwrap();
        assert_eq!(d["differing"], sensitive[output], "{output}");
    }
    assert_eq!(
        target(&probed, "qnn:sm8650")["determinism"]["thread_probe"]["bit_identical"],
        true
    );
}

#[test]
fn reports_made_with_other_thread_counts_are_not_compared_unless_told() {
    let dir = tempdir();
    let prev = dir.path().join("prev.json");
    let (model, feed) = (a16w8(), input("minilm_text0"));
    let base = [
        "compare",
        model.as_str(),
        "--inputs",
        feed.as_str(),
        "-t",
        "cpu",
        "--fingerprint",
        "off",
    ];
    let out = run(&[&base[..], &["--out", prev.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let p = prev.to_str().unwrap();
    fails_with(
        &[&base[..], &["--baseline-report", p, "--threads", "2"]].concat(),
        2,
        "was made with other intra-op thread counts: cpu 1 (now 2)",
    );
    let out = run(&[
        &base[..],
        &["--baseline-report", p, "--threads", "2", "--allow-other-threads"],
    ]
    .concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("accepted (--allow-other-threads)"), "{stdout}");
    // Shards run with other thread counts are not merged either.
    let shard = |i: &str, threads: &str| {
        let path = dir.path().join(format!("s{i}.json"));
        let part = format!("{i}/2");
        let args = [
            &base[..],
            &[
                "-t",
                "qnn:sm8650",
                "--shard",
                &part,
                "--threads",
                threads,
                "--out",
                path.to_str().unwrap(),
            ],
        ]
        .concat();
        assert_eq!(run(&args).status.code(), Some(0));
        path.display().to_string()
    };
    let (a, b) = (shard("1", "1"), shard("2", "2"));
    let merged = dir.path().join("m.json").display().to_string();
    fails_with(&["merge", &a, &b, "--out", &merged], 2, "intra-op threads");
    assert_eq!(
        run(&["merge", &a, &b, "--allow-other-threads", "--out", &merged])
            .status
            .code(),
        Some(0)
    );
}
