"""Checks a model `npu-audit matrix --search widen16` wrote against the ONNX definitions of
QuantizeLinear and DequantizeLinear, with NumPy, independently of the tool:

    QuantizeLinear:   q = saturate(round_half_to_even(x / scale) + zero_point)
    DequantizeLinear: x = (q - zero_point) * scale

For every QuantizeLinear of CANDIDATE whose zero point is 16-bit while the QuantizeLinear of the
same name in ORIGINAL is 8-bit: the 16-bit pair covers the 8-bit pair's real range (its two ends
dequantize to the same values), every 8-bit grid point is on the 16-bit grid, and over the range
the 16-bit round trip errs by at most half a 16-bit step (1/257 of the 8-bit step). The
DequantizeLinear nodes reading its codes use the same scale and zero point; below opset 21 both
nodes are in the com.microsoft domain. Prints one JSON object.

usage: python check_widened.py ORIGINAL.onnx CANDIDATE.onnx
"""
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper

RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127),
          np.dtype(np.uint16): (0, 65535), np.dtype(np.int16): (-32768, 32767)}


def constants(model):
    out = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def quantize(x, scale, zp, dtype):
    lo, hi = RANGES[np.dtype(dtype)]
    return np.clip(np.round(x / scale) + zp, lo, hi)  # np.round rounds half to even


def dequantize(q, scale, zp):
    return (q - zp) * scale


def opset(model):
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def check(original, candidate):
    c0, c1 = constants(original), constants(candidate)
    q0 = {n.name: n for n in original.graph.node if n.op_type == "QuantizeLinear"}
    widened = []
    for n in candidate.graph.node:
        if n.op_type != "QuantizeLinear" or n.name not in q0:
            continue
        zp16 = c1[n.input[2]]
        if zp16.dtype not in (np.uint16, np.int16):
            continue
        old = q0[n.name]
        s8, z8 = np.float64(c0[old.input[1]]), np.float64(c0[old.input[2]])
        s16, z16 = np.float64(c1[n.input[1]]), np.float64(zp16)
        d8, d16 = c0[old.input[2]].dtype, zp16.dtype
        lo8, hi8 = RANGES[d8]
        lo16, hi16 = RANGES[d16]
        ends8 = dequantize(np.array([lo8, hi8], np.float64), s8, z8)
        ends16 = dequantize(np.array([lo16, hi16], np.float64), s16, z16)
        grid8 = dequantize(np.arange(lo8, hi8 + 1, dtype=np.float64), s8, z8)
        on_grid = dequantize(quantize(grid8, s16, z16, d16), s16, z16)
        x = np.linspace(ends8[0], ends8[1], 200_001)
        round_trip = np.abs(dequantize(quantize(x, s16, z16, d16), s16, z16) - x)
        readers = [m for m in candidate.graph.node if m.op_type == "DequantizeLinear" and m.input[0] == n.output[0]]
        widened.append({
            "tensor": n.input[0],
            "code_type": str(d16),
            "range_8": ends8.tolist(),
            "range_16": ends16.tolist(),
            "range_rel_diff": float(np.max(np.abs(ends16 - ends8)) / max(np.max(np.abs(ends8)), 1e-30)),
            "grid_max_abs": float(np.max(np.abs(on_grid - grid8))),
            "step_8": float(s8),
            "step_16": float(s16),
            "round_trip_max_in_steps_16": float(np.max(round_trip) / s16),
            "readers": len(readers),
            "readers_share_params": all(m.input[1:3] == n.input[1:3] for m in readers),
            "domain_ok": all((m.domain == "com.microsoft") == (opset(candidate) < 21) for m in [n, *readers]),
        })
    return {"opset": opset(candidate), "widened": widened}


if __name__ == "__main__":
    a, b = onnx.load(sys.argv[1]), onnx.load(sys.argv[2])
    print(json.dumps(check(a, b)))
