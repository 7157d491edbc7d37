#!/usr/bin/env python3
"""The per-layer audit beside Polygraphy and a bare ONNX Runtime floor, on one real model.

Runs, on the same model, inputs and EP (the CPU EP of ONNX Runtime 1.31.1, npu-audit's default
core), each configuration `--runs` times (default 5) interleaved round-robin so the machine's
noise falls on all of them alike, and prints medians and the issue's goals as ratios:

  outputs only       npu-audit compare QDQ --reference FP32 -t cpu
  layers, no isolate npu-audit compare ... --layers all --no-isolate (the tapped runs alone)
  layers, isolated   npu-audit compare ... --layers all (the default per-layer audit)
  polygraphy         polygraphy run FP32 --onnxrt --onnx-outputs mark all --save-outputs, then
                     polygraphy run QDQ ... --load-outputs (QDQ compared layer by layer with fp32)
  floor              one Python process: the sessions the tapped runs need (fp32 golden, QDQ
                     without and with graph optimizations) with every float tensor as an
                     output, each created and run one after the other, outputs fetched (time
                     inside the process, tapping the model excluded)
  qnn (--qnn)        npu-audit compare ... -t qnn:sm8650 --layers all

Peak RSS is that of the largest process of a run (os.wait4 reports the maximum over the process
and the descendants it reaped): npu-audit runs every session in its own worker, Polygraphy holds
everything in one process. npu-audit's own `--timings` figures (each worker's peak, the sessions'
create + run) are read from its JSON report.

Models: `ppocr` (default; the PP-OCR text-direction classifier committed in fixtures/real, fp32
and its u8 QDQ quantization) or `densenet` (DenseNet-121 as shipped in the onnx wheel's backend
test data, quantized here to u8 QDQ with ONNX Runtime's quantize_static on 8 seeded calibration
inputs). Polygraphy, ONNX Runtime, onnx and NumPy are installed from the Python index into a
virtual environment under the npu-audit cache (NPU_AUDIT_CACHE, else ~/.cache/npu-audit).

    python3 benches/layers_speed.py [--model ppocr|densenet] [--runs 5] [--qnn]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = ["numpy==2.4.6", "onnx==1.23.2", "onnxruntime==1.31.1", "polygraphy==0.53.6"]

# Runs inside the bench's virtual environment, in a fresh process per measurement.
FLOOR = r"""
import json, sys, time
import onnx, onnxruntime as ort, numpy as np

def tapped(path):
    # Every float tensor a node computes becomes a graph output, as a tapping harness would do.
    m = onnx.load(path)
    inferred = onnx.shape_inference.infer_shapes(m)
    float_types = {vi.name for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                   if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    have = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for name in node.output:
            if name and name in float_types and name not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
    return m.SerializeToString(), len(have)

feeds = {k: v for k, v in np.load(sys.argv[3]).items()}
total, taps = 0.0, []
# The sessions npu-audit's tapped runs need: the golden run (fp32, no graph optimizations), the
# baseline cpu:noopt and the target cpu (the QDQ model without and with them).
for path, opt in ((sys.argv[1], ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                  (sys.argv[2], ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                  (sys.argv[2], ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
    data, n = tapped(path)
    so = ort.SessionOptions()
    so.graph_optimization_level = opt
    so.intra_op_num_threads = 1
    start = time.perf_counter()
    session = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
    total += time.perf_counter() - start
    taps.append(n)
print(json.dumps({"seconds": total, "taps": taps}))
"""

LOADER = r"""
import numpy as np
def load_data():
    yield dict(np.load(INPUTS))
"""


def venv_python(cache: Path) -> Path:
    """The bench's virtual environment, created and filled with the pinned packages once."""
    venv = cache / "bench" / "layers-speed-venv"
    python = venv / "bin" / "python"
    stamp = venv / "pins.txt"
    if not (python.exists() and stamp.exists() and stamp.read_text() == "\n".join(PINS)):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS], check=True)
        stamp.write_text("\n".join(PINS))
    return python


def densenet(python: Path, cache: Path) -> tuple[Path, Path]:
    """DenseNet-121 from the onnx wheel and its u8 QDQ quantization (made once, cached)."""
    out = cache / "bench" / "densenet"
    fp32, qdq = out / "densenet_fp32.onnx", out / "densenet_qdq_u8.onnx"
    if qdq.exists():
        return fp32, qdq
    out.mkdir(parents=True, exist_ok=True)
    script = r"""
import sys, shutil, numpy as np, onnx
from pathlib import Path
from onnxruntime.quantization import quantize_static, CalibrationDataReader, QuantFormat, QuantType
src = Path(onnx.__file__).parent / "backend/test/data/light/light_densenet121.onnx"
m = onnx.load(src)
onnx.save(m, sys.argv[1])
# An IR-3 model lists its initializers among its inputs: the data input is the other one.
init = {i.name for i in m.graph.initializer}
name = next(i.name for i in m.graph.input if i.name not in init)
rng = np.random.default_rng(7)
class Reader(CalibrationDataReader):
    def __init__(self):
        self.batches = iter([{name: rng.uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)} for _ in range(8)])
    def get_next(self):
        return next(self.batches, None)
quantize_static(sys.argv[1], sys.argv[2], Reader(), quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8)
"""
    subprocess.run([str(python), "-c", script, str(fp32), str(qdq)], check=True)
    return fp32, qdq


def seeded_inputs(python: Path, fp32: Path, dest: Path) -> Path:
    """One sample of uniform [-1, 1) values for every input of the model, as .npz."""
    script = r"""
import sys, numpy as np, onnx
m = onnx.load(sys.argv[1])
init = {i.name for i in m.graph.initializer}
rng = np.random.default_rng(3)
feeds = {}
for i in m.graph.input:
    if i.name in init:
        continue
    dims = [d.dim_value if d.dim_value > 0 else 1 for d in i.type.tensor_type.shape.dim]
    feeds[i.name] = rng.uniform(-1, 1, dims).astype(np.float32)
np.savez(sys.argv[2], **feeds)
"""
    path = dest / "inputs.npz"
    subprocess.run([str(python), "-c", script, str(fp32), str(path)], check=True)
    return path


def measured(cmd: list[str], env: dict | None = None, ok=(0,)) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MiB of the largest process of the tree, and stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, log = out.read().decode(), err.read().decode()
    if code not in ok:
        sys.exit(f"FATAL: {' '.join(cmd)} exited {code}:\n{log[-3000:]}")
    return wall, usage.ru_maxrss / 1024, text


def audit_timings(report: Path) -> dict:
    """From npu-audit's --timings: the sessions' create + run (ms) of the outputs-only stage,
    the tapped runs' stage wall (ms), and the largest worker's peak (MiB)."""
    t = json.loads(report.read_text())["timings"]
    outputs = [w for w in t["workers"] if w["stage"] == "golden and outputs"]
    # Phases are exclusive, so a stage's wall time is the sum of its phases.
    tapped = sum(p["ms"] for p in t["phases"] if p["stage"] == "layers: tapped runs")
    return {
        "sessions_ms": sum(w["session_create_ms"] + w["run_ms"] for w in outputs),
        "tapped_ms": tapped,
        "worker_peak": max(w["peak_rss_mb"] for w in t["workers"]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["ppocr", "densenet"], default="ppocr")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--qnn", action="store_true", help="also --layers all on qnn:sm8650 (slow)")
    ap.add_argument("--binary", type=Path, help="npu-audit binary (default: built here, release)")
    args = ap.parse_args()

    cache = Path(os.environ.get("NPU_AUDIT_CACHE") or Path.home() / ".cache" / "npu-audit")
    binary = args.binary
    if binary is None:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        binary = ROOT / "target" / "release" / "npu-audit"
    python = venv_python(cache)
    if args.model == "ppocr":
        fp32, qdq = ROOT / "fixtures/real/ppocr_cls_fp32.onnx", ROOT / "fixtures/real/ppocr_cls_qdq_u8.onnx"
    else:
        fp32, qdq = densenet(python, cache)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs = seeded_inputs(python, fp32, tmp)
        loader = tmp / "loader.py"
        loader.write_text(f"INPUTS = {str(inputs)!r}\n" + LOADER)
        floor_script = tmp / "floor.py"
        floor_script.write_text(FLOOR)
        env = dict(os.environ, NPU_AUDIT_CACHE=str(cache))
        # The tool's runtime is provisioned (and its fingerprint cache filled) before timing.
        base = [str(binary), "compare", str(qdq), "--reference", str(fp32), "--inputs", str(inputs),
                "--fingerprint", "off", "--timings", "--quiet"]
        measured(base + ["-t", "cpu", "--out", str(tmp / "warm.json")], env, ok=(0, 1))

        def audit(name, extra):
            report = tmp / f"{name}.json"
            wall, peak, _ = measured(base + extra + ["--out", str(report)], env, ok=(0, 1))
            return {"wall": wall, "peak": peak, **audit_timings(report)}

        def polygraphy():
            saved = tmp / "fp32_outputs.json"
            common = ["--onnxrt", "--providers", "cpu", "--onnx-outputs", "mark", "all",
                      "--data-loader-script", str(loader)]
            w1, p1, _ = measured([str(python.parent / "polygraphy"), "run", str(fp32), *common,
                                  "--save-outputs", str(saved)])
            # Exit 1 is Polygraphy's verdict that the QDQ model's layers differ from fp32's.
            w2, p2, _ = measured([str(python.parent / "polygraphy"), "run", str(qdq), *common,
                                  "--load-outputs", str(saved)], ok=(0, 1))
            return {"wall": w1 + w2, "peak": max(p1, p2)}

        def floor():
            wall, peak, out = measured([str(python), str(floor_script), str(fp32), str(qdq), str(inputs)])
            result = json.loads(out)
            return {"wall": result["seconds"], "peak": peak, "process_wall": wall, "taps": result["taps"]}

        configs = {
            "outputs only": lambda: audit("outputs", ["-t", "cpu"]),
            "layers, no isolate": lambda: audit("tapped", ["-t", "cpu", "--layers", "all", "--no-isolate"]),
            "layers, isolated": lambda: audit("layers", ["-t", "cpu", "--layers", "all"]),
            "polygraphy mark all": polygraphy,
            "floor (bare ORT taps)": floor,
        }
        if args.qnn:
            measured(base + ["-t", "qnn:sm8650", "--out", str(tmp / "warmq.json")], env, ok=(0, 1))
            configs["qnn:sm8650 layers"] = lambda: audit("qnn", ["-t", "qnn:sm8650", "--layers", "all"])
        runs = {name: [] for name in configs}
        for _ in range(args.runs):
            for name, run in configs.items():
                runs[name].append(run())

    def median(name, key):
        return statistics.median(r[key] for r in runs[name])

    print(f"model {args.model}: {qdq.name} against {fp32.name}, CPU EP of ONNX Runtime 1.31.1, "
          f"medians of {args.runs} runs; floor taps {runs['floor (bare ORT taps)'][0]['taps']}")
    print(f"{'run':<24}{'wall s':>9}{'peak MiB':>10}")
    for name in configs:
        print(f"{name:<24}{median(name, 'wall'):>9.2f}{median(name, 'peak'):>10.0f}")
    poly_wall, poly_peak = median("polygraphy mark all", "wall"), median("polygraphy mark all", "peak")
    floor_s = median("floor (bare ORT taps)", "wall")
    goals = [
        ("layers (isolated) / polygraphy wall", median("layers, isolated", "wall") / poly_wall, 0.3),
        ("layers (isolated) / polygraphy peak RSS", median("layers, isolated", "peak") / poly_peak, 0.5),
        ("tapped runs stage / floor", median("layers, no isolate", "tapped_ms") / 1000 / floor_s, 2.0),
        ("layers, no isolate (whole audit) / floor", median("layers, no isolate", "wall") / floor_s, 2.0),
        ("outputs only / its sessions' create + run",
         median("outputs only", "wall") / (median("outputs only", "sessions_ms") / 1000), 1.1),
    ]
    print(f"{'ratio':<44}{'median':>8}{'goal':>7}")
    for name, ratio, goal in goals:
        print(f"{name:<44}{ratio:>8.2f}{'<= ' + str(goal):>9}  {'met' if ratio <= goal else 'NOT met'}")


if __name__ == "__main__":
    main()
