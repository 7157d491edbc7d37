//! Throughput of the comparison core (one output of one target against the golden run, float32)
//! on one core, beside a memcpy ceiling measured in the same run on the same amount of data.
//!
//! `cargo bench --bench compare_core` prints medians of several repetitions and their ratio.

use std::hint::black_box;
use std::time::Instant;

use npu_audit::analyses::metrics::ErrorStats;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // 16 Mi pairs = 128 MiB of float32 data per pass: far beyond the caches.
    let n: usize = std::env::var("NPU_AUDIT_BENCH_ELEMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16 << 20);
    let reps = 9;
    let gold: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.000_37).sin() * 3.0).collect();
    // A quantized-looking output: the golden value snapped to a grid, a few exact matches.
    let out: Vec<f32> = gold.iter().map(|v| (v * 40.0).round() / 40.0).collect();
    let bytes = (2 * n * std::mem::size_of::<f32>()) as f64;

    let mut compare_gbs = Vec::new();
    let mut sqnr = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        let mut s = ErrorStats::new(true, true);
        s.update_f32(black_box(&out), black_box(&gold));
        let secs = t.elapsed().as_secs_f64();
        sqnr = s.sqnr_db();
        compare_gbs.push(bytes / secs / 1e9);
    }

    // memcpy of the same number of bytes (both arrays), source to a separate destination.
    let src: Vec<u8> = (0..bytes as usize).map(|i| i as u8).collect();
    let mut dst = vec![0u8; src.len()];
    let mut memcpy_gbs = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        memcpy_gbs.push(bytes / t.elapsed().as_secs_f64() / 1e9);
    }
    let c = median(compare_gbs.clone());
    let m = median(memcpy_gbs.clone());
    println!(
        "comparison core, float32 pairs, one core: {n} pairs ({:.0} MiB) per pass, {reps} passes",
        bytes / (1 << 20) as f64
    );
    println!(
        "  compare  median {c:6.2} GB/s  (min {:.2}, max {:.2})  [sqnr {sqnr:.2} dB]",
        compare_gbs.iter().cloned().fold(f64::INFINITY, f64::min),
        compare_gbs.iter().cloned().fold(0.0, f64::max)
    );
    println!(
        "  memcpy   median {m:6.2} GB/s  (min {:.2}, max {:.2})",
        memcpy_gbs.iter().cloned().fold(f64::INFINITY, f64::min),
        memcpy_gbs.iter().cloned().fold(0.0, f64::max)
    );
    println!(
        "  compare / memcpy = {:.2}   goal: compare >= 4 GB/s -> {}",
        c / m,
        if c >= 4.0 { "met" } else { "NOT met" }
    );
}
