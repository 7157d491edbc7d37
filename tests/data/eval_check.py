"""Recomputes an `npu-audit eval` independently and compares every figure with its report.

Written from docs/eval.md and the textbook definitions, not from the tool's code:
- predictions: ONNX Runtime's Python package (the same release as the tool's CPU build) runs the
  reference (graph optimizations off) and the quantized model (all optimizations on, and off for
  `cpu:noopt`), 1 intra-op thread; classes by NumPy's argmax; CTC decoded by PaddleOCR's own
  post-processing (RapidOCR's CTCLabelDecode, imported from the package given with --rapidocr).
  Runs the tool could not be rerun here (QNN targets) are taken from the records the tool saved.
- accuracy and its interval: statsmodels' proportion_confint(method="wilson").
- McNemar: statsmodels' mcnemar(exact=True) on the paired table.
- accuracy drops: Tango's score interval, each bound by SciPy's brentq on the score statistic with
  the nuisance parameter maximised numerically (tests/data/tango_check.py).
- bootstrap (CER and its drop): docs/eval.md's SplitMix64 draws, NumPy's percentile (linear).
- CER / WER: Levenshtein distances written here, pooled over the set.
- SQNR: 10 log10(sum r^2 / sum (o - r)^2) in float64, the worst output.

    eval_check.py --report R.json --records DIR --dataset DIR --reference FP32 --model Q
        --task classify|ctc [--vocab FILE --rapidocr DIR] [--rerun cpu,cpu:noopt]

Prints one line per figure checked and exits 1 on the first mismatch.
"""

import argparse
import csv
import hashlib
import json
import math
import pathlib
import sys

import numpy as np
import onnxruntime as ort
from scipy.stats import norm
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import tango_check

GAMMA = np.uint64(0x9E3779B97F4A7C15)
CHECKED = []


def finalize(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def resamples(seed, n, count):
    """docs/eval.md: the stream's state starts at mix(seed) = finalize(seed + gamma); each draw
    advances it by gamma and takes floor(u * n), u = (finalize(state) >> 11) / 2^53."""
    with np.errstate(over="ignore"):
        start = finalize(np.uint64(seed) + GAMMA)
        steps = np.arange(1, n * count + 1, dtype=np.uint64)
        states = start + steps * GAMMA
        u = (finalize(states) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return np.minimum((u * n).astype(np.int64), n - 1).reshape(count, n)


def close(what, got, want, tol=1e-9):
    if isinstance(want, float) and math.isnan(want):
        ok = got in (None, "NaN", "nan") or (isinstance(got, float) and math.isnan(got))
    else:
        ok = got is not None and abs(float(got) - float(want)) <= tol * max(1.0, abs(float(want)))
    CHECKED.append(what)
    if not ok:
        sys.exit(f"MISMATCH {what}: report {got!r}, recomputed {want!r}")
    print(f"ok {what}: {want}")


def same(what, got, want):
    CHECKED.append(what)
    if got != want:
        sys.exit(f"MISMATCH {what}: report {got!r}, recomputed {want!r}")
    print(f"ok {what}")


def levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[len(b)]


def session(path, optimize):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def sqnr(out, ref):
    out, ref = out.astype(np.float64), ref.astype(np.float64)
    noise = float(np.sum((out - ref) ** 2))
    signal = float(np.sum(ref**2))
    if noise == 0.0:
        return math.inf
    return -math.inf if signal == 0.0 else 10.0 * math.log10(signal / noise)


class Runner:
    """Outputs of every sample of the set through one session."""

    def __init__(self, args, ids):
        self.ids = ids
        self.dataset = pathlib.Path(args.dataset)

    def outputs(self, sess):
        names = [i.name for i in sess.get_inputs()]
        for sid in self.ids:
            arrays = np.load(self.dataset / f"{sid}.npz")
            yield sess.run(None, {n: arrays[n] for n in names})


def predictions(args, outputs):
    if args.task == "ctc":
        import importlib.util

        # The module alone: the package's __init__ pulls in OpenCV, which decoding does not need.
        path = pathlib.Path(args.rapidocr) / "rapidocr_onnxruntime" / "ch_ppocr_rec" / "utils.py"
        spec = importlib.util.spec_from_file_location("rapidocr_rec_utils", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        CTCLabelDecode = module.CTCLabelDecode
        characters = pathlib.Path(args.vocab).read_text(encoding="utf-8").splitlines()
        decode = CTCLabelDecode(character=characters)
        return [decode(o[0])[0][0] for o in outputs]
    return [int(np.argmax(o[0])) for o in outputs]


def judged(args, pred, label):
    """(correct, char edits, label chars, word edits, label words)."""
    if args.task == "ctc":
        return (
            pred == label,
            levenshtein(list(pred), list(label)),
            len(label),
            levenshtein(pred.split(), label.split()),
            len(label.split()),
        )
    return (pred == int(label), 0, 0, 0, 0)


def percentiles(values):
    return {q: float(np.percentile(values, q)) for q in (2.5, 5.0, 95.0, 97.5)}


def check_metrics(args, name, report_metrics, rows, stat):
    k = sum(r[0] for r in rows)
    n = len(rows)
    same(f"{name} accuracy k/n", (report_metrics["accuracy"]["k"], report_metrics["accuracy"]["n"]), (k, n))
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    close(f"{name} accuracy", report_metrics["accuracy"]["value"], k / n)
    close(f"{name} wilson lo", report_metrics["accuracy"]["lo"], max(0.0, lo), 1e-7)
    close(f"{name} wilson hi", report_metrics["accuracy"]["hi"], min(1.0, hi), 1e-7)
    if args.task == "ctc":
        for key, e, c in (("cer", 1, 2), ("wer", 3, 4)):
            edits = np.array([r[e] for r in rows], dtype=np.float64)
            total = np.array([r[c] for r in rows], dtype=np.float64)
            draws = resamples(stat["seed"], n, stat["resamples"])
            boot = edits[draws].sum(axis=1) / total[draws].sum(axis=1)
            p = percentiles(boot)
            close(f"{name} {key}", report_metrics[key]["value"], edits.sum() / total.sum())
            close(f"{name} {key} lo", report_metrics[key]["lo"], p[2.5])
            close(f"{name} {key} hi", report_metrics[key]["hi"], p[97.5])


def check_comparison(args, name, cmp, rows, other_rows, stat):
    n = len(rows)
    fixed = sum(1 for t, o in zip(rows, other_rows) if t[0] and not o[0])
    broken = sum(1 for t, o in zip(rows, other_rows) if o[0] and not t[0])
    same(f"{name} vs {cmp['against']} fixed/broken", (cmp["fixed"], cmp["broken"]), (fixed, broken))
    both = sum(1 for t, o in zip(rows, other_rows) if t[0] and o[0])
    neither = n - both - fixed - broken
    table = [[both, broken], [fixed, neither]]
    close(f"{name} vs {cmp['against']} McNemar p", cmp["mcnemar_p"], float(mcnemar(table, exact=True).pvalue), 1e-9)
    if args.task == "ctc":
        draws = resamples(stat["seed"], n, stat["resamples"])
        te, tc = (np.array([r[i] for r in rows], dtype=np.float64) for i in (1, 2))
        oe, oc = (np.array([r[i] for r in other_rows], dtype=np.float64) for i in (1, 2))
        value = 100 * (te.sum() / tc.sum() - oe.sum() / oc.sum())
        boot = 100 * (te[draws].sum(axis=1) / tc[draws].sum(axis=1) - oe[draws].sum(axis=1) / oc[draws].sum(axis=1))
        p = percentiles(boot)
        same(f"{name} vs {cmp['against']} method", cmp["method"], "bootstrap")
        if not np.any(te != oe):
            same(f"{name} vs {cmp['against']} unbounded", "unbounded" in cmp["drop"], True)
            p = {q: math.nan for q in p}
        bounds = (p[2.5], p[97.5], p[5.0], p[95.0])
    else:
        value = 100 * (broken - fixed) / n
        z95, z90 = norm.ppf(0.975), norm.ppf(0.95)
        bounds = tuple(100 * tango_check.bound(broken, fixed, n, z, up)
                       for z, up in ((z95, False), (z95, True), (z90, False), (z90, True)))
        same(f"{name} vs {cmp['against']} method", cmp["method"], "tango")
        close(f"{name} vs {cmp['against']} resolution", cmp["resolution"], 100 * z90**2 / (n + z90**2), 1e-9)
    lo95, hi95, lo90, hi90 = bounds
    # The tool's closed form against SciPy's numerical maximisation: agreement to 1e-6 points.
    tol = 1e-9 if args.task == "ctc" else 1e-6
    close(f"{name} vs {cmp['against']} drop", cmp["drop"]["value"], value)
    close(f"{name} vs {cmp['against']} drop lo", cmp["drop"]["lo"], lo95, tol)
    close(f"{name} vs {cmp['against']} drop hi", cmp["drop"]["hi"], hi95, tol)
    close(f"{name} vs {cmp['against']} drop upper", cmp["drop_upper"], hi90, tol)
    close(f"{name} vs {cmp['against']} drop lower", cmp["drop_lower"], lo90, tol)
    margin = stat.get("margin_points")
    if margin is not None:
        same(f"{name} vs {cmp['against']} non-inferior", cmp.get("non_inferior"), hi90 <= margin)
        same(f"{name} vs {cmp['against']} equivalent", cmp.get("equivalent"), lo90 >= -margin and hi90 <= margin)


def recorded(args, record):
    """The prediction a record keeps: the transcript, or the top-1 class."""
    p = record["prediction"]
    return p["text"] if args.task == "ctc" else p["classes"][0]


def records_path(records, run):
    """docs/eval.md: the run's id with every character but letters, digits, '-' and '.' made '_',
    then '-' and the first 12 hex digits of the id's SHA-256."""
    name = "".join(c if (c.isascii() and c.isalnum()) or c in "-." else "_" for c in run)
    digest = hashlib.sha256(run.encode()).hexdigest()
    if len(name) > 96:  # a long id: cut, with a digest of the whole
        name = f"{name[:83]}-{digest[:12]}"
    return pathlib.Path(records) / f"{name}-{digest[:12]}.jsonl"


def read_records(records, run):
    lines = [json.loads(line) for line in records_path(records, run).read_text(encoding="utf-8").splitlines() if line.strip()]
    # The first line names the run; each other is {"input": <SHA-256 of the inputs>, "record": {...}}.
    same("records header", lines[0], {"run": run})
    return [line["record"] for line in lines[1:]]


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--report", "--records", "--dataset", "--reference", "--model", "--task"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--vocab")
    parser.add_argument("--rapidocr")
    parser.add_argument("--rerun", default="cpu,cpu:noopt")
    args = parser.parse_args()
    report = json.loads(pathlib.Path(args.report).read_text(encoding="utf-8"))
    stat = report["statistics"]
    with open(pathlib.Path(args.dataset) / "labels.csv", newline="", encoding="utf-8") as f:
        labelled = list(csv.DictReader(f))
    # The set's order (file names by their bytes), cut to what the eval took (--limit).
    ids = sorted((row["id"] for row in labelled), key=lambda s: s.encode())[: report["dataset"]["samples"]]
    labels = {row["id"]: row["label"] for row in labelled}
    runner = Runner(args, ids)

    ref_outputs = list(runner.outputs(session(args.reference, False)))
    ref_pred = predictions(args, ref_outputs)
    same("reference predictions", [recorded(args, r) for r in read_records(args.records, "reference")], ref_pred)
    ref_rows = [judged(args, p, labels[i]) for p, i in zip(ref_pred, ids)]
    check_metrics(args, "reference", report["reference_metrics"], ref_rows, stat)

    rerun = set(filter(None, args.rerun.split(",")))
    rows_of = {}
    for target in report["targets"]:
        name = target["id"]
        records = read_records(args.records, name)
        if name in rerun:
            outs = list(runner.outputs(session(args.model, name != "cpu:noopt")))
            pred = predictions(args, outs)
            same(f"{name} predictions", [recorded(args, r) for r in records], pred)
            worst = [min(sqnr(o, r) for o, r in zip(out, ref)) for out, ref in zip(outs, ref_outputs)]
            for rec, s in zip(records, worst):
                close(f"{name} {rec['id']} sqnr", rec["sqnr_db"], s, 1e-9)
            close(f"{name} median sqnr", target["median_sqnr_db"], float(np.median(worst)))
        else:
            pred = [recorded(args, r) for r in records]
        rows = [judged(args, p, labels[i]) for p, i in zip(pred, ids)]
        rows_of[name] = rows
        check_metrics(args, name, target["metrics"], rows, stat)
        flips = [(i, "fixed" if t[0] else "broken") for i, t, r in zip(ids, rows, ref_rows) if t[0] != r[0]]
        same(f"{name} flips", [(f["id"], f["kind"]) for f in target.get("flips", [])], flips)
    for target in report["targets"]:
        for cmp in target.get("comparisons", []):
            other = ref_rows if cmp["against"] == "reference" else rows_of[cmp["against"]]
            check_comparison(args, target["id"], cmp, rows_of[target["id"]], other, stat)
    print(f"checked {len(CHECKED)} figures")


if __name__ == "__main__":
    main()
