use std::path::Path;

use super::*;

fn parse(text: &str) -> Result<Policy> {
    Policy::parse(text, "npu-audit.toml", Path::new("/cfg"))
}

/// The policy's allowed failures as written.
fn allowed(p: &Policy) -> Vec<&str> {
    p.allow_failure.iter().map(|a| a.text.as_str()).collect()
}

fn error(text: &str) -> String {
    match parse(text).and_then(|p| p.with_flags(&Thresholds::default(), &[], None)) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => format!("{e:#}"),
    }
}

const EXAMPLE: &str = r#"
version = 1
targets = ["cpu", "qnn:sm8650", "qnn:sm8850"]
allow_failure = ["openvino"]

[groups]
flagship = ["qnn:sm8650", "qnn:sm8750"]

[defaults]
min_sqnr_db = 30
max_abs = 0.05

[defaults.outputs.probs]
max_abs = 0.02
min_top1_agreement = 0.99

[target."qnn:*"]
min_sqnr_db = 25
max_fallback_nodes = 0

[target.flagship]
min_sqnr_db = 27

[target.flagship.outputs.probs]
max_abs = 0.03
"#;

#[test]
fn sections_apply_from_broad_to_specific_in_file_order() {
    let p = parse(EXAMPLE).unwrap();
    let targets: Vec<&str> = p.targets.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(targets, ["cpu", "qnn:sm8650", "qnn:sm8850"]);
    assert_eq!(allowed(&p), ["openvino"]);
    let value = |l: &Option<Limit<f64>>| l.as_ref().map(|l| (l.value, l.origin.clone()));
    // cpu: only [defaults].
    let cpu = p.limits("cpu", Some("probs"));
    assert_eq!(value(&cpu.min_sqnr_db), Some((30.0, "npu-audit.toml:10".into())));
    assert_eq!(value(&cpu.max_abs), Some((0.02, "npu-audit.toml:14".into())));
    assert!(cpu.max_fallback_nodes.is_none());
    // sm8850: qnn:* but not the group.
    let sm8850 = p.limits("qnn:sm8850", Some("logits"));
    assert_eq!(value(&sm8850.min_sqnr_db), Some((25.0, "npu-audit.toml:18".into())));
    assert_eq!(value(&sm8850.max_abs), Some((0.05, "npu-audit.toml:11".into())));
    assert_eq!(sm8850.max_fallback_nodes.as_ref().map(|l| l.value), Some(0));
    // sm8650: the group comes later in the file than qnn:*, so it wins; its probs override.
    let sm8650 = p.limits("qnn:sm8650", Some("probs"));
    assert_eq!(value(&sm8650.min_sqnr_db), Some((27.0, "npu-audit.toml:22".into())));
    assert_eq!(value(&sm8650.max_abs), Some((0.03, "npu-audit.toml:25".into())));
    assert_eq!(
        value(&sm8650.min_top1_agreement),
        Some((0.99, "npu-audit.toml:15".into()))
    );
    assert!(sm8650.min_top1_agreement.as_ref().unwrap().per_output);
    // Target-level limits do not take output sections.
    assert_eq!(
        value(&p.limits("qnn:sm8650", None).max_abs),
        Some((0.05, "npu-audit.toml:11".into()))
    );
    assert!(p.is_active());
    assert!(p.check_outputs(&["logits".into(), "probs".into()]).is_ok());
    let e = format!("{:#}", p.check_outputs(&["logits".into()]).unwrap_err());
    assert_eq!(
        e,
        "npu-audit.toml:13: 'probs' is not an output of the model (outputs: logits)"
    );
}

#[test]
fn flags_override_the_file_and_name_themselves() {
    let p = parse(EXAMPLE)
        .unwrap()
        .with_flags(
            &Thresholds {
                min_sqnr_db: Some(40.0),
                max_partitions: Some(2),
                ..Thresholds::default()
            },
            &[crate::data::target::TargetPattern::parse("qnn:sm8850").unwrap()],
            None,
        )
        .unwrap();
    let l = p.limits("qnn:sm8650", Some("probs"));
    assert_eq!(
        l.min_sqnr_db.as_ref().map(|l| (l.value, l.origin.as_str())),
        Some((40.0, "--min-sqnr"))
    );
    assert_eq!(l.max_abs.as_ref().map(|l| l.value), Some(0.03));
    assert_eq!(
        l.max_partitions.as_ref().map(|l| l.origin.as_str()),
        Some("--max-partitions")
    );
    assert_eq!(allowed(&p), ["openvino", "qnn:sm8850"]);
}

#[test]
fn errors_point_at_the_line_and_column() {
    assert_eq!(
        error("[defaults]\nmin_sqnr_db = 30\nmin_sqn = 3\n"),
        "npu-audit.toml:3:1: unknown field `min_sqn`, expected one of `min_sqnr_db`, `max_abs`, `min_top1_agreement`, `require_bit_exact`, `max_sqnr_regression_db`, `max_abs_regression`, `max_top1_regression`, `max_fallback_nodes`, `max_partitions`, `fail_on_fallback`, `max_fallback_regression`, `max_partitions_regression`, `max_layer_sqnr_loss_db`, `min_decision_agreement`, `max_divergence_step`, `min_accuracy`, `max_accuracy_drop`, `max_kld_mean`, `max_kld_p99`, `min_same_top`, `max_ppl_ratio`, `allow_failure`, `outputs`"
    );
    assert_eq!(
        error("[defaults]\nmax_abs = \"small\"\n"),
        "npu-audit.toml:2:11: invalid type: string \"small\", expected f64"
    );
    assert!(error("[defaults\nmax_abs = 1\n").starts_with("npu-audit.toml:1:"));
    assert_eq!(
        error("[defaults]\nmax_fallback_nodes = -1\n"),
        "npu-audit.toml:2:22: invalid value: integer `-1`, expected u64"
    );
    assert_eq!(
        error("[defaults.outputs.probs]\nmax_partitions = 1\n")
            .split(',')
            .next()
            .unwrap(),
        "npu-audit.toml:2:1: unknown field `max_partitions`"
    );
    assert_eq!(
        error("[defaults]\nmin_top1_agreement = 99\n"),
        "npu-audit.toml:2:22: min_top1_agreement must be between 0 and 1, not 99"
    );
    assert_eq!(
        error("[defaults]\nmax_abs = -0.5\n"),
        "npu-audit.toml:2:11: max_abs must be a number >= 0, not -0.5"
    );
    let e = error("\n[target.\"qnn:sm9999\"]\nmin_sqnr_db = 1\n");
    assert!(e.starts_with("npu-audit.toml:2:9: ") && e.contains("sm9999"), "{e}");
    assert!(
        error("[target.\"tpu*\"]\nmin_sqnr_db = 1\n").starts_with("npu-audit.toml:1:9: 'tpu*' matches no known target")
    );
    assert!(parse("allow_failure = [\"qnn:sm8650@2.3.0*\"]\n").is_ok());
    assert!(error("allow_failure = [\"tpu@2.3.0*\"]\n").contains("'tpu@2.3.0*' matches no known target"));
    assert!(error("targets = [\"cpu\", \"gpu9\"]\n").starts_with("npu-audit.toml:1:19: unknown target 'gpu9'"));
    assert_eq!(
        error("version = 2\n"),
        "npu-audit.toml:1:11: version 2 is not supported (only 1)"
    );
    assert_eq!(
        error("mode = \"strict\"\n"),
        "npu-audit.toml:1:8: mode 'strict' is not one of absolute, baseline, both"
    );
    assert!(error("mode = \"baseline\"\n").starts_with("npu-audit.toml:1: mode = \"baseline\" needs a previous report"));
    assert!(error("[groups]\ncpu = [\"qnn:sm8650\"]\n").starts_with("npu-audit.toml:2:1: group name 'cpu'"));
    assert!(error("[defaults]\nallow_failure = true\n").starts_with("npu-audit.toml:2:17: allow_failure in [defaults]"));
}

#[test]
fn a_target_section_can_allow_failure_and_baseline_paths_are_relative_to_the_file() {
    let p = parse("[target.\"openvino\"]\nallow_failure = true\n[baseline]\nreport = \"prev/report.json\"\n").unwrap();
    assert_eq!(allowed(&p), ["openvino"]);
    assert_eq!(p.mode, Mode::Both);
    let (path, at) = p.baseline_report.clone().unwrap();
    assert_eq!(path, Path::new("/cfg/prev/report.json"));
    assert_eq!(at, "npu-audit.toml:4");
    assert!(p.is_active());
    assert!(!Policy::empty().is_active());
}
