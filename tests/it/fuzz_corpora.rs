//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`, minimized by cargo-fuzz) and the
//! inputs that once crashed a harness (`fuzz/regressions/<target>/`) through the same harnesses
//! the fuzzers run (`npu_audit::fuzzing`), on the stable toolchain: every input must return
//! normally. This is how a crash found by fuzzing and fixed stays fixed.

use std::path::{Path, PathBuf};

const TARGETS: &[&str] = &[
    "onnx_model",
    "tensor_files",
    "golden_manifest",
    "policy_file",
    "pipeline_file",
    "report_json",
    "device_report",
    "eval_set",
    "eval_shards",
    "generation_spec",
];

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.map(|e| e.expect("entry").path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

fn replay(target: &str, data: &[u8], scratch: &Path) {
    match target {
        "onnx_model" => npu_audit::fuzzing::onnx_model(data, scratch),
        "tensor_files" => npu_audit::fuzzing::tensor_files(data),
        "golden_manifest" => npu_audit::fuzzing::golden_manifest(data, scratch),
        "policy_file" => npu_audit::fuzzing::policy_file(data),
        "pipeline_file" => npu_audit::fuzzing::pipeline_file(data),
        "report_json" => npu_audit::fuzzing::report_json(data),
        "device_report" => npu_audit::fuzzing::device_report(data, scratch),
        "eval_set" => npu_audit::fuzzing::eval_set(data, scratch),
        "eval_shards" => npu_audit::fuzzing::eval_shards(data),
        "generation_spec" => npu_audit::fuzzing::generation_spec(data),
        other => panic!("unknown fuzz target {other}"),
    }
}

#[test]
fn every_committed_fuzz_input_is_handled_without_a_panic() {
    for target in TARGETS {
        let corpus = inputs("corpus", target);
        assert!(
            corpus.len() >= 20,
            "fuzz/corpus/{target} has {} inputs; the committed corpus is missing",
            corpus.len()
        );
        let scratch = tempfile::tempdir().expect("tempdir");
        for file in corpus.iter().chain(&inputs("regressions", target)) {
            let data = std::fs::read(file).expect("read corpus input");
            let outcome = std::panic::catch_unwind(|| replay(target, &data, scratch.path()));
            assert!(outcome.is_ok(), "{target}: {} panicked", file.display());
        }
    }
}
