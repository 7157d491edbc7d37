//! Peak memory of `compare --layers all` against the depth of the model: a synthetic QDQ chain of
//! N Conv layers and one of 2N, same widths, audited on cpu (and the cpu:noopt baseline) with a
//! 16 MiB tap budget. Bounded memory means the 2N model needs at most 1.3× the peak RSS of the N
//! model. The same audits with the budget lifted (everything in one run) show what the
//! splitting saves.
//!
//! `cargo bench --bench layers_memory` prints the peak RSS (the largest single process among
//! the tool and its workers: getrusage(RUSAGE_CHILDREN) of a process that ran one audit) and
//! the wall time, median of 3 runs each.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use npu_audit::data::model::build::{Attr, GraphBuilder};
use npu_audit::data::model::slice::{value_info, MeasuredType};
use npu_audit::data::tensor::{Tensor, TensorData};

const CHANNELS: usize = 32;
const SIDE: usize = 64;

/// Deterministic weights in [-8, 8] (a 64-bit LCG; the values do not matter, only the sizes).
fn weights(seed: u64, n: usize) -> Vec<i8> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) % 17) as i8 - 8
        })
        .collect()
}

fn scalar(b: &mut GraphBuilder, name: &str, data: TensorData) {
    b.constant(name, &Tensor::new(vec![], data).expect("scalar"));
}

/// The QDQ chain (ONNX Runtime quantizer names) and its float twin.
fn chain(layers: usize, dir: &Path) -> (String, String) {
    let shape = [1, CHANNELS, SIDE, SIDE];
    let wlen = CHANNELS * CHANNELS * 9;
    let conv_attrs = || {
        vec![
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ("kernel_shape", Attr::Ints(vec![3, 3])),
        ]
    };
    let mut q = GraphBuilder::new("chain_qdq");
    let mut f = GraphBuilder::new("chain_fp32");
    q.input("x", 1, &shape);
    f.input("x", 1, &shape);
    scalar(&mut q, "x_scale", TensorData::Float32(vec![1.0 / 32.0]));
    scalar(&mut q, "x_zero_point", TensorData::Uint8(vec![128]));
    q.node(
        "QuantizeLinear",
        "x_QuantizeLinear",
        &["x", "x_scale", "x_zero_point"],
        &["x_QuantizeLinear_Output"],
        &[],
    );
    q.node(
        "DequantizeLinear",
        "x_DequantizeLinear",
        &["x_QuantizeLinear_Output", "x_scale", "x_zero_point"],
        &["x_DequantizeLinear_Output"],
        &[],
    );
    let mut prev_q = "x_DequantizeLinear_Output".to_string();
    let mut prev_f = "x".to_string();
    for l in 0..layers {
        let w = weights(l as u64, wlen);
        let wname = format!("conv{l}.weight");
        q.constant(
            &format!("{wname}_quantized"),
            &Tensor::new(vec![CHANNELS, CHANNELS, 3, 3], TensorData::Int8(w.clone())).expect("w"),
        );
        scalar(
            &mut q,
            &format!("{wname}_scale"),
            TensorData::Float32(vec![1.0 / 256.0]),
        );
        scalar(&mut q, &format!("{wname}_zero_point"), TensorData::Int8(vec![0]));
        let wdq = format!("{wname}_DequantizeLinear_Output");
        q.node(
            "DequantizeLinear",
            &format!("{wname}_DequantizeLinear"),
            &[
                &format!("{wname}_quantized"),
                &format!("{wname}_scale"),
                &format!("{wname}_zero_point"),
            ],
            &[&wdq],
            &[],
        );
        f.constant(
            &wname,
            &Tensor::new(
                vec![CHANNELS, CHANNELS, 3, 3],
                TensorData::Float32(w.iter().map(|&v| v as f32 / 256.0).collect()),
            )
            .expect("w"),
        );
        let out = format!("conv{l}_out");
        q.node("Conv", &format!("conv{l}"), &[&prev_q, &wdq], &[&out], &conv_attrs());
        f.node("Conv", &format!("conv{l}"), &[&prev_f, &wname], &[&out], &conv_attrs());
        scalar(&mut q, &format!("{out}_scale"), TensorData::Float32(vec![1.0 / 16.0]));
        scalar(&mut q, &format!("{out}_zero_point"), TensorData::Uint8(vec![128]));
        let qo = format!("{out}_QuantizeLinear_Output");
        let dqo = format!("{out}_DequantizeLinear_Output");
        q.node(
            "QuantizeLinear",
            &format!("{out}_QuantizeLinear"),
            &[&out, &format!("{out}_scale"), &format!("{out}_zero_point")],
            &[&qo],
            &[],
        );
        q.node(
            "DequantizeLinear",
            &format!("{out}_DequantizeLinear"),
            &[&qo, &format!("{out}_scale"), &format!("{out}_zero_point")],
            &[&dqo],
            &[],
        );
        prev_q = dqo;
        prev_f = out;
    }
    q.output(&prev_q);
    f.output(&prev_f);
    let qpath = dir.join(format!("chain{layers}_qdq.onnx"));
    let fpath = dir.join(format!("chain{layers}_fp32.onnx"));
    let typed = MeasuredType {
        elem_type: 1,
        shape: shape.to_vec(),
    };
    for (b, p) in [(q, &qpath), (f, &fpath)] {
        let mut model = b.finish();
        if let Some(g) = model.graph.as_mut() {
            for o in g.output.iter_mut() {
                *o = value_info(o.name.as_deref().unwrap_or(""), Some(&typed));
            }
        }
        std::fs::write(p, prost::Message::encode_to_vec(&model)).expect("write model");
    }
    (qpath.display().to_string(), fpath.display().to_string())
}

/// Runs one audit in a child of this process and returns (peak RSS MiB, seconds).
fn measure(model: &str, reference: &str, tap_memory: &str) -> (f64, f64) {
    let start = Instant::now();
    let out = Command::new(std::env::current_exe().expect("exe"))
        .env("LAYERS_MEMORY_CHILD", "1")
        .args([model, reference, tap_memory])
        .output()
        .expect("child");
    let secs = start.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let kib: f64 = text
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("child said {text:?}, {}", String::from_utf8_lossy(&out.stderr)));
    (kib / 1024.0, secs)
}

/// In the child: one audit, then the largest RSS among the processes it waited for.
fn child(args: &[String]) {
    let exe = env!("CARGO_BIN_EXE_npu-audit");
    let status = Command::new(exe)
        .args([
            "compare",
            &args[0],
            "--reference",
            &args[1],
            "-t",
            "cpu",
            "--layers",
            "all",
            "--tap-memory",
            &args[2],
            "--fingerprint",
            "off",
            "--format",
            "json",
            "--jobs",
            "1",
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("npu-audit");
    assert!(status.code().is_some_and(|c| c <= 1), "audit failed: {status}");
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u
    };
    println!("{}", usage.ru_maxrss);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if std::env::var_os("LAYERS_MEMORY_CHILD").is_some() {
        child(&args);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 16;
    let small = chain(n, dir.path());
    let large = chain(2 * n, dir.path());
    let act = CHANNELS * SIDE * SIDE;
    println!(
        "synthetic QDQ Conv chains, activations [1,{CHANNELS},{SIDE},{SIDE}] ({} KiB of codes, {} KiB float per layer); cpu + cpu:noopt; --jobs 1; median of 3",
        act / 1024,
        act * 4 / 1024
    );
    for budget in ["16M", "4G"] {
        let mut rows = Vec::new();
        for (layers, (q, f)) in [(n, &small), (2 * n, &large)] {
            let runs: Vec<(f64, f64)> = (0..3).map(|_| measure(q, f, budget)).collect();
            let rss = median(runs.iter().map(|r| r.0).collect());
            let secs = median(runs.iter().map(|r| r.1).collect());
            println!("  --tap-memory {budget:>3}  {layers:>3} layers: peak RSS {rss:7.1} MiB, {secs:6.2} s");
            rows.push(rss);
        }
        println!(
            "  --tap-memory {budget:>3}  ratio 2N/N peak RSS: {:.2} (target <= 1.30 with a budget below the model's taps)",
            rows[1] / rows[0]
        );
    }
}
