//! Writes the seed corpora of the fuzz targets from the repository's fixtures (and, for
//! `device_report`, the valid reports of each format `npu_audit::fuzzing` builds):
//! `cargo run --manifest-path fuzz/Cargo.toml --bin make_seeds` (from the repository root).
//! The corpora under `fuzz/corpus/` are committed; this regenerates their seeds.

use std::path::{Path, PathBuf};

use npu_audit::data::model::pb::{ModelProto, StringStringEntryProto};
use prost::Message;
use sha2::{Digest, Sha256};

/// The array the golden_manifest harness keeps at `outputs/s0/o0.npy`.
const HARNESS_NPY: &[u8] = npu_audit::fuzzing::GOLDEN_ARRAY;

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("fuzz/corpus").join(target);
    std::fs::create_dir_all(&dir).expect("mkdir corpus");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("write seed");
}

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = walk(Path::new(dir))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] })
        .collect()
}

fn stem(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect::<Vec<_>>()
        .join("_")
}

/// The onnx_model input: length, model, external data.
fn model_seed(model: &[u8], weights: &[u8]) -> Vec<u8> {
    let mut out = (model.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(model);
    out.extend_from_slice(weights);
    out
}

/// The model with every raw initializer moved to `weights.bin` at `location`.
fn externalized(bytes: &[u8], location: &str) -> (Vec<u8>, Vec<u8>) {
    let mut model = ModelProto::decode(bytes).expect("fixture decodes");
    let mut blob = Vec::new();
    for t in model.graph.iter_mut().flat_map(|g| g.initializer.iter_mut()) {
        let Some(raw) = t.raw_data.take().filter(|r| !r.is_empty()) else { continue };
        let entry = |k: &str, v: String| StringStringEntryProto { key: Some(k.into()), value: Some(v) };
        t.external_data = vec![
            entry("location", location.into()),
            entry("offset", blob.len().to_string()),
            entry("length", raw.len().to_string()),
        ];
        t.data_location = Some(1);
        blob.extend_from_slice(&raw);
    }
    (model.encode_to_vec(), blob)
}

fn onnx_seeds() {
    for p in files("fixtures/models", "onnx") {
        let bytes = std::fs::read(&p).expect("read model");
        put("onnx_model", &stem(&p), &model_seed(&bytes, b""));
        let (m, w) = externalized(&bytes, "weights.bin");
        put("onnx_model", &format!("{}-external", stem(&p)), &model_seed(&m, &w));
    }
    let small = std::fs::read("fixtures/models/fallback_qdq_u8.onnx").expect("read model");
    let (m, w) = externalized(&small, "../weights.bin");
    put("onnx_model", "traversal", &model_seed(&m, &w));
    let (m, _) = externalized(&small, "weights.bin");
    put("onnx_model", "short-external", &model_seed(&m, b"\x00\x01"));
}

fn tensor_seeds() {
    for p in files("golden", "npy").into_iter().chain(files("fixtures/inputs", "npz")) {
        put("tensor_files", &stem(&p), &std::fs::read(&p).expect("read array"));
    }
    put("tensor_files", "harness", HARNESS_NPY);
}

fn golden_seeds() {
    let sha = format!("{:x}", Sha256::digest(HARNESS_NPY));
    let manifest = serde_json::json!({
        "schema_version": 1,
        "tool_version": "0.1.0",
        "reference_model": {"file": "m.onnx", "sha256": "00", "size_bytes": 1},
        "runtime": {"package": "onnxruntime", "version": "1.31.1", "optimization": "disable", "intra_threads": 1},
        "input_spec": {"source": "generated", "samples": 1},
        "samples": [{
            "inputs": [{"name": "x", "file": "outputs/s0/o0.npy", "dtype": "float32", "shape": [2], "sha256": sha}],
            "outputs": [{"name": "y", "file": "outputs/s0/o0.npy", "dtype": "float32", "shape": [2], "sha256": sha}]
        }]
    });
    put("golden_manifest", "harness", &serde_json::to_vec_pretty(&manifest).expect("json"));
    for p in files("golden", "json") {
        put("golden_manifest", &stem(&p), &std::fs::read(&p).expect("read manifest"));
    }
}

fn policy_seeds() {
    let doc = std::fs::read_to_string("docs/policy.md").expect("read docs/policy.md");
    for (i, block) in doc.split("```toml\n").skip(1).enumerate() {
        let text = block.split("```").next().unwrap_or_default();
        put("policy_file", &format!("docs-{i}"), text.as_bytes());
    }
    put("policy_file", "minimal", b"[defaults]\nmin_sqnr_db = 30\n");
    put(
        "policy_file",
        "regressions",
        b"mode = \"both\"\n[defaults]\nmax_sqnr_regression_db = 1.0\nmax_abs_regression = 0.01\nmax_top1_regression = 0.0\nmax_fallback_regression = 0\nmax_partitions_regression = 0\n[target.\"/qnn:sm8[0-9]+50/\"]\nrequire_bit_exact = true\nfail_on_fallback = true\n[baseline]\nreport = \"prev.json\"\n",
    );
}

/// Pipeline files: the fixture, and one per way a feed resolves or fails (by name, explicit,
/// unknown stage, later stage, unknown output, a name with a dot, one stage).
fn pipeline_seeds() {
    let fixture = std::fs::read("fixtures/real/ppocr_cls_pipeline.toml").expect("read the pipeline fixture");
    put("pipeline_file", "fixture", &fixture);
    let stage = |name: &str, feeds: &str| format!("[[stage]]\nname = \"{name}\"\nmodel = \"m.onnx\"\n{feeds}\n");
    let cases = [
        ("by-name", stage("a", "") + &stage("b", "")),
        ("explicit", stage("a", "") + &stage("b", "feeds = { x = \"a.y\" }")),
        ("three", stage("a", "") + &stage("b", "reference = \"r.onnx\"") + &stage("c", "feeds = { x = \"a.y\", features = \"b.features\" }")),
        ("unknown-stage", stage("a", "") + &stage("b", "feeds = { x = \"z.y\" }")),
        ("later-stage", stage("a", "") + &stage("b", "feeds = { x = \"c.y\" }") + &stage("c", "")),
        ("self", stage("a", "") + &stage("b", "feeds = { x = \"b.y\" }")),
        ("unknown-output", stage("a", "") + &stage("b", "feeds = { x = \"a.nope\" }")),
        ("unknown-input", stage("a", "") + &stage("b", "feeds = { nope = \"a.y\" }")),
        ("no-dot", stage("a", "") + &stage("b", "feeds = { x = \"ay\" }")),
        ("dotted-name", stage("a.b", "") + &stage("c", "")),
        ("duplicate", stage("a", "") + &stage("a", "")),
        ("first-fed", stage("a", "feeds = { x = \"a.y\" }") + &stage("b", "")),
        ("one-stage", stage("a", "")),
        ("unknown-key", stage("a", "extra = 1") + &stage("b", "")),
    ];
    for (name, text) in cases {
        put("pipeline_file", name, text.as_bytes());
    }
}

fn report_seeds() {
    for p in files("fixtures/reports", "json").into_iter().chain(files("tests/data", "json")) {
        put("report_json", &stem(&p), &std::fs::read(&p).expect("read report"));
    }
}

fn device_report_seeds() {
    for (name, bytes) in npu_audit::fuzzing::device_report_seeds().expect("device report seeds") {
        put("device_report", &name, &bytes);
    }
}

/// Generation specs: the tests' eight, the docs' example, one per way check_text refuses one; and
/// tokenizer files: the tests' WordLevel one whole and cut, and small hand-written ones.
fn generation_spec_seeds() {
    for p in files("tests/data/generation", "toml") {
        put("generation_spec", &stem(&p), &std::fs::read(&p).expect("read spec"));
    }
    let tokenizer = std::fs::read("tests/data/generation/tokenizer.json").expect("read tokenizer");
    put("generation_spec", "tokenizer", &tokenizer);
    put("generation_spec", "tokenizer-cut", &tokenizer[..tokenizer.len() / 2]);
    let base = std::fs::read_to_string("tests/data/generation/tiny_u8.toml").expect("read spec");
    let cases = [
        ("dynamic-with-kv", base.replace("form = \"static\"", "form = \"dynamic\"")),
        ("no-kv", base.replace("kv_length = 12\n", "")),
        ("zero-kv", base.replace("kv_length = 12", "kv_length = 0")),
        ("zero-new", base.replace("max_new_tokens = 8", "max_new_tokens = 0")),
        ("unknown-key", base.replace("[parts]", "extra = 1\n[parts]")),
        ("unknown-part", base.replace("[parts]", "[parts]\nhead = \"h.onnx\"")),
        ("missing-part", base.replace("step = \"step_u8.onnx\"", "")),
        ("decoder-only", base.replace("encoder-decoder", "decoder-only")),
        ("huge-new", base.replace("max_new_tokens = 8", "max_new_tokens = 18446744073709551615")),
        ("negative-id", base.replace("suppress_tokens = [0, 2, 3]", "suppress_tokens = [-1]")),
    ];
    for (name, text) in cases {
        put("generation_spec", name, text.as_bytes());
    }
    let word_level = |vocab: &str| {
        format!(
            "{{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":null,\"post_processor\":null,\"decoder\":null,\"model\":{{\"type\":\"WordLevel\",\"vocab\":{vocab},\"unk_token\":\"a\"}}}}"
        )
    };
    put("generation_spec", "tokenizer-tiny", word_level("{\"a\":0,\"</s>\":1}").as_bytes());
    put("generation_spec", "tokenizer-gap", word_level("{\"a\":0,\"b\":63}").as_bytes());
    put("generation_spec", "tokenizer-unk-missing", word_level("{\"b\":0}").as_bytes());
}

fn main() {
    generation_spec_seeds();
    onnx_seeds();
    tensor_seeds();
    golden_seeds();
    policy_seeds();
    pipeline_seeds();
    report_seeds();
    device_report_seeds();
}
