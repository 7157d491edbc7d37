//! The probe models: small QDQ (or float) graphs whose inputs put the value about to be rounded
//! exactly on ties and just beside them. Scales are powers of two, so the real value every input
//! code stands for, and its ratio to the output scale, are exact in f32: each candidate rounding
//! rule predicts one code and the target's code says which rule it used.
//!
//! Every probe also states its expectation: per output element, the ideal value in units of the
//! output scale before rounding (`v = x / scale`), or for float probes the result each candidate
//! arithmetic gives.

use crate::data::model::build::{Attr, GraphBuilder};
use crate::data::model::pb::ModelProto;
use crate::data::tensor::{DType, Tensor, TensorData};

use super::rounding::CodeRange;

/// What a probe measures, which decides how its outputs are classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The rounding rule applied when a value becomes a code.
    Rounding,
    /// What happens to values beyond the code range: saturation or wrap-around.
    Saturation,
    /// How close a nonlinear function's codes are to the correctly rounded ones (exact math,
    /// or a table or polynomial).
    Accuracy,
    /// Precision of a long floating-point reduction's accumulator.
    Accumulation,
    /// Precision of floating-point arithmetic and its subnormals (fp32, fp16, flushed to zero).
    Precision,
}

impl Kind {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Rounding => "rounding",
            Kind::Saturation => "saturation",
            Kind::Accuracy => "accuracy",
            Kind::Accumulation => "accumulation",
            Kind::Precision => "precision",
        }
    }
}

/// The expectation for one graph output.
#[derive(Debug, Clone)]
pub enum Expect {
    /// An integer output: the ideal value `x / scale` per element (before rounding and zero
    /// point), and the output's code range.
    Codes { ideal: Vec<f64>, range: CodeRange },
    /// A float output: what each candidate arithmetic computes, per element.
    Floats { candidates: Vec<(&'static str, Vec<f32>)> },
}

/// One probe: a generated model, its inputs, and what each output should hold.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Unique name, also the row of the fingerprint table (`requantize_u8`).
    pub id: &'static str,
    pub kind: Kind,
    /// The operator chain, for people.
    pub op: &'static str,
    /// Element type of the values being probed.
    pub dtype: &'static str,
    /// Op types that must run on the target's EP for the verdict to describe the target (not the
    /// CPU EP it fell back to).
    pub key_ops: &'static [&'static str],
    pub model: ModelProto,
    /// Graph inputs in declaration order.
    pub inputs: Vec<(String, Tensor)>,
    /// One per graph output, in order.
    pub expect: Vec<Expect>,
    /// What a correct harness must find (controls only): a wrong answer means the probe
    /// machinery, not the target, is off.
    pub control: Option<&'static str>,
}

/// Version of the probe set; a change in any probe changes it, so cached fingerprints made
/// with older probes are not reused.
pub const PROBE_SET_VERSION: u32 = 1;

/// Every probe, in report order.
pub fn all() -> Vec<Probe> {
    vec![
        quantize("u8"),
        quantize("i8"),
        quantize("u16"),
        quantize("i16"),
        requantize("u8"),
        requantize("i8"),
        requantize("u16"),
        requantize("i16"),
        conv("conv_u8", "u8", "u8"),
        conv("conv_u8_i8w", "u8", "i8"),
        conv("conv_u16_i8w", "u16", "i8"),
        matmul(),
        add(),
        mul(),
        average_pool(),
        resize(),
        nonlinear("sigmoid"),
        nonlinear("tanh"),
        nonlinear("gelu"),
        softmax(),
        saturation("u8"),
        saturation("i8"),
        accumulation(),
        precision(),
        floor_control(),
    ]
}

/// Input scale of every QDQ probe: 2^-4, so a code's real value `(q - zp) / 16` is exact.
const S_IN: f32 = 1.0 / 16.0;

fn zero_point(dtype: &str) -> i64 {
    match dtype {
        "u8" => 128,
        "u16" => 32768,
        _ => 0,
    }
}

fn onnx_type(dtype: &str) -> DType {
    match dtype {
        "u8" => DType::Uint8,
        "i8" => DType::Int8,
        "u16" => DType::Uint16,
        "i16" => DType::Int16,
        "i32" => DType::Int32,
        _ => DType::Float32,
    }
}

/// A tensor of integer codes of `dtype` (the values are in range by construction).
fn codes(dtype: &str, shape: &[usize], values: &[i64]) -> Tensor {
    let data = match dtype {
        "u8" => TensorData::Uint8(values.iter().map(|&v| v as u8).collect()),
        "i8" => TensorData::Int8(values.iter().map(|&v| v as i8).collect()),
        "u16" => TensorData::Uint16(values.iter().map(|&v| v as u16).collect()),
        "i16" => TensorData::Int16(values.iter().map(|&v| v as i16).collect()),
        _ => TensorData::Int32(values.iter().map(|&v| v as i32).collect()),
    };
    Tensor {
        shape: shape.to_vec(),
        data,
    }
}

fn floats(shape: &[usize], values: Vec<f32>) -> Tensor {
    Tensor {
        shape: shape.to_vec(),
        data: TensorData::Float32(values),
    }
}

/// Adds scale and zero-point constants `{prefix}_s`, `{prefix}_zp`.
fn qparams(b: &mut GraphBuilder, prefix: &str, scale: f32, dtype: &str, zp: i64) {
    b.scalar_f32(&format!("{prefix}_s"), scale);
    b.constant(&format!("{prefix}_zp"), &codes(dtype, &[], &[zp]));
}

/// DequantizeLinear of input `q` (constants `in_s`, `in_zp`) into `x`, the op (reading `inputs`,
/// which name `x`) into `f`, and QuantizeLinear (`out_s`, `out_zp`) into the graph output `y`.
fn dq_op_q(b: &mut GraphBuilder, op_type: &str, name: &str, inputs: &[&str], attrs: &[(&str, Attr)]) {
    b.node(
        "DequantizeLinear",
        "dequantize_in",
        &["q", "in_s", "in_zp"],
        &["x"],
        &[],
    )
    .node(op_type, name, inputs, &["f"], attrs)
    .node("QuantizeLinear", "quantize_out", &["f", "out_s", "out_zp"], &["y"], &[])
    .output("y");
}

/// Every code of an 8-bit type, or of a 16-bit type, in ascending order.
fn all_codes(dtype: &str) -> Vec<i64> {
    let r = CodeRange::of(dtype, 0);
    (r.min..=r.max).collect()
}

/// Ideal values for the QuantizeLinear probe, in LSBs: quarters across the 8-bit range (ties at
/// .5, and .25/.75 that only nearest rounding gets right), ties ±2^-8 beside them, and for 16
/// bits ties far from zero.
fn quantize_points(dtype: &str) -> Vec<f64> {
    let r = CodeRange::of(dtype, zero_point(dtype));
    let (lo, hi) = ((r.min - r.zero_point) as f64, (r.max - r.zero_point) as f64);
    let span = hi.min(1024.0);
    let mut v: Vec<f64> = Vec::new();
    let mut k = -span.min(-lo) * 4.0;
    while k < span * 4.0 {
        v.push(k / 4.0);
        k += 1.0;
    }
    let mut j = -span.min(-lo);
    while j < span {
        v.push(j + 0.5 + 1.0 / 256.0);
        v.push(j + 0.5 - 1.0 / 256.0);
        j += 1.0;
    }
    if hi > 1024.0 {
        for m in [2047.0, 4096.0, 8191.0, 16384.0, 30001.0, 32766.0] {
            v.push(m + 0.5);
            v.push(-m - 0.5);
        }
    }
    v
}

/// Float in, QuantizeLinear: the ONNX operator itself, on values `v · 2^-4`.
fn quantize(dtype: &'static str) -> Probe {
    let zp = zero_point(dtype);
    let ideal = quantize_points(dtype);
    let x: Vec<f32> = ideal.iter().map(|v| (*v as f32) * S_IN).collect();
    let n = x.len();
    let mut b = GraphBuilder::new("quantize");
    b.input("x", 1, &[1, n]);
    qparams(&mut b, "y", S_IN, dtype, zp);
    b.node("QuantizeLinear", "quantize", &["x", "y_s", "y_zp"], &["y"], &[])
        .output("y");
    Probe {
        id: match dtype {
            "u8" => "quantize_u8",
            "i8" => "quantize_i8",
            "u16" => "quantize_u16",
            _ => "quantize_i16",
        },
        kind: Kind::Rounding,
        op: "QuantizeLinear (float input)",
        dtype,
        key_ops: &["QuantizeLinear"],
        model: b.finish(),
        inputs: vec![("x".into(), floats(&[1, n], x))],
        expect: vec![Expect::Codes {
            ideal,
            range: CodeRange::of(dtype, zp),
        }],
        control: None,
    }
}

/// Codes in, DequantizeLinear then QuantizeLinear with another scale: the requantization every
/// QDQ op ends with. Three outputs: ratio 1/4 (ties and quarters), and ratios 1/4 divided by
/// (1 ∓ 2^-9), which move every tie just off it, away from or toward zero.
fn requantize(dtype: &'static str) -> Probe {
    let zp = zero_point(dtype);
    let q = all_codes(dtype);
    let n = q.len();
    let scales: [f32; 3] = [0.25, 0.25 * (1.0 - 1.0 / 512.0), 0.25 * (1.0 + 1.0 / 512.0)];
    let mut b = GraphBuilder::new("requantize");
    b.input("q", onnx_type(dtype).onnx_code(), &[1, n]);
    qparams(&mut b, "in", S_IN, dtype, zp);
    let mut expect = Vec::new();
    for (i, s) in scales.iter().enumerate() {
        let (x, y) = (format!("x{i}"), format!("y{i}"));
        qparams(&mut b, &format!("o{i}"), *s, dtype, zp);
        b.node(
            "DequantizeLinear",
            &format!("dequantize{i}"),
            &["q", "in_s", "in_zp"],
            &[&x],
            &[],
        );
        b.node(
            "QuantizeLinear",
            &format!("quantize{i}"),
            &[&x, &format!("o{i}_s"), &format!("o{i}_zp")],
            &[&y],
            &[],
        );
        b.output(&y);
        expect.push(Expect::Codes {
            ideal: q.iter().map(|&c| (c - zp) as f64 * S_IN as f64 / *s as f64).collect(),
            range: CodeRange::of(dtype, zp),
        });
    }
    Probe {
        id: match dtype {
            "u8" => "requantize_u8",
            "i8" => "requantize_i8",
            "u16" => "requantize_u16",
            _ => "requantize_i16",
        },
        kind: Kind::Rounding,
        op: "DequantizeLinear → QuantizeLinear",
        dtype,
        key_ops: &["QuantizeLinear"],
        model: b.finish(),
        inputs: vec![("q".into(), codes(dtype, &[1, n], &q))],
        expect,
        control: None,
    }
}

/// A 1×1 convolution with three output channels of weight 2·2^-4 and bias codes 0, +1, −1 (bias
/// scale 2^-8), requantized to 2^-5: channel c holds v = (q − zp)/4 + bias_c/8, so channel 0 has
/// ties and quarters and channels 1 and 2 sit 1/8 LSB beside every tie.
fn conv(id: &'static str, act: &'static str, weights: &'static str) -> Probe {
    let zp = zero_point(act);
    let q = all_codes(act);
    let side = (q.len() as f64).sqrt() as usize;
    let wzp = zero_point(weights);
    let bias = [0i64, 1, -1];
    let mut b = GraphBuilder::new("conv");
    b.input("q", onnx_type(act).onnx_code(), &[1, 1, side, side]);
    qparams(&mut b, "in", S_IN, act, zp);
    b.constant("w_q", &codes(weights, &[3, 1, 1, 1], &[wzp + 2; 3]));
    qparams(&mut b, "w", S_IN, weights, wzp);
    b.constant("b_q", &codes("i32", &[3], &bias));
    qparams(&mut b, "b", S_IN * S_IN, "i32", 0);
    qparams(&mut b, "out", 1.0 / 32.0, act, zp);
    b.node(
        "DequantizeLinear",
        "dequantize_in",
        &["q", "in_s", "in_zp"],
        &["x"],
        &[],
    )
    .node("DequantizeLinear", "dequantize_w", &["w_q", "w_s", "w_zp"], &["w"], &[])
    .node(
        "DequantizeLinear",
        "dequantize_b",
        &["b_q", "b_s", "b_zp"],
        &["bias"],
        &[],
    )
    .node("Conv", "conv", &["x", "w", "bias"], &["c"], &[])
    .node("QuantizeLinear", "quantize_out", &["c", "out_s", "out_zp"], &["y"], &[])
    .output("y");
    let ideal = bias
        .iter()
        .flat_map(|bc| q.iter().map(move |&c| (c - zp) as f64 / 4.0 + *bc as f64 / 8.0))
        .collect();
    Probe {
        id,
        kind: Kind::Rounding,
        op: "Conv 1×1 (QDQ), requantized",
        dtype: act,
        key_ops: &["Conv"],
        model: b.finish(),
        inputs: vec![("q".into(), codes(act, &[1, 1, side, side], &q))],
        expect: vec![Expect::Codes {
            ideal,
            range: CodeRange::of(act, zp),
        }],
        control: None,
    }
}

/// A fixed pseudo-random permutation of 0..n (Fisher–Yates driven by xorshift64), so
/// neighbouring elements of a probe input are unrelated and every combination of parities occurs.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut state = seed.max(1);
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        v.swap(i, (state % (i as u64 + 1)) as usize);
    }
    v
}

/// MatMul [128,2]·[2,2] with weight codes (2,2) and (3,1) times 2^-4, requantized to 2^-6:
/// column 0 holds (a + b)/2 (ties), column 1 (3a + b)/4 (quarters), a and b the centred codes.
fn matmul() -> Probe {
    let perm = shuffled(256, 73);
    let q: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
    let mut b = GraphBuilder::new("matmul");
    b.input("q", onnx_type("u8").onnx_code(), &[128, 2]);
    qparams(&mut b, "in", S_IN, "u8", 128);
    // Row-major [2,2]: row k holds the weights of input column k for output columns 0 and 1.
    let w = [2i64, 3, 2, 1];
    b.constant("w_q", &codes("u8", &[2, 2], &w.map(|c| c + 128)));
    qparams(&mut b, "w", S_IN, "u8", 128);
    qparams(&mut b, "out", 1.0 / 64.0, "u8", 128);
    b.node(
        "DequantizeLinear",
        "dequantize_in",
        &["q", "in_s", "in_zp"],
        &["x"],
        &[],
    )
    .node("DequantizeLinear", "dequantize_w", &["w_q", "w_s", "w_zp"], &["w"], &[])
    .node("MatMul", "matmul", &["x", "w"], &["m"], &[])
    .node("QuantizeLinear", "quantize_out", &["m", "out_s", "out_zp"], &["y"], &[])
    .output("y");
    let mut ideal = Vec::with_capacity(256);
    for row in q.chunks(2) {
        let (a, c) = ((row[0] - 128) as f64, (row[1] - 128) as f64);
        ideal.push((a * w[0] as f64 + c * w[2] as f64) / 4.0);
        ideal.push((a * w[1] as f64 + c * w[3] as f64) / 4.0);
    }
    Probe {
        id: "matmul_u8",
        kind: Kind::Rounding,
        op: "MatMul (QDQ), requantized",
        dtype: "u8",
        key_ops: &["MatMul"],
        model: b.finish(),
        inputs: vec![("q".into(), codes("u8", &[128, 2], &q))],
        expect: vec![Expect::Codes {
            ideal,
            range: CodeRange::of("u8", 128),
        }],
        control: None,
    }
}

/// Small centred codes −3..3 in a fixed pattern, for the second operand of Add and Mul.
fn small_operand(n: usize, mult: usize) -> Vec<i64> {
    (0..n).map(|i| 128 + ((i * mult) % 7) as i64 - 3).collect()
}

/// Add of a (all codes, scale 2^-4) and b (codes −3..3, scale 2^-3), requantized to 2^-3:
/// v = a/2 + b, a tie for every odd a.
fn add() -> Probe {
    binary(
        "add_u8",
        "Add",
        "Add (QDQ), requantized",
        37,
        [2.0 * S_IN, 2.0 * S_IN],
        |a, b| a as f64 / 2.0 + b as f64,
    )
}

/// Mul of a (all codes) and b (−3..3), both scale 2^-4, requantized to 2^-5: v = a·b/8.
fn mul() -> Probe {
    binary(
        "mul_u8",
        "Mul",
        "Mul (QDQ), requantized",
        13,
        [S_IN, 1.0 / 32.0],
        |a, b| (a * b) as f64 / 8.0,
    )
}

/// An elementwise op of two u8 operands: a takes every code (scale 2^-4), b the small pattern
/// with multiplier `b_mult`; `scales` are b's scale and the output's; `ideal` gives v from the
/// centred codes.
fn binary(
    id: &'static str,
    op_type: &'static str,
    op: &'static str,
    b_mult: usize,
    scales: [f32; 2],
    ideal: fn(i64, i64) -> f64,
) -> Probe {
    let a = all_codes("u8");
    let c = small_operand(256, b_mult);
    let mut b = GraphBuilder::new(id);
    b.input("a", onnx_type("u8").onnx_code(), &[1, 256])
        .input("b", onnx_type("u8").onnx_code(), &[1, 256]);
    qparams(&mut b, "a", S_IN, "u8", 128);
    qparams(&mut b, "b", scales[0], "u8", 128);
    qparams(&mut b, "out", scales[1], "u8", 128);
    b.node("DequantizeLinear", "dequantize_a", &["a", "a_s", "a_zp"], &["xa"], &[])
        .node("DequantizeLinear", "dequantize_b", &["b", "b_s", "b_zp"], &["xb"], &[])
        .node(op_type, &op_type.to_lowercase(), &["xa", "xb"], &["f"], &[])
        .node("QuantizeLinear", "quantize_out", &["f", "out_s", "out_zp"], &["y"], &[])
        .output("y");
    Probe {
        id,
        kind: Kind::Rounding,
        op,
        dtype: "u8",
        key_ops: if op_type == "Add" { &["Add"] } else { &["Mul"] },
        model: b.finish(),
        inputs: vec![
            ("a".into(), codes("u8", &[1, 256], &a)),
            ("b".into(), codes("u8", &[1, 256], &c)),
        ],
        expect: vec![Expect::Codes {
            ideal: a.iter().zip(&c).map(|(&x, &y)| ideal(x - 128, y - 128)).collect(),
            range: CodeRange::of("u8", 128),
        }],
        control: None,
    }
}

/// A 32×32 pattern of codes spanning both signs around the zero point 128.
fn pattern(side: usize) -> Vec<i64> {
    (0..side * side)
        .map(|i| {
            let (r, c) = (i / side, i % side);
            128 + ((r * 29 + c * 17 + r * c) % 121) as i64 - 60
        })
        .collect()
}

/// AveragePool 2×2, stride 2, same scale in and out: v = mean of four centred codes, so its
/// fraction is .25, .5 or .75.
fn average_pool() -> Probe {
    let q = pattern(32);
    let mut b = GraphBuilder::new("average_pool");
    b.input("q", onnx_type("u8").onnx_code(), &[1, 1, 32, 32]);
    qparams(&mut b, "in", S_IN, "u8", 128);
    qparams(&mut b, "out", S_IN, "u8", 128);
    dq_op_q(
        &mut b,
        "AveragePool",
        "average_pool",
        &["x"],
        &[
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    let mut ideal = Vec::with_capacity(256);
    for r in 0..16 {
        for c in 0..16 {
            let sum: i64 = [(0, 0), (0, 1), (1, 0), (1, 1)]
                .iter()
                .map(|(dr, dc)| q[(2 * r + dr) * 32 + 2 * c + dc] - 128)
                .sum();
            ideal.push(sum as f64 / 4.0);
        }
    }
    Probe {
        id: "average_pool_u8",
        kind: Kind::Rounding,
        op: "AveragePool 2×2 (QDQ)",
        dtype: "u8",
        key_ops: &["AveragePool"],
        model: b.finish(),
        inputs: vec![("q".into(), codes("u8", &[1, 1, 32, 32], &q))],
        expect: vec![Expect::Codes {
            ideal,
            range: CodeRange::of("u8", 128),
        }],
        control: None,
    }
}

/// Source position and weights of ONNX `Resize` (linear, `half_pixel`) along one axis of
/// upsampling ×2: x_in = (x_out + 0.5)/2 − 0.5, clamped to the input, and the two neighbours'
/// weights (exact: 0.25 and 0.75 inside, 1 at the clamped edges).
fn linear_taps(out_index: usize, in_len: usize) -> (usize, usize, f64) {
    let x = ((out_index as f64 + 0.5) / 2.0 - 0.5).clamp(0.0, (in_len - 1) as f64);
    let lo = x.floor() as usize;
    let hi = (lo + 1).min(in_len - 1);
    (lo, hi, x - lo as f64)
}

/// Resize ×2, bilinear, `half_pixel`, same scale in and out: v is a weighted sum with weights in
/// sixteenths, so ties (8/16) and near-ties occur.
fn resize() -> Probe {
    let side = 16;
    let q: Vec<i64> = (0..side * side)
        .map(|i| ((i / side) * 7 + (i % side) * 13) as i64 % 256)
        .collect();
    let mut b = GraphBuilder::new("resize");
    b.input("q", onnx_type("u8").onnx_code(), &[1, 1, side, side]);
    qparams(&mut b, "in", S_IN, "u8", 128);
    qparams(&mut b, "out", S_IN, "u8", 128);
    b.constant("scales", &floats(&[4], vec![1.0, 1.0, 2.0, 2.0]));
    dq_op_q(
        &mut b,
        "Resize",
        "resize",
        &["x", "", "scales"],
        &[
            ("mode", Attr::Str("linear")),
            ("coordinate_transformation_mode", Attr::Str("half_pixel")),
        ],
    );
    let at = |r: usize, c: usize| (q[r * side + c] - 128) as f64;
    let mut ideal = Vec::with_capacity(4 * side * side);
    for r in 0..2 * side {
        let (r0, r1, fr) = linear_taps(r, side);
        for c in 0..2 * side {
            let (c0, c1, fc) = linear_taps(c, side);
            let top = at(r0, c0) * (1.0 - fc) + at(r0, c1) * fc;
            let bottom = at(r1, c0) * (1.0 - fc) + at(r1, c1) * fc;
            ideal.push(top * (1.0 - fr) + bottom * fr);
        }
    }
    Probe {
        id: "resize_u8",
        kind: Kind::Rounding,
        op: "Resize ×2 bilinear half_pixel (QDQ)",
        dtype: "u8",
        key_ops: &["Resize"],
        model: b.finish(),
        inputs: vec![("q".into(), codes("u8", &[1, 1, side, side], &q))],
        expect: vec![Expect::Codes {
            ideal,
            range: CodeRange::of("u8", 128),
        }],
        control: None,
    }
}

/// The function, its input scale, and its output scale and zero point, chosen so the output
/// range covers the function's range over the inputs.
fn nonlinear_params(op: &str) -> (fn(f64) -> f64, f32, f32, i64) {
    fn sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }
    fn tanh(x: f64) -> f64 {
        x.tanh()
    }
    fn gelu(x: f64) -> f64 {
        0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
    }
    match op {
        "sigmoid" => (sigmoid, S_IN, 1.0 / 256.0, 0),
        "tanh" => (tanh, S_IN / 2.0, 1.0 / 128.0, 128),
        _ => (gelu, S_IN / 2.0, 1.0 / 64.0, 16),
    }
}

/// Sigmoid, Tanh or Gelu over every u8 code: the ideal is the function in f64; a target that
/// uses a lookup table or a polynomial misses it by more than rounding explains.
fn nonlinear(op: &'static str) -> Probe {
    let (f, s_in, s_out, zp_out) = nonlinear_params(op);
    let q = all_codes("u8");
    let onnx_op = match op {
        "sigmoid" => "Sigmoid",
        "tanh" => "Tanh",
        _ => "Gelu",
    };
    let mut b = GraphBuilder::new(op);
    b.input("q", onnx_type("u8").onnx_code(), &[1, 256]);
    qparams(&mut b, "in", s_in, "u8", 128);
    qparams(&mut b, "out", s_out, "u8", zp_out);
    dq_op_q(&mut b, onnx_op, op, &["x"], &[]);
    let ideal = q
        .iter()
        .map(|&c| f((c - 128) as f64 * s_in as f64) / s_out as f64)
        .collect();
    Probe {
        id: match op {
            "sigmoid" => "sigmoid_u8",
            "tanh" => "tanh_u8",
            _ => "gelu_u8",
        },
        kind: Kind::Accuracy,
        op: match op {
            "sigmoid" => "Sigmoid (QDQ)",
            "tanh" => "Tanh (QDQ)",
            _ => "Gelu (QDQ, erf form)",
        },
        dtype: "u8",
        key_ops: key_op(onnx_op),
        model: b.finish(),
        inputs: vec![("q".into(), codes("u8", &[1, 256], &q))],
        expect: vec![Expect::Codes {
            ideal,
            range: CodeRange::of("u8", zp_out),
        }],
        control: None,
    }
}

fn key_op(op: &str) -> &'static [&'static str] {
    match op {
        "Sigmoid" => &["Sigmoid"],
        "Tanh" => &["Tanh"],
        _ => &["Gelu"],
    }
}

/// Softmax over rows of 16 codes (scale 2^-3), output scale 1/256.
fn softmax() -> Probe {
    let perm = shuffled(256, 45);
    let q: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
    let s_in = 2.0 * S_IN;
    let mut b = GraphBuilder::new("softmax");
    b.input("q", onnx_type("u8").onnx_code(), &[16, 16]);
    qparams(&mut b, "in", s_in, "u8", 128);
    qparams(&mut b, "out", 1.0 / 256.0, "u8", 0);
    dq_op_q(&mut b, "Softmax", "softmax", &["x"], &[("axis", Attr::Int(-1))]);
    let mut ideal = Vec::with_capacity(256);
    for row in q.chunks(16) {
        let x: Vec<f64> = row.iter().map(|&c| (c - 128) as f64 * s_in as f64).collect();
        let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        ideal.extend(e.iter().map(|v| v / sum * 256.0));
    }
    Probe {
        id: "softmax_u8",
        kind: Kind::Accuracy,
        op: "Softmax over 16 (QDQ)",
        dtype: "u8",
        key_ops: &["Softmax"],
        model: b.finish(),
        inputs: vec![("q".into(), codes("u8", &[16, 16], &q))],
        expect: vec![Expect::Codes {
            ideal,
            range: CodeRange::of("u8", 0),
        }],
        control: None,
    }
}

/// Requantization with gain 4: v = 4(q − zp) leaves the code range at both ends, where a target
/// saturates or wraps.
fn saturation(dtype: &'static str) -> Probe {
    let zp = zero_point(dtype);
    let q = all_codes(dtype);
    let mut b = GraphBuilder::new("saturation");
    b.input("q", onnx_type(dtype).onnx_code(), &[1, 256]);
    qparams(&mut b, "in", S_IN, dtype, zp);
    qparams(&mut b, "out", S_IN / 4.0, dtype, zp);
    b.node(
        "DequantizeLinear",
        "dequantize_in",
        &["q", "in_s", "in_zp"],
        &["x"],
        &[],
    )
    .node("QuantizeLinear", "quantize_out", &["x", "out_s", "out_zp"], &["y"], &[])
    .output("y");
    Probe {
        id: if dtype == "u8" {
            "saturation_u8"
        } else {
            "saturation_i8"
        },
        kind: Kind::Saturation,
        op: "requantize ×4 past the range",
        dtype,
        key_ops: &["QuantizeLinear"],
        model: b.finish(),
        inputs: vec![("q".into(), codes(dtype, &[1, 256], &q))],
        expect: vec![Expect::Codes {
            ideal: q.iter().map(|&c| 4.0 * (c - zp) as f64).collect(),
            range: CodeRange::of(dtype, zp),
        }],
        control: None,
    }
}

/// fp16 rounding of an f32 value (round to nearest even, subnormals kept).
fn to_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// Number of addends of the accumulation probe: 1.0 then 4095 × 2^-8.
const ACCUMULATION_LEN: usize = 4096;

/// The accumulation probe's input and the sums each candidate accumulator gives.
pub fn accumulation_candidates() -> (Vec<f32>, Vec<(&'static str, f32)>) {
    let mut x = vec![1.0f32 / 256.0; ACCUMULATION_LEN];
    x[0] = 1.0;
    // Every partial sum is a multiple of 2^-8 below 2^5: exact in f32 in any order.
    let exact: f32 = x.iter().sum();
    let mut sequential = 0.0f32;
    for v in &x {
        sequential = to_f16(sequential + to_f16(*v));
    }
    (
        x,
        vec![
            ("fp32", exact),
            // A pairwise fp16 accumulation ends on the same value as rounding the exact sum
            // (tested): one candidate.
            ("fp16_result", to_f16(exact)),
            ("fp16_sequential", sequential),
        ],
    )
}

/// ReduceSum of 1.0 and 4095 × 2^-8 in float: exact in fp32 (16.99609375); an fp16 result is 17
/// (pairwise fp16 accumulation ends there too); sequential fp16 accumulation sticks at 8 (8 + 2^-8 is a tie that rounds back to 8).
fn accumulation() -> Probe {
    let (x, candidates) = accumulation_candidates();
    let mut b = GraphBuilder::new("accumulation");
    b.input("x", 1, &[1, ACCUMULATION_LEN]);
    b.node("ReduceSum", "reduce_sum", &["x"], &["y"], &[("keepdims", Attr::Int(1))])
        .output("y");
    Probe {
        id: "reduce_sum_f32",
        kind: Kind::Accumulation,
        op: "ReduceSum of 4096 floats",
        dtype: "f32",
        key_ops: &["ReduceSum"],
        model: b.finish(),
        inputs: vec![("x".into(), floats(&[1, ACCUMULATION_LEN], x))],
        expect: vec![Expect::Floats {
            candidates: candidates.into_iter().map(|(n, v)| (n, vec![v])).collect(),
        }],
        control: None,
    }
}

/// Inputs of the precision probe: values with bits below fp16's precision, fp16 subnormals, and
/// values too small for fp16 at all.
pub fn precision_inputs() -> Vec<f32> {
    let p = |e: i32| 2f32.powi(e);
    vec![
        1.0 + p(-12),
        3.0 + p(-11),
        -(1.0 + p(-13)),
        p(-15),
        p(-20),
        3.0 * p(-24),
        -p(-17),
        p(-26),
        p(-14),
        0.1,
    ]
}

/// What `2·x` gives per arithmetic: f32; fp16 with subnormals; fp16 flushing subnormal inputs
/// and results to zero.
pub fn precision_candidates(x: &[f32]) -> Vec<(&'static str, Vec<f32>)> {
    let ftz = |v: f32| if v.abs() < 2f32.powi(-14) { 0.0 * v.signum() } else { v };
    vec![
        ("fp32", x.iter().map(|v| 2.0 * v).collect()),
        ("fp16", x.iter().map(|v| to_f16(2.0 * to_f16(*v))).collect()),
        (
            "fp16_ftz",
            x.iter().map(|v| ftz(to_f16(2.0 * ftz(to_f16(*v))))).collect(),
        ),
    ]
}

/// Mul by 2 in float: which arithmetic the target uses for float ops (HTP runs float graphs in
/// fp16 unless told otherwise) and whether it keeps fp16 subnormals.
fn precision() -> Probe {
    let x = precision_inputs();
    let n = x.len();
    let mut b = GraphBuilder::new("precision");
    b.input("x", 1, &[1, n]);
    b.scalar_f32("two", 2.0)
        .node("Mul", "mul", &["x", "two"], &["y"], &[])
        .output("y");
    let candidates = precision_candidates(&x);
    Probe {
        id: "float_mul",
        kind: Kind::Precision,
        op: "Mul by 2 in float",
        dtype: "f32",
        key_ops: &["Mul"],
        model: b.finish(),
        inputs: vec![("x".into(), floats(&[1, n], x))],
        expect: vec![Expect::Floats { candidates }],
        control: None,
    }
}

/// A control: Floor before QuantizeLinear (x·16 → Floor → ·2^-4 → QuantizeLinear 2^-4) makes the
/// chain round down whatever the target's rounding, so it must be classified `floor`.
fn floor_control() -> Probe {
    let ideal = quantize_points("u8");
    let x: Vec<f32> = ideal.iter().map(|v| (*v as f32) * S_IN).collect();
    let n = x.len();
    let mut b = GraphBuilder::new("floor_control");
    b.input("x", 1, &[1, n])
        .scalar_f32("up", 1.0 / S_IN)
        .scalar_f32("down", S_IN);
    qparams(&mut b, "y", S_IN, "u8", 128);
    b.node("Mul", "scale_up", &["x", "up"], &["u"], &[])
        .node("Floor", "floor", &["u"], &["f"], &[])
        .node("Mul", "scale_down", &["f", "down"], &["d"], &[])
        .node("QuantizeLinear", "quantize", &["d", "y_s", "y_zp"], &["y"], &[])
        .output("y");
    Probe {
        id: "floor_control",
        kind: Kind::Rounding,
        op: "Floor then QuantizeLinear (control)",
        dtype: "u8",
        key_ops: &["Floor"],
        model: b.finish(),
        inputs: vec![("x".into(), floats(&[1, n], x))],
        expect: vec![Expect::Codes {
            ideal,
            range: CodeRange::of("u8", 128),
        }],
        control: Some("floor"),
    }
}

impl Probe {
    /// Whether output element i (modulo the input's length) comes from input element i alone, so
    /// evidence can quote the input that produced it.
    pub fn elementwise(&self) -> bool {
        !matches!(
            self.id,
            "matmul_u8" | "average_pool_u8" | "resize_u8" | "softmax_u8" | "reduce_sum_f32"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ideal_of(p: &Probe, k: usize) -> &[f64] {
        match &p.expect[k] {
            Expect::Codes { ideal, .. } => ideal,
            Expect::Floats { .. } => panic!("float probe"),
        }
    }

    #[test]
    fn quantize_ties_are_exact_in_f32() {
        for dtype in ["u8", "i8", "u16", "i16"] {
            let p = quantize(dtype);
            let TensorData::Float32(x) = &p.inputs[0].1.data else {
                panic!()
            };
            let ideal = ideal_of(&p, 0);
            let mut ties = 0;
            for (xi, v) in x.iter().zip(ideal) {
                // What QuantizeLinear computes before rounding, in f32: x / scale.
                let q = xi / (1.0f32 / 16.0);
                assert_eq!(q as f64, *v, "{dtype}: {xi} / 2^-4 is not exactly the ideal");
                ties += (q.fract().abs() == 0.5) as usize;
            }
            assert!(ties >= 254, "{dtype}: only {ties} exact ties");
        }
    }

    #[test]
    fn requantize_and_conv_ties_are_where_integer_arithmetic_puts_them() {
        let p = requantize("u8");
        // Output 0: v = (q - 128)/4 is a tie exactly when q - 128 ≡ 2 (mod 4): 64 of 256 codes.
        let ties = ideal_of(&p, 0).iter().filter(|v| v.fract().abs() == 0.5).count();
        assert_eq!(ties, 64);
        for q in 0..256i32 {
            let x = (q - 128) as f32 * (1.0 / 16.0);
            assert_eq!((x / 0.25) as f64, ideal_of(&p, 0)[q as usize]);
        }
        // Outputs 1 and 2 move every tie off by a relative 2^-9: none is left.
        for k in [1, 2] {
            assert_eq!(ideal_of(&p, k).iter().filter(|v| v.fract().abs() == 0.5).count(), 0);
        }
        // Conv channel c: v = (2(q - 128) + b_c)/8, a tie iff the numerator ≡ 4 (mod 8).
        let c = conv("conv_u8", "u8", "u8");
        let ideal = ideal_of(&c, 0);
        for (ch, b) in [0i64, 1, -1].iter().enumerate() {
            let want = (0..256i64).filter(|q| (2 * (q - 128) + b).rem_euclid(8) == 4).count();
            let got = ideal[ch * 256..(ch + 1) * 256]
                .iter()
                .filter(|v| v.fract().abs() == 0.5)
                .count();
            assert_eq!(got, want, "channel {ch}");
        }
        assert_eq!(
            all()
                .iter()
                .map(|p| p.id)
                .collect::<std::collections::HashSet<_>>()
                .len(),
            all().len()
        );
    }

    #[test]
    fn float_candidates_match_hand_computed_values() {
        let (x, c) = accumulation_candidates();
        assert_eq!(x.len(), 4096);
        let get = |n: &str| c.iter().find(|(k, _)| *k == n).unwrap().1;
        assert_eq!(get("fp32"), 17.0 - 1.0 / 256.0);
        assert_eq!(get("fp16_result"), 17.0);
        // 8 + 2^-8 is a tie between fp16 neighbours 8 and 8 + 2^-7: it rounds back to 8.
        assert_eq!(get("fp16_sequential"), 8.0);
        fn pairwise(v: &[f32]) -> f32 {
            if v.len() == 1 {
                return half::f16::from_f32(v[0]).to_f32();
            }
            let (a, b) = v.split_at(v.len() / 2);
            half::f16::from_f32(pairwise(a) + pairwise(b)).to_f32()
        }
        assert_eq!(pairwise(&x), 17.0, "pairwise fp16 ends where fp16_result does");

        let x = precision_inputs();
        let c = precision_candidates(&x);
        let (fp32, fp16, ftz) = (&c[0].1, &c[1].1, &c[2].1);
        assert_eq!(fp32[0], 2.0 + 2f32.powi(-11));
        assert_eq!(fp16[0], 2.0);
        assert_eq!((fp16[4], ftz[4]), (2f32.powi(-19), 0.0), "2^-20 is an fp16 subnormal");
        assert_eq!((fp32[7], fp16[7]), (2f32.powi(-25), 0.0), "2^-26 is below fp16's range");
    }
}
