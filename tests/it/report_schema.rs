//! docs/report.schema.json is the schema derived from the report's types (`npu-audit schema`),
//! and holds against real reports of the binary: a few end-to-end runs that
//! between them produce nearly every optional part of the report (per-layer audit, bisection,
//! placement, QNN chipsets, failed, crashed and unavailable targets, gate rules from flags and
//! from a policy file with baseline mode, `--repeat`, shards and `merge`) must validate, and a
//! real report with an unknown field, a metric of the wrong kind or a required field removed
//! must not. Every object of the schema forbids unknown fields, so a field added to the code
//! and not to the schema fails here.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// The schema, parsed.
fn schema() -> Value {
    let text = std::fs::read_to_string(repo("docs/report.schema.json")).expect("read docs/report.schema.json");
    serde_json::from_str(&text).expect("docs/report.schema.json is JSON")
}

fn validator() -> jsonschema::Validator {
    jsonschema::draft202012::new(&schema()).expect("the schema compiles")
}

/// Every validation error of `report`, one per line.
fn errors(v: &jsonschema::Validator, report: &Value) -> Vec<String> {
    v.iter_errors(report)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// The real reports the tests check, made once.
struct Reports {
    /// `--layers all` with a reference, QNN, a failing target, `--repeat 2`, flag thresholds.
    layers: Value,
    /// The two shards of a sharded run, and their merge.
    shards: Vec<Value>,
    merged: Value,
    /// A policy file in `both` mode against the merged report, `--layers bisect`, a crashed and
    /// an unavailable target.
    policy: Value,
}

fn reports() -> &'static Reports {
    static REPORTS: OnceLock<Reports> = OnceLock::new();
    REPORTS.get_or_init(make_reports)
}

/// Runs the binary, expecting `code`, and reads the JSON report it wrote to `out`.
fn run_to(mut cmd: assert_cmd::Command, out: &Path, code: i32) -> Value {
    let o = cmd.arg("--out").arg(out).output().expect("run npu-audit");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{stderr}");
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: {e}; stderr:\n{stderr}", out.display()));
    serde_json::from_str(&text).expect("report is JSON")
}

fn make_reports() -> Reports {
    let dir = tempdir();
    let d = dir.path();

    // The CNN with its weights in an external file (model.external_data), two samples from
    // files (inputs.files), the fp32 reference, every layer tapped and isolated; cpu, a QNN
    // chipset and OpenVINO (whose session creation fails on this model: error, failed_at),
    // allowed to fail; one tensor the QNN target refuses to return (layers[].error and
    // layer_summary.error); each sample run twice; thresholds of every flag kind.
    let ext = d.join("ext");
    std::fs::create_dir(&ext).unwrap();
    let model = with_external_data(&repo("fixtures/models/cnn_qdq_u8.onnx"), &ext);
    let npz = repo("fixtures/inputs/cnn_seed7.npz");
    let mut cmd = bin();
    cmd.env(
        "NPU_AUDIT_FAULT_INJECT",
        "qnn:sm8650=refuse-output:conv2_out_QuantizeLinear_Output",
    )
    .arg("compare")
    .arg(&model)
    .args(["--reference", &cnn_fp32()])
    .arg("--inputs")
    .arg(&npz)
    .arg("--inputs")
    .arg(&npz)
    .args([
        "-t",
        "cpu",
        "-t",
        "qnn:sm8650",
        "-t",
        crate::common::REFUSED_TARGET,
        "--allow-failure",
        crate::common::REFUSED_PATTERN,
    ])
    .args(["--layers", "all", "--repeat", "2"])
    .args(["--min-sqnr", "10", "--max-abs", "100", "--min-top1", "0"])
    .args(["--max-fallback-nodes", "100", "--max-partitions", "1000"])
    .args(["--no-config", "--format", "json"]);
    let layers = run_to(cmd, &d.join("layers.json"), 0);

    // The model with nodes QNN leaves to the CPU (placement.fallback, crossings), derived
    // reference, generated inputs, in two shards joined by `merge`.
    let fallback = repo("fixtures/models/fallback_qdq_u8.onnx");
    let shard = |i: usize| {
        let mut cmd = bin();
        cmd.arg("compare")
            .arg(&fallback)
            .args(["-t", "cpu", "-t", "qnn:sm8650", "--shard", &format!("{i}/2")])
            .args(["--no-config", "--fingerprint", "off", "--format", "json"]);
        run_to(cmd, &d.join(format!("s{i}.json")), 0)
    };
    let shards = vec![shard(1), shard(2)];
    let mut cmd = bin();
    cmd.current_dir(d)
        .args(["merge", "s1.json", "s2.json", "--format", "json"]);
    let merged = run_to(cmd, &d.join("merged.json"), 0);

    // A policy file: limits, regression margins against the merged report, targets allowed to
    // fail (gate.policy, rules[].origin and previous); a QNN chipset whose worker crashes, a
    // target this platform cannot run, and bisection.
    std::fs::write(
        d.join("npu-audit.toml"),
        r#"version = 1
mode = "both"
allow_failure = ["dml"]

[defaults]
min_sqnr_db = 5.0
max_sqnr_regression_db = 1.0
max_fallback_regression = 0

[target."qnn:sm8850"]
allow_failure = true

[baseline]
report = "merged.json"
"#,
    )
    .unwrap();
    let mut cmd = bin();
    cmd.env("NPU_AUDIT_FAULT_INJECT", "qnn:sm8850=crash")
        .arg("compare")
        .arg(&fallback)
        .args(["-t", "cpu", "-t", "qnn:sm8650", "-t", "qnn:sm8850", "-t", "dml"])
        .arg("--config")
        .arg(d.join("npu-audit.toml"))
        .args(["--layers", "bisect", "--fingerprint", "off", "--format", "json"]);
    let policy = run_to(cmd, &d.join("policy.json"), 0);

    Reports {
        layers,
        shards,
        merged,
        policy,
    }
}

fn all_reports(r: &Reports) -> Vec<(&'static str, &Value)> {
    vec![
        ("layers", &r.layers),
        ("shard 1", &r.shards[0]),
        ("shard 2", &r.shards[1]),
        ("merged", &r.merged),
        ("policy", &r.policy),
    ]
}

#[test]
fn the_committed_schema_is_the_one_derived_from_the_report_types() {
    let out = bin().arg("schema").output().expect("run npu-audit schema");
    assert_eq!(out.status.code(), Some(0));
    let derived = String::from_utf8(out.stdout).expect("utf-8");
    let committed = std::fs::read_to_string(repo("docs/report.schema.json")).expect("read");
    assert!(
        derived == committed,
        "docs/report.schema.json differs from the schema derived from the report types: run \
         `cargo run -- schema > docs/report.schema.json` and describe the change in docs/report-schema.md"
    );
}

#[test]
fn the_committed_reports_validate() {
    let v = validator();
    for entry in std::fs::read_dir(repo("fixtures/reports")).expect("fixtures/reports") {
        let path = entry.expect("entry").path();
        // Triage outputs have their own schema (tests/it/triage_outputs.rs).
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("triage_"))
        {
            continue;
        }
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let errs = errors(&v, &report);
        assert!(errs.is_empty(), "{}:\n{}", path.display(), errs.join("\n"));
    }
}

#[test]
fn the_schema_is_a_strict_draft_2020_12_schema() {
    let s = schema();
    if let Err(e) = jsonschema::draft202012::meta::validate(&s) {
        panic!("not a valid draft 2020-12 schema: {e}");
    }
    let docs = std::fs::read_to_string(repo("docs/report-schema.md")).unwrap();
    let defs = s["$defs"].as_object().expect("$defs");
    let mut undocumented = BTreeSet::new();
    for (name, def) in defs {
        let Some(props) = def.get("properties").and_then(Value::as_object) else {
            continue;
        };
        assert_eq!(
            def["additionalProperties"],
            Value::Bool(false),
            "{name}: an object with fixed fields must forbid unknown ones"
        );
        for req in def["required"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let req = req.as_str().unwrap();
            assert!(props.contains_key(req), "{name}: required '{req}' is not a property");
        }
        for (field, p) in props {
            assert!(p.get("description").is_some(), "{name}.{field} has no description");
            if !docs.contains(&format!("`{field}`")) && !docs.contains(&format!("`{field}[]`")) {
                undocumented.insert(format!("{name}.{field}"));
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "fields of the schema that docs/report-schema.md does not name: {undocumented:?}"
    );
}

#[test]
fn real_reports_validate_against_the_schema() {
    let v = validator();
    for (what, report) in all_reports(reports()) {
        let errs = errors(&v, report);
        assert!(
            errs.is_empty(),
            "the {what} report does not match the schema:\n{}",
            errs.join("\n")
        );
    }
}

#[test]
fn the_runs_produce_the_optional_parts_the_schema_describes() {
    let r = reports();
    let has = |v: &Value, ptr: &str| v.pointer(ptr).is_some_and(|x| !x.is_null());

    // The per-layer run.
    let l = &r.layers;
    assert!(has(l, "/model/external_data/0/sha256"));
    assert!(has(l, "/inputs/files/0"));
    assert_eq!(l["reference"]["kind"], "model");
    assert_eq!(l["layer_audit"]["mode"], "all");
    let cpu = target(l, "cpu");
    for ptr in [
        "/layers/0/vs_baseline",
        "/layers/0/introduced_vs_baseline",
        "/layers/0/introduced_max_abs",
        "/layers/0/reference_tensor",
        "/layer_summary/tap_effects",
        "/determinism/repeats",
        "/placement/partitions/0",
        "/outputs/0/baseline/excess_db",
        "/log",
    ] {
        assert!(has(cpu, ptr), "cpu has no {ptr}");
    }
    let qnn = target(l, "qnn:sm8650");
    assert_eq!(qnn["chipset"]["sm"], "SM8650");
    assert!(has(qnn, "/runtime/plugin/version"));
    assert!(has(qnn, "/layer_summary/error"));
    assert!(qnn["layers"].as_array().unwrap().iter().any(|x| has(x, "/error")));
    let refused = target(l, crate::common::REFUSED_TARGET);
    assert_eq!(refused["status"], "failed");
    assert!(has(refused, "/failed_at") && has(refused, "/error"));
    assert!(
        l["targets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| has(t, "/fingerprint/summary")),
        "no target has a fingerprint"
    );
    assert!(
        l["targets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| has(t, "/drift_explanations/0/codes")),
        "no target has drift explanations"
    );
    assert!(l["agreement"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| has(a, "/code_differences")));
    let rules: BTreeSet<&str> = l["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["rule"].as_str().unwrap())
        .collect();
    for rule in [
        "min_sqnr_db",
        "max_abs",
        "min_top1_agreement",
        "max_fallback_nodes",
        "max_partitions",
        "ran",
    ] {
        assert!(rules.contains(rule), "no {rule} rule in {rules:?}");
    }
    assert_eq!(
        l["gate"]["policy"]["allowed_to_fail"][0],
        crate::common::REFUSED_PATTERN
    );

    // Shards and merge.
    for (i, s) in r.shards.iter().enumerate() {
        assert_eq!(s["shard"]["index"], i + 1);
        assert!(has(s, "/shard/outputs_dir"));
    }
    assert_eq!(r.merged["merged_from"].as_array().map(Vec::len), Some(2));
    assert!(r.merged.get("shard").is_none());

    // The policy run.
    let p = &r.policy;
    assert_eq!(p["reference"]["kind"], "derived");
    assert!(has(p, "/reference/removed_qdq_pairs"));
    assert!(has(p, "/inputs/generators/0") && has(p, "/inputs/seed"));
    assert!(has(p, "/gate/policy/file") && has(p, "/gate/policy/baseline_report"));
    assert!(has(p, "/gate/policy/baseline_model_sha256"));
    assert!(p["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| has(x, "/previous")));
    assert!(p["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["origin"].as_str().unwrap().contains("npu-audit.toml:")));
    assert_eq!(target(p, "qnn:sm8850")["status"], "crashed");
    assert_eq!(target(p, "dml")["status"], "unavailable");
    assert!(has(target(p, "qnn:sm8650"), "/layer_summary/bisect/steps/0"));
    assert!(has(target(p, "qnn:sm8650"), "/placement/fallback/0/position"));
    assert!(has(target(p, "qnn:sm8650"), "/placement/crossings/0/kind"));
}

#[test]
fn the_schema_rejects_a_report_that_drifted_from_it() {
    let v = validator();
    let real = &reports().layers;
    assert!(errors(&v, real).is_empty());
    let rejected = |what: &str, edit: &dyn Fn(&mut Value)| {
        let mut r = real.clone();
        edit(&mut r);
        assert!(!v.is_valid(&r), "the schema accepts a report with {what}");
    };
    let accepted = |what: &str, edit: &dyn Fn(&mut Value)| {
        let mut r = real.clone();
        edit(&mut r);
        let errs = errors(&v, &r);
        assert!(
            errs.is_empty(),
            "the schema rejects a report with {what}:\n{}",
            errs.join("\n")
        );
    };
    // Sets (or adds) the field a JSON pointer names.
    let set = |r: &mut Value, ptr: &str, value: Value| {
        let (parent, field) = ptr.rsplit_once('/').unwrap();
        let parent = r.pointer_mut(parent).and_then(Value::as_object_mut);
        parent
            .unwrap_or_else(|| panic!("no object at {ptr}"))
            .insert(field.into(), value);
    };
    let remove = |r: &mut Value, ptr: &str, field: &str| {
        assert!(
            r.pointer_mut(ptr)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove(field)
                .is_some(),
            "{ptr}/{field}"
        );
    };

    // Unknown fields, at the top and deep inside.
    rejected("an unknown top-level field", &|r| {
        set(r, "/surprise", Value::Bool(true))
    });
    rejected("an unknown field in an output", &|r| {
        set(r, "/targets/0/outputs/0/surprise", 1.into())
    });
    rejected("an unknown field in a layer", &|r| {
        set(r, "/targets/0/layers/0/surprise", 1.into())
    });
    rejected("an unknown field in gate.policy", &|r| {
        set(r, "/gate/policy/surprise", 1.into())
    });
    // A metric of the wrong kind; the three non-finite strings are numbers.
    rejected("sqnr_db \"fast\"", &|r| {
        set(r, "/targets/0/outputs/0/sqnr_db", "fast".into())
    });
    rejected("a layer's sqnr_db \"fast\"", &|r| {
        set(r, "/targets/0/layers/0/sqnr_db", "fast".into())
    });
    for s in ["inf", "-inf", "nan"] {
        accepted(&format!("sqnr_db \"{s}\""), &|r| {
            set(r, "/targets/0/outputs/0/sqnr_db", s.into())
        });
    }
    // Required fields removed.
    rejected("no exit_code", &|r| remove(r, "", "exit_code"));
    rejected("a target without status", &|r| remove(r, "/targets/0", "status"));
    rejected("an output without sqnr_db", &|r| {
        remove(r, "/targets/0/outputs/0", "sqnr_db")
    });
    rejected("a rule without origin", &|r| remove(r, "/gate/rules/0", "origin"));
    // A nullable field must be present, even as null; an optional one may be absent.
    rejected("a target without error", &|r| remove(r, "/targets/0", "error"));
    accepted("a target without placement", &|r| remove(r, "/targets/0", "placement"));
    // Enumerations and exit codes.
    rejected("status \"fine\"", &|r| set(r, "/targets/0/status", "fine".into()));
    rejected("exit_code 5", &|r| set(r, "/exit_code", 5.into()));
    rejected("a negative element count", &|r| {
        set(r, "/targets/0/outputs/0/elements", (-1).into())
    });
}
