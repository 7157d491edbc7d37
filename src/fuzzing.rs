//! The fuzz harnesses: what each parser of a stranger's file does with arbitrary bytes, from the
//! first byte read to everything the tool derives from what parsed. The `fuzz/` crate
//! (cargo-fuzz, coverage-guided) calls these, and `tests/fuzz_corpora.rs` replays the committed
//! corpora through the same functions on the stable toolchain, so a crash the fuzzer found and
//! fixed stays fixed. Every function must return normally on any input: an error is fine, a
//! panic, a hang or an unbounded allocation is a bug.

use std::collections::HashMap;
use std::path::Path;

use crate::golden::Golden;
use crate::model::topology::Topology;
use crate::model::{constant, derive, load_model_bytes, rewrite, Signature};
use crate::policy::Policy;
use crate::render;
use crate::report::json;
use crate::tensor::{read_npz_bytes, read_npz_bytes_checked, DType, Tensor};

/// The array the golden harness keeps at `outputs/s0/o0.npy` of its directory, for manifests to
/// name (the seed corpus has one with its SHA-256).
pub const GOLDEN_ARRAY: &[u8] = b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }                                                            \n\x00\x00\x80?\x00\x00\x00@";

/// The ONNX loader: decoding, structural checks, the signature, external data resolution and
/// reading, and what an audit derives from a model in its own process (constants, quantization
/// steps, the derived float reference, the topology, shape pinning). `data` is four bytes of
/// model length (little-endian), the model, then the contents of `weights.bin` beside it; `dir`
/// is a scratch directory.
pub fn onnx_model(data: &[u8], dir: &Path) {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let (model, weights) = rest.split_at((u32::from_le_bytes(*len) as usize).min(rest.len()));
    if std::fs::write(dir.join("weights.bin"), weights).is_err() {
        return;
    }
    let Ok(loaded) = load_model_bytes(&dir.join("model.onnx"), model.to_vec()) else {
        return;
    };
    let _ = loaded.external_data_hashes();
    let _ = loaded.total_bytes();
    let Some(graph) = loaded.proto.graph.as_ref() else {
        return;
    };
    for t in constant::constants(graph).values() {
        let _ = constant::tensor_values(t);
        let _ = constant::external_values(t, dir, 1 << 20);
    }
    let _ = Topology::of_graph(graph).topological_order();
    let _ = derive::derive_float_reference(&loaded);
    if let Ok(sig) = Signature::of(&loaded) {
        let _ = constant::output_steps(graph, &sig.outputs);
        let mut proto = loaded.proto.clone();
        let shapes: HashMap<String, Vec<usize>> = sig.inputs.iter().map(|i| (i.name.clone(), vec![1])).collect();
        rewrite::pin_input_shapes(&mut proto, &shapes);
    }
}

/// `.npy` and `.npz` readers: headers, element types, shapes, Fortran order, truncation, zip
/// structure and CRC, and the shape check `--inputs` makes before inflating an array.
pub fn tensor_files(data: &[u8]) {
    let _ = Tensor::read_npy_from(&mut &data[..]);
    let _ = read_npz_bytes(data.to_vec());
    let small_float = |_: &str, dtype: DType, shape: &[usize]| -> anyhow::Result<()> {
        anyhow::ensure!(dtype == DType::Float32 && shape.iter().product::<usize>() <= 1 << 16);
        Ok(())
    };
    let _ = read_npz_bytes_checked(data.to_vec(), &small_float);
}

/// A golden directory: the manifest (`data`), the paths it names (traversal, missing,
/// non-regular files) and the arrays it points at. `dir` is a scratch directory.
pub fn golden_manifest(data: &[u8], dir: &Path) {
    let array = dir.join("outputs/s0/o0.npy");
    if !array.is_file() {
        let written =
            std::fs::create_dir_all(dir.join("outputs/s0")).and_then(|_| std::fs::write(&array, GOLDEN_ARRAY));
        if written.is_err() {
            return;
        }
    }
    if std::fs::write(dir.join("manifest.json"), data).is_err() {
        return;
    }
    if let Ok(g) = Golden::load(dir) {
        let _ = g.outputs();
        let _ = g.output_names();
    }
}

/// `npu-audit.toml`: TOML, every key, target patterns and groups, the spans of error messages,
/// and the limits each target gets.
pub fn policy_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = Policy::parse(text, "fuzz.toml", Path::new(".")) {
        let targets = ["cpu".to_string(), "qnn:sm8650".to_string(), "openvino".to_string()];
        let _ = p.describe(&targets);
        for t in &targets {
            let _ = p.limits(t, Some("y"));
        }
        let _ = p.check_outputs(&["y".to_string()]);
    }
}

/// A JSON report (`merge`, `render`, baseline mode): parsing and the schema version check, then
/// every renderer on what parsed.
pub fn report_json(data: &[u8]) {
    let Ok(report) = json::from_bytes(data.to_vec(), "fuzz.json") else {
        return;
    };
    let _ = render::table::render(&report);
    let _ = render::markdown::render(&report);
    let _ = render::junit::render(&report);
    let _ = render::html::render(&report);
    let _ = render::explorer::render(&report);
}
