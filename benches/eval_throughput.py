#!/usr/bin/env python3
"""`npu-audit eval` throughput and memory, on the PP-OCR text-direction classifier (fixtures/real).

Throughput: on a set of N rendered text lines (tests/data/make_eval_set.py), `eval -t cpu
--no-baseline` (the fp32 reference and the u8 model on the CPU EP, each in its serving worker,
side by side on the machine's cores) against a bare ONNX Runtime loop over the same sessions: two
Python processes started together, each loading every sample's .npz and running it through one
session (the reference with graph optimizations off, the u8 model with them on, 1 intra-op
thread), as eval's workers do. The ratio is bare wall time over eval's: the goal is >= 0.8.

Memory: eval's own process peak RSS (VmHWM, polled) on 1,000 and on 10,000 samples of a stacked
set, which must stay flat: nothing proportional to N is held but one record per sample and run.

Each configuration runs `--runs` times (default 3) interleaved; medians are printed. The
environment (NumPy, Pillow, ONNX Runtime, pinned in tests/data/eval-requirements.txt) is made
once under the npu-audit cache.

    cargo build --release && python3 benches/eval_throughput.py [--samples 1000] [--runs 3]
"""

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXE = ROOT / "target" / "release" / "npu-audit"
REQUIREMENTS = ROOT / "tests" / "data" / "eval-requirements.txt"

BARE = r"""
import sys, time, pathlib
import numpy as np, onnxruntime as ort
ort.set_default_logger_severity(3)
model, optimize, folder = sys.argv[1], sys.argv[2] == "1", pathlib.Path(sys.argv[3])
so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.inter_op_num_threads = 1
so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                               else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
for f in sorted(folder.glob("*.npz")):
    session.run(None, {"x": np.load(f)["x"]})
"""


def venv_python(cache: Path) -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    venv = cache / "bench" / f"eval-venv-{digest}"
    python = venv / "bin" / "python"
    if not (venv / "complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--only-binary", ":all:", "-r",
                        str(REQUIREMENTS)], check=True)
        (venv / "complete").write_text("")
    return python


def peak_rss_mb(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and the process's own peak RSS in MiB (VmHWM, read until it exits)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{cmd[:3]} failed: {proc.stderr.read().decode()}")
    return wall, peak / 1024


def bare(python: Path, folder: Path) -> float:
    start = time.perf_counter()
    runs = [
        subprocess.Popen([str(python), "-c", BARE, str(ROOT / "fixtures/real/ppocr_cls_fp32.onnx"), "0", str(folder)]),
        subprocess.Popen([str(python), "-c", BARE, str(ROOT / "fixtures/real/ppocr_cls_qdq_u8.onnx"), "1", str(folder)]),
    ]
    for r in runs:
        if r.wait() != 0:
            sys.exit("the bare loop failed")
    return time.perf_counter() - start


def eval_cmd(dataset: Path, out: Path) -> list[str]:
    return [str(EXE), "eval", str(ROOT / "fixtures/real/ppocr_cls_qdq_u8.onnx"), "--reference",
            str(ROOT / "fixtures/real/ppocr_cls_fp32.onnx"), "--dataset", str(dataset), "--task", "classify",
            "-t", "cpu", "--no-baseline", "--no-config", "-q", "--resamples", "1000", "--out", str(out)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not EXE.exists():
        sys.exit("build the release binary first: cargo build --release")
    cache = Path(os.environ.get("NPU_AUDIT_CACHE") or Path.home() / ".cache" / "npu-audit")
    python = venv_python(cache)
    make = [str(python), str(ROOT / "tests/data/make_eval_set.py"), "cls"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = tmp / "lines"
        subprocess.run(make + [str(folder), "--count", str(args.samples), "--seed", "1"], check=True)
        for n in (1000, 10000):
            subprocess.run(make + [str(tmp / f"stacked{n}.npz"), "--count", str(n), "--seed", "1", "--stacked"],
                           check=True)
        walls, bares = [], []
        for k in range(args.runs):
            walls.append(peak_rss_mb(eval_cmd(folder, tmp / f"e{k}.json"))[0])
            bares.append(bare(python, folder))
        eval_wall, bare_wall = statistics.median(walls), statistics.median(bares)
        ratio = bare_wall / eval_wall
        print(f"throughput on {args.samples} samples, reference + cpu ({args.runs} runs, medians)")
        print(f"  eval       {eval_wall:7.2f} s  {args.samples / eval_wall:8.1f} samples/s")
        print(f"  bare loop  {bare_wall:7.2f} s  {args.samples / bare_wall:8.1f} samples/s")
        print(f"  eval throughput / bare = {ratio:.2f}  (goal >= 0.8 -> {'met' if ratio >= 0.8 else 'NOT met'})")
        peaks = {}
        for n in (1000, 10000):
            runs = [peak_rss_mb(eval_cmd(tmp / f"stacked{n}.npz", tmp / f"m{n}-{k}.json")) for k in range(args.runs)]
            peaks[n] = statistics.median(p for _, p in runs)
            wall = statistics.median(w for w, _ in runs)
            print(f"  {n:6d} samples (stacked): eval's own peak RSS {peaks[n]:7.1f} MiB, {wall:6.1f} s")
        growth = peaks[10000] / peaks[1000]
        print(f"  peak RSS 10,000 / 1,000 = {growth:.2f}  (goal: flat, <= 1.25 -> {'met' if growth <= 1.25 else 'NOT met'})")


if __name__ == "__main__":
    main()
