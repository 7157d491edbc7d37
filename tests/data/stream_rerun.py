#!/usr/bin/env python3
"""Independent rerun of a streaming (recurrent) audit: NumPy + onnxruntime only.

Runs a reference model and a model under test as streams over an audio file, each feeding its
own state outputs back, and the model once more teacher-forced (its state inputs taken from the
reference's previous step), and writes per-step SQNR, decisions, disagreements, the divergence
step and the error growth as JSON. Written from the definitions below, not from the tool's code.

    stream_rerun.py --reference FP32.onnx --model Q.onnx --audio speech.npy --window 576 --hop 512 \\
        --input-name input --feed stateN:state --steps 375 --decision output:0.5 \\
        --divergence-db 10 --json OUT.json

    stream_rerun.py --saved-outputs DIR --reference-run REF --run RUN --feed stateN:state \\
        --decision output:0.5 --divergence-db 10 --json OUT.json

The second form reads per-step outputs saved by the tool, DIR/<run>/s<k>.npz (k = 0-based step,
members keyed by output name), and computes the "free" block only.

Conventions:
- ONNX Runtime CPU execution provider, 1 intra-op and 1 inter-op thread, sequential execution;
  graph optimizations ORT_DISABLE_ALL for the reference and ORT_ENABLE_ALL for the model.
- Chunking: window - hop zeros padded on the left; chunk k = padded[k*hop : k*hop + window],
  reshaped to the streamed input's shape; stop after --steps steps or when fewer than `window`
  samples remain. Fed-back state inputs start as zeros of their declared shape and dtype; at
  step k > 0 each gets the named output of step k - 1.
- sqnr_db = 10*log10(sum(ref^2) / sum((out - ref)^2)) in float64 over the step's elements; +inf if
  the error sum is 0, -inf if sum(ref^2) is 0 and the error is not. JSON writes infinities as the
  strings "inf" / "-inf".
- decision = output > threshold (elementwise); a step disagrees if any element differs.
- divergence_step: first 1-based step whose lowest sqnr_db over the fed-back outputs is below
  --divergence-db; null if none.
- growth_db_per_step: least-squares slope of -(that lowest sqnr_db) against the 1-based step over
  steps 1..=divergence_step (all steps if none), finite values only; null if fewer than 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

_NP_OF_ORT = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def parse_feed(specs: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for spec in specs:
        for part in spec.split(","):
            out, sep, inp = part.partition(":")
            if not sep or not out or not inp:
                raise SystemExit(f"--feed expects OUTPUT:INPUT, got {part!r}")
            pairs.append((out, inp))
    return pairs


def parse_decision(spec: str) -> tuple[str, float]:
    name, sep, thr = spec.rpartition(":")
    if not sep or not name:
        raise SystemExit(f"--decision expects OUTPUT:THRESHOLD, got {spec!r}")
    return name, float(thr)


def sqnr_db(ref: np.ndarray, out: np.ndarray) -> float:
    r = np.asarray(ref).astype(np.float64).reshape(-1)
    o = np.asarray(out).astype(np.float64).reshape(-1)
    if r.shape != o.shape:
        raise SystemExit(f"shape mismatch: reference {np.shape(ref)} vs {np.shape(out)}")
    e = o - r
    sig = float(np.sum(r * r))
    err = float(np.sum(e * e))
    if err == 0.0:
        return math.inf
    if sig == 0.0:
        return -math.inf
    return 10.0 * math.log10(sig / err)


def decision(values: np.ndarray, thr: float) -> list[bool]:
    return [bool(v) for v in (np.asarray(values).reshape(-1) > thr)]


def session(path: str, optimize: bool):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])


def _shape_of(arg) -> list[int]:
    dims = []
    for d in arg.shape:
        if not isinstance(d, int) or d < 0:
            raise SystemExit(f"input {arg.name} has a non-static dimension {d!r} in {arg.shape}")
        dims.append(d)
    return dims


def stream_spec(sess, input_name: str, feeds: list[tuple[str, str]]):
    ins = {i.name: i for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    if input_name not in ins:
        raise SystemExit(f"model has no input {input_name!r} (inputs: {sorted(ins)})")
    for o, i in feeds:
        if o not in outs:
            raise SystemExit(f"model has no output {o!r} (outputs: {outs})")
        if i not in ins:
            raise SystemExit(f"model has no input {i!r} (inputs: {sorted(ins)})")
    other = set(ins) - {input_name} - {i for _, i in feeds}
    if other:
        raise SystemExit(f"inputs neither streamed nor fed back: {sorted(other)}")
    a = ins[input_name]
    zeros = {i: np.zeros(_shape_of(ins[i]), dtype=_NP_OF_ORT[ins[i].type]) for _, i in feeds}
    return _shape_of(a), _NP_OF_ORT[a.type], outs, zeros


def chunks(audio: np.ndarray, window: int, hop: int, steps: int | None) -> list[np.ndarray]:
    if window < hop or hop <= 0:
        raise SystemExit("--window must be >= --hop > 0")
    padded = np.concatenate([np.zeros(window - hop, dtype=audio.dtype), audio.reshape(-1)])
    res = []
    k = 0
    while (steps is None or k < steps) and k * hop + window <= len(padded):
        res.append(padded[k * hop:k * hop + window])
        k += 1
    return res


def run_stream(sess, outs, input_name, shape, dtype, xs, feeds, zeros, teacher=None):
    """Per-step outputs (dicts). teacher: the reference's per-step outputs to take states from."""
    state = dict(zeros)
    res = []
    for k, x in enumerate(xs):
        f = {input_name: x.astype(dtype).reshape(shape)}
        if teacher is not None and k > 0:
            for o, i in feeds:
                f[i] = teacher[k - 1][o]
        else:
            f.update(state)
        r = dict(zip(outs, sess.run(outs, f)))
        res.append(r)
        for o, i in feeds:
            state[i] = r[o]
    return res


def block(ref: list[dict], run: list[dict], feeds, dec: tuple[str, float], div_db: float,
          with_decisions: bool, with_growth: bool) -> dict:
    n = min(len(ref), len(run))
    names = [k for k in ref[0] if all(k in s for s in run[:n])] if n else []
    sq = {name: [sqnr_db(ref[k][name], run[k][name]) for k in range(n)] for name in names}
    dname, thr = dec
    if n and (dname not in ref[0] or dname not in run[0]):
        raise SystemExit(f"decision output {dname!r} missing")
    dref = [decision(ref[k][dname], thr) for k in range(n)]
    drun = [decision(run[k][dname], thr) for k in range(n)]
    disagreements = sum(1 for a, b in zip(dref, drun) if a != b)
    fed = [o for o, _ in feeds]
    for o in fed:
        if o not in sq:
            raise SystemExit(f"fed-back output {o!r} missing from the outputs")
    lowest = [min(sq[o][k] for o in fed) for k in range(n)] if fed else []
    divergence = next((k + 1 for k, v in enumerate(lowest) if v < div_db), None)
    out = {"sqnr_db": sq}
    if with_decisions:
        flat = lambda d: d[0] if len(d) == 1 else d
        out["decisions"] = {"reference": [flat(d) for d in dref], "model": [flat(d) for d in drun]}
    out["disagreements"] = disagreements
    out["divergence_step"] = divergence
    if with_growth:
        last = divergence if divergence is not None else n
        pts = [(k + 1, -lowest[k]) for k in range(last) if math.isfinite(lowest[k])]
        if len(pts) < 2:
            out["growth_db_per_step"] = None
        else:
            x = np.array([p[0] for p in pts], dtype=np.float64)
            y = np.array([p[1] for p in pts], dtype=np.float64)
            xm, ym = x.mean(), y.mean()
            out["growth_db_per_step"] = float(np.sum((x - xm) * (y - ym)) / np.sum((x - xm) ** 2))
    return out


def load_saved(root: str, run: str, steps: int | None) -> list[dict]:
    d = os.path.join(root, run)
    res = []
    k = 0
    while steps is None or k < steps:
        p = os.path.join(d, f"s{k}.npz")
        if not os.path.exists(p):
            break
        with np.load(p, allow_pickle=False) as z:
            res.append({name: z[name] for name in z.files})
        k += 1
    if not res:
        raise SystemExit(f"no saved outputs in {d} (expected s0.npz, s1.npz, ...)")
    return res


def clean(x):
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", help="reference model (run with ORT_DISABLE_ALL)")
    ap.add_argument("--model", help="model under test (run with ORT_ENABLE_ALL)")
    ap.add_argument("--audio", help=".npy with the 1-D signal")
    ap.add_argument("--window", type=int, help="samples per chunk")
    ap.add_argument("--hop", type=int, help="new samples per step")
    ap.add_argument("--input-name", help="the streamed input")
    ap.add_argument("--saved-outputs", metavar="DIR", help="read DIR/<run>/s<k>.npz instead of running models")
    ap.add_argument("--reference-run", help="with --saved-outputs: the reference's run name")
    ap.add_argument("--run", help="with --saved-outputs: the run to compare")
    ap.add_argument("--feed", action="append", default=[], metavar="OUTPUT:INPUT",
                    help="fed-back state, repeatable or comma-separated")
    ap.add_argument("--steps", type=int, help="at most this many steps")
    ap.add_argument("--decision", required=True, metavar="OUTPUT:THRESHOLD")
    ap.add_argument("--divergence-db", type=float, required=True)
    ap.add_argument("--json", required=True, help="where to write the result")
    a = ap.parse_args()

    feeds = parse_feed(a.feed)
    dec = parse_decision(a.decision)
    run_args = [a.reference, a.model, a.audio, a.window, a.hop, a.input_name]
    saved_args = [a.saved_outputs, a.reference_run, a.run]
    t0 = time.perf_counter()
    if a.saved_outputs is not None or a.reference_run is not None or a.run is not None:
        if any(v is not None for v in run_args):
            raise SystemExit("--saved-outputs/--reference-run/--run exclude --reference/--model/--audio/"
                             "--window/--hop/--input-name")
        if any(v is None for v in saved_args):
            raise SystemExit("--saved-outputs needs --reference-run and --run")
        ref = load_saved(a.saved_outputs, a.reference_run, a.steps)
        run = load_saved(a.saved_outputs, a.run, a.steps)
        n = min(len(ref), len(run))
        result = {"steps": n,
                  "free": block(ref[:n], run[:n], feeds, dec, a.divergence_db, True, True)}
    else:
        if any(v is None for v in run_args):
            raise SystemExit("need --reference, --model, --audio, --window, --hop and --input-name "
                             "(or --saved-outputs)")
        if not feeds:
            raise SystemExit("need at least one --feed OUTPUT:INPUT")
        audio = np.load(a.audio, allow_pickle=False)
        rs = session(a.reference, optimize=False)
        ms = session(a.model, optimize=True)
        shape, dtype, routs, rzeros = stream_spec(rs, a.input_name, feeds)
        mshape, mdtype, mouts, mzeros = stream_spec(ms, a.input_name, feeds)
        if int(np.prod(shape)) != a.window or int(np.prod(mshape)) != a.window:
            raise SystemExit(f"--window {a.window} does not match the input shapes {shape} / {mshape}")
        xs = chunks(audio, a.window, a.hop, a.steps)
        ref = run_stream(rs, routs, a.input_name, shape, dtype, xs, feeds, rzeros)
        free = run_stream(ms, mouts, a.input_name, mshape, mdtype, xs, feeds, mzeros)
        tf = run_stream(ms, mouts, a.input_name, mshape, mdtype, xs, feeds, mzeros, teacher=ref)
        result = {"steps": len(xs),
                  "free": block(ref, free, feeds, dec, a.divergence_db, True, True),
                  "teacher_forced": block(ref, tf, feeds, dec, a.divergence_db, False, False)}
    text = json.dumps(clean(result), indent=1, allow_nan=False) + "\n"
    with open(a.json, "w") as f:
        f.write(text)
    print(f"stream_rerun: {result['steps']} steps, wall {time.perf_counter() - t0:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
