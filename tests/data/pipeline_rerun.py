#!/usr/bin/env python3
"""Independent rerun of a two-stage pipeline audit on the ONNX Runtime CPU EP: NumPy and
onnxruntime only, written from docs/streams.md's definitions, not from the tool's code.

    pipeline_rerun.py STAGE1.onnx STAGE1_REF.onnx STAGE2.onnx STAGE2_REF.onnx INPUTS.npz FEED OUT.json

FEED is `INPUT=OUTPUT`: stage 2's input fed by stage 1's output. Quantized stages run with every
graph optimization (ORT_ENABLE_ALL), references with none (ORT_DISABLE_ALL); 1 thread each.
Figures on stage 2's first output, against the golden chain (both references):
- introduced: stage 2 fed the golden stage-1 output;
- propagated: stage 2's reference fed the quantized stage-1 output;
- chained: stage 2 fed the quantized stage-1 output.
sqnr_db = 10*log10(sum(ref^2)/sum((out-ref)^2)) in float64.
"""

import json
import sys

import numpy as np
import onnxruntime as ort


def session(path, optimize):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def sqnr(out, ref):
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    err = float(np.sum((out - ref) ** 2))
    sig = float(np.sum(ref**2))
    if err == 0.0:
        return "inf"
    return 10.0 * np.log10(sig / err)


def main():
    s1, s1_ref, s2, s2_ref, inputs, feed, out_path = sys.argv[1:8]
    feed_in, feed_out = feed.split("=")
    feeds = dict(np.load(inputs))
    q1, r1 = session(s1, True), session(s1_ref, False)
    q2, r2 = session(s2, True), session(s2_ref, False)
    names1 = [o.name for o in q1.get_outputs()]
    k = names1.index(feed_out)
    golden1 = r1.run(None, feeds)[k]
    quant1 = q1.run(None, feeds)[k]
    golden2 = r2.run(None, {feed_in: golden1})[0]
    figures = {
        "stage1": sqnr(quant1, golden1),
        "introduced": sqnr(q2.run(None, {feed_in: golden1})[0], golden2),
        "propagated": sqnr(r2.run(None, {feed_in: quant1})[0], golden2),
        "chained": sqnr(q2.run(None, {feed_in: quant1})[0], golden2),
    }
    with open(out_path, "w") as f:
        json.dump(figures, f)


if __name__ == "__main__":
    main()
