//! The fuzz harnesses: what each parser of a stranger's file does with arbitrary bytes, from the
//! first byte read to everything the tool derives from what parsed. The `fuzz/` crate
//! (cargo-fuzz, coverage-guided) calls these, and `tests/it/fuzz_corpora.rs` replays the committed
//! corpora through the same functions on the stable toolchain, so a crash the fuzzer found and
//! fixed stays fixed. Every function must return normally on any input: an error is fine, a
//! panic, a hang or an unbounded allocation is a bug.

use std::collections::HashMap;
use std::path::Path;

use crate::data::device::{identify_device, DeviceInfo, DeviceReport, LogFindings, ReportDefaults};
use crate::data::model::topology::Topology;
use crate::data::model::{constant, derive, load_model_bytes, rewrite, Dim, Signature, TensorInfo};
use crate::data::tensor::{npz_bytes, read_npz_bytes, read_npz_bytes_checked, DType, Tensor, TensorData};
use crate::execution::golden::Golden;
use crate::judge::policy::Policy;
use crate::render;
use crate::report::json;

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

/// `pipeline`'s file: TOML, stage names, paths, then every feed resolved against fixed
/// signatures (each stage takes `x` and `features`, float [1,4], and returns `features` and
/// `y`), so every resolution path runs without models on disk.
pub fn pipeline_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(named) = crate::commands::pipeline::file::parse(text, Path::new(".")) else {
        return;
    };
    let info = |name: &str| TensorInfo {
        name: name.into(),
        dtype: DType::Float32,
        dims: Some(vec![Dim::Fixed(1), Dim::Fixed(4)]),
    };
    let sig = Signature {
        inputs: vec![info("x"), info("features")],
        outputs: vec![info("features"), info("y")],
        softmax_axes: HashMap::new(),
    };
    let sigs = vec![sig; named.len()];
    let _ = crate::commands::pipeline::file::resolve(named, &sigs);
}

/// An eval set (`eval --dataset`): `data`'s first byte says what the rest is: `0` labels.csv and
/// `1` labels.jsonl beside two samples `a` and `b`; `2` a stacked `.npz` (its `labels` member
/// too); `3` one sample's `.npz` in a directory. The set is opened, every sample checked against a
/// model taking `x`, float32 [1, 4], and read.
pub fn eval_set(data: &[u8], dir: &Path) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let set = dir.join("set");
    let _ = std::fs::remove_dir_all(&set);
    let _ = std::fs::remove_file(dir.join("set.npz"));
    if std::fs::create_dir_all(&set).is_err() {
        return;
    }
    let x = Tensor::new(vec![1, 4], TensorData::Float32(vec![1.0, 2.0, 3.0, 4.0])).expect("a fixed tensor");
    let sample = npz_bytes(&[("x".to_string(), &x)]);
    let write = |name: &str, bytes: &[u8]| std::fs::write(set.join(name), bytes).is_ok();
    let path = match kind % 4 {
        0 | 1 => {
            let Ok(sample) = sample else { return };
            let labels = if kind % 4 == 0 { "labels.csv" } else { "labels.jsonl" };
            if !(write("a.npz", &sample) && write("b.npz", &sample) && write(labels, rest)) {
                return;
            }
            set.clone()
        }
        2 => {
            let file = dir.join("set.npz");
            if std::fs::write(&file, rest).is_err() {
                return;
            }
            file
        }
        _ => {
            if !write("a.npz", rest) {
                return;
            }
            set.clone()
        }
    };
    let Ok(dataset) = crate::data::dataset::Dataset::open(&path, None, Some(8)) else {
        return;
    };
    let x = TensorInfo {
        name: "x".into(),
        dtype: DType::Float32,
        dims: Some(vec![Dim::Fixed(1), Dim::Fixed(4)]),
    };
    let sig = Signature {
        inputs: vec![x.clone()],
        outputs: vec![x],
        softmax_axes: HashMap::new(),
    };
    if dataset.check(&sig).is_ok() {
        if let Ok(samples) = dataset.samples(&sig, 0) {
            for s in samples.take(8) {
                let _ = s;
            }
        }
    }
}

/// A JSON report (`merge`, `render`, baseline mode): parsing as a compare report and as any kind
/// (`render`'s reading), the schema version checks, then every renderer of its kind on what parsed.
pub fn report_json(data: &[u8]) {
    if let Ok(report) = json::from_bytes(data.to_vec(), "fuzz.json") {
        compare_renderers(&report);
    }
    let Ok(any) = json::any_from_bytes(data.to_vec(), "fuzz.json") else {
        return;
    };
    match any {
        json::AnyReport::Compare(r) => compare_renderers(&r),
        json::AnyReport::Eval(r) => {
            let _ = (render::eval::table_text(&r), render::eval::markdown(&r));
            let _ = render::html::eval::render(&r);
        }
        json::AnyReport::Triage(r) => {
            let _ = (render::triage::render(&r), render::triage_markdown::render(&r));
            let _ = render::html::triage::render(&r);
        }
        json::AnyReport::Matrix(r) => {
            let _ = (render::matrix::table(&r), render::matrix::markdown(&r));
            let _ = (render::html::matrix::render(&r), render::matrix::dispatch_json(&r));
        }
        json::AnyReport::Pipeline(r) => {
            let _ = (render::pipeline::table(&r), render::pipeline::markdown(&r));
        }
        json::AnyReport::Repro(r) => {
            let _ = (render::repro::table_text(&r), render::repro::markdown(&r));
        }
        json::AnyReport::Generation(r) => {
            let _ = (render::generation::table_text(&r), render::generation::markdown(&r));
            // Either task's renderers, whatever the report's task says.
            let _ = (render::corpus::table_text(&r), render::corpus::markdown(&r));
            let _ = (render::html::generation::render(&r), render::html::corpus::render(&r));
        }
    }
}

/// A generation spec's TOML, read as `eval SPEC.toml` reads it before opening the files it names
/// (`generation::spec::check_text`), and the same bytes as the spec's tokenizer file (the
/// `tokenizers` crate's parser): then every id below 64 decoded, the end token looked up.
pub fn generation_spec(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::commands::generation::spec::check_text(text);
    }
    use crate::commands::generation::spec::{quietly, tokenizer_from_bytes};
    if let Ok(t) = tokenizer_from_bytes(data.to_vec()) {
        let ids: Vec<u32> = (0..64).collect();
        let _ = quietly(|| (t.decode(&ids, true), t.decode(&ids, false)));
        let _ = (t.token_to_id("</s>"), t.id_to_token(1), t.get_vocab_size(true));
    }
}

/// Every renderer of a compare report.
fn compare_renderers(report: &crate::report::compare::Report) {
    let _ = render::table::render(report);
    let _ = render::markdown::render(report);
    let _ = render::junit::render(report);
    let _ = render::html::render(report);
    let _ = render::explorer::render(report);
}

/// An eval shard's file (`merge`): parsing, then the merge of it as every shard of its split (the
/// same file under each index, at most 8), then every eval renderer on what merged.
pub fn eval_shards(data: &[u8]) {
    let Ok(file) = crate::commands::eval::shard::from_bytes(data, "fuzz.json") else {
        return;
    };
    let count = file.shard.count.clamp(1, 8);
    let parts = (1..=count)
        .map(|index| {
            let mut part = file.clone();
            part.shard.index = index;
            (std::path::PathBuf::from(format!("shard{index}.json")), part)
        })
        .collect();
    let opts = crate::commands::merge::eval::EvalMergeOptions {
        parts,
        allow_other_threads: false,
        allow_other_hosts: false,
    };
    if let Ok(report) = crate::commands::merge::eval::merge(&opts) {
        let _ = render::eval::table_text(&report);
        let _ = render::eval::markdown(&report);
        let _ = render::html::eval::render(&report);
    }
}

/// The model signature device reports are checked against in [`device_report`]: an input with a
/// dynamic batch axis, a float output and a `uint8` output whose name `qnn-net-run` rewrites.
fn report_signature() -> Signature {
    let t = |name: &str, dtype: DType, dims: Vec<Dim>| TensorInfo {
        name: name.to_string(),
        dtype,
        dims: Some(dims),
    };
    Signature {
        inputs: vec![t(
            "x",
            DType::Float32,
            vec![Dim::Dynamic(Some("batch".into())), Dim::Fixed(2)],
        )],
        outputs: vec![
            t("y", DType::Float32, vec![Dim::Fixed(2)]),
            t("cls/prob:0", DType::Uint8, vec![Dim::Fixed(1), Dim::Fixed(3)]),
        ],
        softmax_axes: HashMap::new(),
    }
}

/// Splits the input into (kind, bytes) entries: a kind byte, a 16-bit little-endian length, then
/// that many bytes (fewer at the end); at most 64 entries.
fn entries(mut data: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while let [kind, a, b, rest @ ..] = data {
        let n = usize::from(u16::from_le_bytes([*a, *b])).min(rest.len());
        out.push((*kind, &rest[..n]));
        data = &rest[n..];
        if out.len() == 64 {
            break;
        }
    }
    out
}

/// The input of [`device_report`] for a variant and its entries (what [`entries`] splits).
pub fn device_report_input(variant: u8, parts: &[(u8, &[u8])]) -> Vec<u8> {
    let mut out = vec![variant];
    for (kind, bytes) in parts {
        let bytes = &bytes[..bytes.len().min(usize::from(u16::MAX))];
        out.push(*kind);
        out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// Writes `bytes` at `dir/rel`, creating its directory; false when the disk refuses.
fn put(dir: &Path, rel: &str, bytes: &[u8]) -> bool {
    let path = dir.join(rel);
    path.parent().is_some_and(|p| std::fs::create_dir_all(p).is_ok()) && std::fs::write(path, bytes).is_ok()
}

/// Lays the input out as a report under `dir` for variants 0–3 and reads it.
fn read_variant(variant: u8, rest: &[u8], dir: &Path) -> Option<anyhow::Result<DeviceReport>> {
    let defaults = ReportDefaults {
        chipset: Some("Samsung Galaxy S24".into()),
        ..Default::default()
    };
    let sig = report_signature();
    let path = match variant {
        0 => put(dir, "report.zip", rest).then(|| dir.join("report.zip"))?,
        1 => {
            let names = ["device.json", "outputs.npz", "inputs.npz", "logs/log.txt", "logs"];
            for (i, (kind, bytes)) in entries(rest).into_iter().enumerate() {
                let name = names[usize::from(kind) % names.len()].replace("log.txt", &format!("log{i}.txt"));
                put(dir, &name, bytes);
            }
            dir.to_path_buf()
        }
        2 => {
            for (kind, bytes) in entries(rest) {
                put(dir, ["report.npz", "report.device.json"][usize::from(kind % 2)], bytes);
            }
            dir.join("report.npz")
        }
        _ => {
            for (kind, bytes) in entries(rest) {
                // The first byte numbers the inference (Result_0 .. Result_3), the rest is the file.
                let (n, raw) = bytes.split_first().map_or((0, bytes), |(n, r)| (n % 4, r));
                match kind % 3 {
                    0 => put(dir, "device.json", bytes),
                    1 => put(dir, &format!("Result_{n}/y.raw"), raw),
                    _ => put(dir, &format!("Result_{n}/cls_prob_0.raw"), raw),
                };
            }
            dir.to_path_buf()
        }
    };
    Some(crate::data::device::read_report(&path, &sig, &defaults))
}

/// What triage derives from a device's statements and logs: its chipset, the logs read and
/// cross-checked, and the JSON they are written as.
fn derive_from(info: &DeviceInfo, logs: &[(String, String)]) {
    let _ = identify_device(info);
    let mut f = LogFindings::parse(logs);
    crate::data::device::logs::cross_check(&mut f, info, Some("v2.51.0.260929181845"));
    let _ = f.reason();
    let _ = f.shows_problem();
    let _ = serde_json::to_string(&f);
}

/// Device reports (`triage`): the tool's own report as a `.zip` (variant 0) and as a directory
/// (1), an AI Hub `.npz` with its `<stem>.device.json` (2), a `qnn-net-run` `Result_N/*.raw`
/// directory with `device.json` (3), all checked against a fixed small signature; `device.json`
/// alone with the chipset it identifies (4); logs with a `device.json` to cross-check (5). The
/// first byte picks the variant; the rest is the archive (0) or [`entries`] (others). Whatever
/// parses goes through what triage derives from it. `dir` is a scratch directory.
pub fn device_report(data: &[u8], dir: &Path) {
    let Some((variant, rest)) = data.split_first() else {
        return;
    };
    let dir = dir.join("report");
    let _ = std::fs::remove_dir_all(&dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    match variant % 6 {
        4 => {
            if let Ok(info) = DeviceInfo::parse(rest) {
                derive_from(&info, &[]);
            }
        }
        5 => {
            let parts = entries(rest);
            let info = parts
                .first()
                .and_then(|(_, b)| DeviceInfo::parse(b).ok())
                .unwrap_or_default();
            let logs: Vec<(String, String)> = parts
                .iter()
                .skip(1)
                .enumerate()
                .map(|(i, (_, b))| (format!("log{i}"), String::from_utf8_lossy(b).into_owned()))
                .collect();
            derive_from(&info, &logs);
        }
        v => {
            if let Some(Ok(report)) = read_variant(v, rest, &dir) {
                derive_from(&report.device, &report.logs);
            }
        }
    }
}

/// A `device.json` every seed carries (its chipset, runtime and options agree with the log).
const SEED_DEVICE: &str = r#"{"manufacturer": "samsung", "device_model": "SM-S921B", "soc_model": "SM8650",
"board_platform": "pineapple", "os": "Android 14", "app_version": "3.2.1", "onnxruntime_version": "1.31.1",
"ep": "QNNExecutionProvider", "ep_options": {"htp_arch": "75", "soc_model": "57"}, "qnn_release": "2.7.0"}"#;

/// A log with a line of each format and kind the log reader knows.
const SEED_LOG: &str = "\
11-23 10:01:02.302  1234  1250 V onnxruntime: [V:onnxruntime:, qnn_execution_provider.cc:1056 QnnEp] User specified htp_arch: 75
11-23 10:01:02.302  1234  1250 V onnxruntime: [V:onnxruntime:, qnn_execution_provider.cc:1064 QnnEp] User specified soc_model: 57
I/onnxruntime( 4321): [I:onnxruntime:, qnn_backend_manager.cc:359 LoadBackend] Found valid interface, version: 2.40.0 backend provider name: HTP_QTI_AISW backend id: 6
2026-11-23 22:44:32.869626776 [V:onnxruntime:, qnn_backend_manager.cc:2154 SetupBackend] Backend build version: v2.51.0.260929181845
ORT Build Info: git-branch=rel-1.31.1, git-commit-id=0123abcd, build type=Release
Loading EP library: \"/data/app/lib/onnxruntime-qnn-2.7.0/libonnxruntime_providers_qnn.so\" as a plugin
I/onnxruntime: [I:onnxruntime:, qnn_execution_provider.cc:807 GetSupportedNodes] Validation FAILED for 1 nodes in NodeUnit (Gelu) :
I/onnxruntime: \tOperator type: Gelu Node name: /encoder/layers.0/act Node index: 12
I/onnxruntime: \tREASON : QNN EP: Gelu with approximate=tanh is not supported
[W:onnxruntime:, qnn_execution_provider.cc:210 IsNodeSupported] Erf node `/l0/Erf` is not supported: no
[E:onnxruntime:, qnn_execution_provider.cc:640 GetCapability] Unsupported nodes in QNN EP: { name: /l0/Erf, type: Erf },
I/onnxruntime: [I:onnxruntime:, qnn_execution_provider.cc:1152 GetCapability] Number of partitions supported by QNN EP: 3, number of nodes in the graph: 60, number of nodes supported by QNN: 58
V/onnxruntime( 4321): [V:onnxruntime:, qnn_backend_manager.cc:466 QnnLogging] QnnDsp <I> QnnGraph_finalize done. status 0x3ea
E/onnxruntime: [E:onnxruntime:, qnn_model.cc:387 FinalizeGraphs] Failed to finalize QNN graph. Error code: 1002
\x1b[1;31m2026-11-23 22:44:33.362116943 [E:onnxruntime:, qnn_execution_provider.cc:2290 GetCapabilityImpl] QNN SetupBackend failed Unable to load backend, error:  x.so\x1b[m
2026-11-23 22:44:32.894725071 [V:onnxruntime:, session_state.cc:1581 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [QNNExecutionProvider]. Number of nodes: 3
2026-11-23 22:44:32.894725073 [V:onnxruntime:, session_state.cc:1581 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 2
FAIL : This session contains graph nodes that are assigned to the default CPU EP, but fallback to CPU EP has been explicitly disabled by the user.
";

/// The arrays of a valid report for [`report_signature`]: `samples` samples stacked.
fn seed_arrays(samples: usize) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let stacked = |shape: &[usize]| [&[samples][..], shape].concat();
    let y = Tensor::new(
        stacked(&[2]),
        TensorData::Float32((0..2 * samples).map(|i| i as f32 * 0.25).collect()),
    )?;
    let cls = Tensor::new(
        stacked(&[1, 3]),
        TensorData::Uint8((0..3 * samples).map(|i| (i * 40) as u8).collect()),
    )?;
    let x = Tensor::new(vec![samples, 2], TensorData::Float32(vec![0.5; 2 * samples]))?;
    let outputs = npz_bytes(&[("y".to_string(), &y), ("cls/prob:0".to_string(), &cls)])?;
    Ok((outputs, npz_bytes(&[("x".to_string(), &x)])?))
}

/// The own report as a `.zip` of its members.
fn seed_zip(members: &[(&str, &[u8])]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in members {
        zip.start_file(*name, options)?;
        zip.write_all(bytes)?;
    }
    Ok(zip.finish()?.into_inner())
}

/// Valid inputs of [`device_report`], one or more per variant (for `fuzz/make_seeds.rs`).
pub fn device_report_seeds() -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let (outputs, inputs) = seed_arrays(1)?;
    let (outputs2, _) = seed_arrays(2)?;
    let (dev, log) = (SEED_DEVICE.as_bytes(), SEED_LOG.as_bytes());
    let zip = seed_zip(&[
        ("device.json", dev),
        ("outputs.npz", &outputs),
        ("inputs.npz", &inputs),
        ("logs/", b""),
        ("logs/logcat.txt", log),
    ])?;
    // Result_<n>/ file: n, then float32 values (for the uint8 output, each one of its codes).
    let raw = |n: u8, values: &[f32]| -> Vec<u8> {
        std::iter::once(n)
            .chain(values.iter().flat_map(|v| v.to_le_bytes()))
            .collect()
    };
    let (y0, y1) = (raw(0, &[0.25, 0.5]), raw(1, &[-1.0, 2.0]));
    let (c0, c1) = (raw(0, &[3.0, 0.0, 255.0]), raw(1, &[1.0, 2.0, 3.0]));
    Ok(vec![
        (
            "own-zip".into(),
            device_report_input(0, &[]).into_iter().chain(zip).collect(),
        ),
        (
            "own-dir".into(),
            device_report_input(1, &[(0, dev), (1, &outputs), (2, &inputs), (3, log)]),
        ),
        ("aihub".into(), device_report_input(2, &[(0, &outputs2), (1, dev)])),
        ("aihub-bare".into(), device_report_input(2, &[(0, &outputs)])),
        (
            "qnn-net-run-float".into(),
            device_report_input(3, &[(0, dev), (1, &y0), (2, &c0), (1, &y1), (2, &c1)]),
        ),
        (
            "qnn-net-run-native".into(),
            device_report_input(3, &[(1, &y0), (2, &[0, 7, 8, 9])]),
        ),
        (
            "device-json".into(),
            device_report_input(4, &[])
                .into_iter()
                .chain(dev.iter().copied())
                .collect(),
        ),
        ("logs".into(), device_report_input(5, &[(0, dev), (1, log)])),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_report_seed_is_a_valid_report_of_its_variant() {
        let dir = tempfile::tempdir().unwrap();
        let seeds = device_report_seeds().unwrap();
        for (name, data) in &seeds {
            let (variant, rest) = data.split_first().unwrap();
            let scratch = dir.path().join(name);
            std::fs::create_dir_all(&scratch).unwrap();
            match variant {
                0..=3 => {
                    let report = read_variant(*variant, rest, &scratch).unwrap();
                    let report = report.unwrap_or_else(|e| panic!("{name}: {e:#}"));
                    let samples = if name == "aihub" {
                        2
                    } else {
                        1 + usize::from(name == "qnn-net-run-float")
                    };
                    assert_eq!(report.outputs.len(), samples, "{name}");
                }
                4 => assert!(DeviceInfo::parse(rest).is_ok()),
                _ => {
                    let parts = entries(rest);
                    let log = String::from_utf8_lossy(parts[1].1).into_owned();
                    let f = LogFindings::parse(&[("l".into(), log)]);
                    assert_eq!(f.fallback.partitions, Some(3));
                    assert_eq!(f.qnn_errors.len(), 1);
                }
            }
            device_report(data, dir.path());
        }
        assert_eq!(seeds.len(), 8);
    }
}
