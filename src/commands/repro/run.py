#!/usr/bin/env python3
"""Reproduces, without npu-audit, the departure this bundle was made for.

Runs model.onnx on inputs.npz on the target (and on the comparison when it is a target this
machine can run), prints each output's figures against the comparison (quantization steps,
differing elements, largest absolute difference) and against the golden activations (SQNR in
dB), checks the fresh outputs against expected/ bit for bit, and says whether the departure
reproduces. Needs only the packages pinned in requirements.txt:

    python3 -m venv venv && venv/bin/pip install -r requirements.txt && venv/bin/python run.py

On x86-64 Linux the QNN HTP backend is Qualcomm's HTP simulator; on a Snapdragon device it is the
NPU itself. Exit status: 0 the departure reproduces, 1 it does not, 2 the bundle cannot run here.
"""

import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))

OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class BundleError(Exception):
    pass


def qnn_plugin(given):
    """The QNN plugin library: as given, else the one of the installed onnxruntime-qnn."""
    if given:
        if not os.path.isfile(given):
            raise BundleError(f"--qnn-plugin {given}: no such file")
        return os.path.abspath(given)
    try:
        import onnxruntime_qnn
    except ImportError as e:
        raise BundleError("the target is QNN: pip install -r requirements.txt (onnxruntime-qnn), or --qnn-plugin PATH") from e
    pkg = os.path.dirname(onnxruntime_qnn.__file__)
    for name in ("libonnxruntime_providers_qnn.so", "onnxruntime_providers_qnn.dll"):
        if os.path.isfile(os.path.join(pkg, name)):
            return os.path.join(pkg, name)
    raise BundleError(f"no QNN plugin library in {pkg}")


def session(side, plugin_path):
    """A session of model.onnx on one side, its devices chosen explicitly (once a plugin is
    registered, ONNX Runtime would otherwise hand even a CPU session to it)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = side["threads"]
    so.graph_optimization_level = OPT_LEVELS[side["opt"]]
    for k, v in side["session_config"].items():
        so.add_session_config_entry(k, v)
    options = dict(side["ep_options"])
    if side["kind"] == "qnn":
        plugin = qnn_plugin(plugin_path)
        if "QNNExecutionProvider" not in {d.ep_name for d in ort.get_ep_devices()}:
            ort.register_execution_provider_library("QNNExecutionProvider", plugin)
        backend = "QnnHtp.dll" if os.name == "nt" else "libQnnHtp.so"
        options.setdefault("backend_path", os.path.join(os.path.dirname(plugin), backend))
        ep = "QNNExecutionProvider"
    else:
        ep = "CPUExecutionProvider"
    devices = [d for d in ort.get_ep_devices() if d.ep_name == ep]
    if not devices:
        raise BundleError(f"{ep} offers no device here")
    so.add_provider_for_devices(devices, options)
    return ort.InferenceSession(os.path.join(HERE, "model.onnx"), sess_options=so)


def run(side, inputs, plugin_path):
    """The side's outputs by name, fresh; None when this machine cannot run that side."""
    if side["kind"] not in ("cpu", "qnn"):
        return None
    s = session(side, plugin_path)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, inputs)))


def load(name):
    with np.load(os.path.join(HERE, name), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def real(values, quant):
    """Real values: codes dequantized as the ONNX specification says, floats as they are."""
    v = values.astype(np.float64)
    if quant is None:
        return v
    return (v - quant["zero_point"]) * np.float64(np.float32(quant["scale"]))


def golden_codes(golden, quant):
    """The golden activation quantized as QuantizeLinear does (float32 division, rounding half to
    even, saturation)."""
    if quant is None:
        return golden
    info = np.iinfo(np.dtype(quant["dtype"]))
    q = np.rint(golden.astype(np.float32) / np.float32(quant["scale"])).astype(np.float64) + quant["zero_point"]
    return np.clip(q, info.min, info.max).astype(quant["dtype"])


def sqnr_db(values, quant, golden):
    if golden is None:
        return None
    r = golden.astype(np.float64).ravel()
    e = real(values, quant).ravel() - r
    noise = float(np.dot(e, e))
    return float("inf") if noise == 0.0 else 10.0 * np.log10(float(np.dot(r, r)) / noise)


def figures(out, target, against, golden):
    quant = out["quant"]
    t, a = target.ravel(), against.ravel()
    differ = t.view(np.uint8).reshape(t.size, -1) != a.view(np.uint8).reshape(a.size, -1)
    mask = differ.any(axis=1)
    steps = None
    if quant is not None:
        steps = int(np.abs(t[mask].astype(np.int64) - a[mask].astype(np.int64)).max(initial=0))
    diff = np.abs(real(t[mask], quant) - real(a[mask], quant))
    return {
        "differing": int(mask.sum()),
        "elements": int(t.size),
        "max_steps": steps,
        "max_abs": float(diff.max(initial=0.0)),
        "target_sqnr_db": sqnr_db(target, quant, golden),
        "against_sqnr_db": sqnr_db(against, quant, golden),
    }


def departs(f, peak, c):
    if c["max_sqnr_db"] is not None:
        if f["target_sqnr_db"] is None or f["against_sqnr_db"] is None:
            return False
        return f["target_sqnr_db"] <= c["max_sqnr_db"] < f["against_sqnr_db"]
    if f["max_steps"] is not None:
        return f["max_steps"] >= c["min_steps"]
    return f["differing"] > 0 and (peak == 0.0 or f["max_abs"] / peak > c["float_tolerance"])


def db(v):
    return "n/a" if v is None else f"{v:.4f}"


def expect_failure(cfg, inputs, plugin_path):
    """A bundle of a model the target refuses: it reproduces when the target fails on it and the
    comparison runs it."""
    who = f"{cfg['target']['id']} against {cfg['against']['id']}"
    try:
        run(cfg["target"], inputs, plugin_path)
    except BundleError:
        raise
    except Exception as e:  # ONNX Runtime's own error: the finding
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"{cfg['target']['id']}: fails: {first}")
        if cfg["against"]["kind"] in ("cpu", "qnn"):
            run(cfg["against"], inputs, plugin_path)
            print(f"{cfg['against']['id']}: runs it")
        print(f"REPRODUCED: {who}; the target refuses the model")
        return 0
    print(f"NOT REPRODUCED: {who}; the target runs the model")
    return 1


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qnn-plugin", metavar="PATH", help="the QNN plugin library (default: the installed onnxruntime-qnn's)")
    args = p.parse_args()
    with open(os.path.join(HERE, "bundle.json")) as f:
        cfg = json.load(f)
    inputs = load("inputs.npz")
    golden = load("expected/golden.npz") if cfg["golden"] else None
    if cfg["target_fails"]:
        return expect_failure(cfg, inputs, args.qnn_plugin)
    fresh, stored = {}, {}
    for role in ("target", "against"):
        side = cfg[role]
        if side["kind"] == "golden":
            stored[role] = {o["name"]: golden_codes(golden[o["name"]], o["quant"]) for o in cfg["outputs"]}
            continue
        stored[role] = load(side["expected"])
        fresh[role] = run(side, inputs, args.qnn_plugin)
        if fresh[role] is None:
            print(f"{side['id']}: cannot run here; its stored outputs ({side['expected']}) are used")
        else:
            same = all(same_bits(fresh[role][n], stored[role][n]) for n in stored[role])
            print(f"{side['id']}: ran here; outputs {'bit-identical to' if same else 'DIFFER from'} {side['expected']}")
    seen = {role: fresh.get(role) or stored[role] for role in ("target", "against")}
    any_departs = False
    for out in cfg["outputs"]:
        name = out["name"]
        f = figures(out, seen["target"][name], seen["against"][name], None if golden is None else golden[name])
        peak = float(np.abs(real(seen["against"][name], out["quant"])).max(initial=0.0))
        d = departs(f, peak, cfg["criterion"])
        any_departs |= d
        steps = "" if f["max_steps"] is None else f", max {f['max_steps']} steps"
        print(
            f"OUTPUT {name}: {f['differing']} of {f['elements']} differ{steps}, max abs {f['max_abs']:.6g}, "
            f"target {db(f['target_sqnr_db'])} dB, comparison {db(f['against_sqnr_db'])} dB against the golden run"
            f"{' (departs)' if d else ''}"
        )
    who = f"{cfg['target']['id']} against {cfg['against']['id']}"
    print(f"{'REPRODUCED' if any_departs else 'NOT REPRODUCED'}: {who}; departing means {cfg['criterion']['text']}")
    return 0 if any_departs else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BundleError as e:
        print(f"run.py: {e}", file=sys.stderr)
        sys.exit(2)
