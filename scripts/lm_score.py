#!/usr/bin/env python3
"""An independent corpus-drift scorer for decoder-only generation specs (docs/generation.md), on the
ONNX Runtime CPU EP from Python: the figures `npu-audit eval SPEC.toml --task score` must reproduce.

    python3 scripts/lm_score.py [--target-ep cpu|cpu:noopt] [--out FILE] SPEC.toml SET_DIR

What: for every SET_DIR/<id>.npz (input_ids int64 [1,n], n >= 2; ids in sorted order, as
scripts/text-set writes them) the spec's start_tokens then the window's n tokens are fed
teacher-forced, on the audited spec (the target) and on its `reference` spec (the spec itself when
it names none), each through its own parts:

- static form: the `step` part a token per call (position_ids = slots filled n, attention_mask
  [1,K+1] = 1 for slots 0..n-1 and the last element, the token's present.N.key|value written into
  slot n); when the spec has a `prefill` part (prefill_length = N), that part instead, in chunks
  of N, the last padded at its end with the end token (attention_mask [1,K+N]: the filled slots,
  then 1 for each real chunk token; position_ids filled + j; the real tokens' presents written into
  the next slots). The start tokens and all n window tokens must fit in kv_length.
- dynamic form: the `decoder` part, once, over the whole sequence (past length 0).

A part may be a chain of files (`step = ["a.onnx", "b.onnx"]`): run in order, each fed by name
from the part's inputs and the earlier files' outputs.

Position j = 0..n-2 of a window is scored with the logits after feeding window token j, which
predict token j+1 (w[j+1]). In float64, with p = softmax(reference logits) and q = softmax(target
logits) (raw logits: no suppressed token):
  KLD_j = sum p log(p/q); dp_j = q[w[j+1]] - p[w[j+1]]; same_top_j = argmax q == argmax p (the first
  of equal maxima); NLL_ref_j = -log p[w[j+1]], NLL_tgt_j = -log q[w[j+1]].
Over every scored position of every window: KLD mean, its standard error (sample standard deviation,
ddof 1, over sqrt(count)), median, p90, p99, p99.9 (NumPy's default linear percentile) and max;
dp mean, RMS, p1 and p99; the same-top share with its 95% Wilson interval; PPL_ref =
exp(mean NLL_ref), PPL_tgt = exp(mean NLL_tgt) and ln(PPL_tgt/PPL_ref) = mean(NLL_tgt - NLL_ref);
per position index j, the mean KLD and the same-top share. A position whose logits (either side's)
hold a value that is not finite is counted (`nonfinite_positions`) and left out of every figure.
These are the figures of llama.cpp's `llama-perplexity --kl-divergence`. Printed as JSON (NaN as
null), the same bytes for the same inputs.

Sessions: the reference on the CPU EP with graph optimizations off and one thread (the tool's
golden run); the target on the CPU EP with every graph optimization (`cpu`) or none (`cpu:noopt`),
one thread. Refused with one line on standard error and exit 2: a spec that cannot be read or is
not decoder-only, a reference that does not decode alike (start tokens, vocabulary size), a set
without windows, a window that is not int64 [1,n] with n >= 2 or does not fit kv_length.

Why: the tool's corpus drift must be checked against code that shares nothing with it but the
contract: this file reads the spec with tomllib, the tokenizer's vocabulary with json (to spell the
start and end tokens), and runs the ONNX parts itself.

How verified: on scripts/build-smollm2's models, 12 windows of 40 tokens (468 scored positions) that
scripts/text-set cut from a few paragraphs of English: smollm2_fp32.toml against itself with
`cpu:noopt` scores KLD 0, dp 0, the same top everywhere and PPL_tgt = PPL_ref; the chunked fp32
parts (prefill chunks of 32, so every window is a full chunk and a padded one) against the step fed
a token at a time agree to float rounding (KLD at most 5e-11 nats), and so does the dynamic fp32
decoder (7e-11); the split fp32 step against the one-file step scores exactly 0; and smollm2_a16w8.toml's figures, recomputed from the same logits
by separate formulas (KL as cross-entropy minus entropy of the normalised probabilities,
percentiles by explicit interpolation between ranks, the Wilson bounds as the roots of their
quadratic), agree within 3e-15. Needs NumPy and onnxruntime: run without them, the script
re-executes itself in scripts/build-smollm2's virtual environment when that exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tomllib
from pathlib import Path

np = ort = None
ORT_ERRORS: tuple = ()   # onnxruntime's own exception types, once imported
Z95 = 1.959963984540054   # the standard normal's 97.5% quantile


def refuse(msg: str):
    print(f"lm_score: {msg}", file=sys.stderr)
    sys.exit(2)


def _runtime() -> None:
    global np, ort
    try:
        import numpy
        import onnxruntime
    except ImportError:
        req = Path(__file__).resolve().parent / "smollm2-requirements.txt"
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        venv = cache / "npu-audit" / "venvs" / f"smollm2-{hashlib.sha256(req.read_bytes()).hexdigest()[:16]}"
        python = venv / "bin" / "python"
        if (venv / "complete").is_file() and Path(sys.prefix).resolve() != venv.resolve():
            os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])
        refuse("needs numpy and onnxruntime (scripts/build-smollm2 makes an environment with them)")
    np, ort = numpy, onnxruntime
    global ORT_ERRORS
    from onnxruntime.capi import onnxruntime_pybind11_state as state
    ORT_ERRORS = (state.Fail, state.InvalidArgument, state.InvalidGraph, state.InvalidProtobuf, state.NoSuchFile,
                  state.NotImplemented, state.RuntimeException)


# ---------------------------------------------------------------------------------------------
# The spec and its parts
# ---------------------------------------------------------------------------------------------

class Part:
    """One part: a file, or a chain of files run in order."""

    def __init__(self, files: list[Path], level, what: str):
        self.files = files
        self.sessions = []
        for f in files:
            if not f.is_file():
                refuse(f"{what}: {f}: no such file")
            so = ort.SessionOptions()
            so.graph_optimization_level = level
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.log_severity_level = 3
            try:
                self.sessions.append(ort.InferenceSession(str(f), sess_options=so, providers=["CPUExecutionProvider"]))
            except ORT_ERRORS as e:
                refuse(f"{what}: {f.name}: onnxruntime cannot load it: {str(e).strip().splitlines()[0]}")
        # every file's inputs met by the part's inputs (the contract's names) or an earlier file's outputs
        self.past = {}
        for s in self.sessions:
            for i in s.get_inputs():
                if i.name.startswith("past_key_values."):
                    self.past[i.name] = list(i.shape)   # [1, H, K or a symbolic past length, D]
        have = {"input_ids", "position_ids", "attention_mask", *self.past}
        for f, s in zip(files, self.sessions, strict=True):
            missing = [i.name for i in s.get_inputs() if i.name not in have]
            if missing:
                refuse(f"{what}: {f.name} takes {missing[0]}, which neither the part's inputs nor an earlier file give")
            have.update(o.name for o in s.get_outputs())
        if "logits" not in have:
            refuse(f"{what}: no file gives logits")
        dim = next(o.shape[-1] for s in self.sessions for o in s.get_outputs() if o.name == "logits")
        self.vocab = dim if isinstance(dim, int) else None   # the logits' width, when the file fixes it
        self.inputs = {i.name for s in self.sessions for i in s.get_inputs()}

    def __call__(self, feeds: dict) -> dict:
        pool = dict(feeds)
        for f, s in zip(self.files, self.sessions, strict=True):
            outs = [o.name for o in s.get_outputs()]
            try:
                pool.update(zip(outs, s.run(outs, {i.name: pool[i.name] for i in s.get_inputs()}), strict=True))
            except ORT_ERRORS as e:
                refuse(f"{f.name} failed: {str(e).strip().splitlines()[0]}")
        return pool


class Spec:
    def __init__(self, path: Path, level):
        self.path = path
        try:
            g = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            refuse(f"{path}: {e}")
        try:
            gen, parts = g["generation"], g["parts"]
            if gen["layout"] != "decoder-only":
                refuse(f"{path}: layout {gen['layout']!r}; corpus drift scores decoder-only specs")
            base = path.parent
            self.form = gen["form"]
            tok = json.loads((base / gen["tokenizer"]).read_text(encoding="utf-8"))
            vocab = dict(tok["model"]["vocab"])
            for t in tok.get("added_tokens", []):
                vocab[t["content"]] = t["id"]
            self.start = [vocab[t] for t in gen.get("start_tokens", [])]
            self.end = vocab[gen["end_token"]]
            self.reference = base / gen["reference"] if gen.get("reference") else None

            def files(name):
                v = parts[name]
                return [base / f for f in (v if isinstance(v, list) else [v])]

            if self.form == "static":
                self.kv_length = int(gen["kv_length"])
                if "prefill" in parts:
                    self.prefill_length = int(gen["prefill_length"])
                    if self.prefill_length < 1 or self.kv_length % self.prefill_length:
                        refuse(f"{path}: kv_length {self.kv_length} is not a multiple of prefill_length "
                               f"{self.prefill_length}")
                    self.feed, self.part = "prefill", Part(files("prefill"), level, f"{path} prefill")
                else:
                    self.feed, self.part = "step", Part(files("step"), level, f"{path} step")
            elif self.form == "dynamic":
                self.kv_length = None
                self.feed, self.part = "decoder", Part(files("decoder"), level, f"{path} decoder")
            else:
                refuse(f"{path}: form {self.form!r}")
        except KeyError as e:
            refuse(f"{path}: no {e.args[0]!r} (a key of the spec, or a token its tokenizer lacks)")
        except (OSError, ValueError) as e:
            refuse(f"{path}: {e}")

    def logits(self, window: list[int]):
        """The logits [len(window), V] after feeding each window token (the start tokens first)."""
        seq = self.start + window
        if self.feed == "decoder":
            return self._dynamic(seq)[len(self.start):]
        if len(seq) > self.kv_length:
            refuse(f"{self.path}: {len(self.start)} start tokens and a window of {len(window)} do not fit "
                   f"kv_length {self.kv_length}")
        rows = self._prefill(seq) if self.feed == "prefill" else self._step(seq)
        return np.stack(rows[len(self.start):])

    def _cache(self):
        return {n: np.zeros([int(d) for d in s], np.float32) for n, s in self.part.past.items()}

    def _step(self, seq):
        K, cache, rows = self.kv_length, self._cache(), []
        for n, tok in enumerate(seq):
            mask = np.zeros((1, K + 1), np.int64)
            mask[0, :n] = 1
            mask[0, K] = 1
            r = self.part({"input_ids": np.array([[tok]], np.int64), "position_ids": np.array([[n]], np.int64),
                           "attention_mask": mask, **cache})
            for name, buf in cache.items():
                buf[:, :, n, :] = r[name.replace("past_key_values.", "present.")][:, :, 0, :]
            rows.append(r["logits"][0, -1])
        return rows

    def _prefill(self, seq):
        K, N, cache, rows = self.kv_length, self.prefill_length, self._cache(), []
        for c in range(0, len(seq), N):
            chunk = seq[c:c + N]
            real = len(chunk)
            mask = np.zeros((1, K + N), np.int64)
            mask[0, :c] = 1
            mask[0, K:K + real] = 1
            r = self.part({"input_ids": np.array([chunk + [self.end] * (N - real)], np.int64),
                           "position_ids": np.arange(c, c + N, dtype=np.int64)[None, :],
                           "attention_mask": mask, **cache})
            for name, buf in cache.items():
                buf[:, :, c:c + real, :] = r[name.replace("past_key_values.", "present.")][:, :, :real, :]
            rows.extend(r["logits"][0, :real])
        return rows

    def _dynamic(self, seq):
        feeds = {"input_ids": np.array([seq], np.int64), "attention_mask": np.ones((1, len(seq)), np.int64)}
        if "position_ids" in self.part.inputs:
            feeds["position_ids"] = np.arange(len(seq), dtype=np.int64)[None, :]
        for n, s in self.part.past.items():
            feeds[n] = np.zeros([1, int(s[1]), 0, int(s[3])], np.float32)
        return self.part(feeds)["logits"][0]


# ---------------------------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------------------------

def log_softmax(z):
    z = np.asarray(z, np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def score_window(ref_logits, tgt_logits, window: list[int]) -> dict:
    """Per scored position j = 0..n-2: KLD, dp, same top, both NLLs, and whether its logits are finite."""
    n = len(window)
    r, t = np.asarray(ref_logits[:n - 1]), np.asarray(tgt_logits[:n - 1])
    finite = np.isfinite(r).all(axis=-1) & np.isfinite(t).all(axis=-1)
    nxt = np.asarray(window[1:], np.int64)
    lp, lq = log_softmax(np.where(finite[:, None], r, 0)), log_softmax(np.where(finite[:, None], t, 0))
    p, q = np.exp(lp), np.exp(lq)
    rows = np.arange(n - 1)
    return {"finite": finite, "kld": (p * (lp - lq)).sum(axis=-1), "dp": q[rows, nxt] - p[rows, nxt],
            "same_top": np.argmax(q, axis=-1) == np.argmax(p, axis=-1),
            "nll_ref": -lp[rows, nxt], "nll_tgt": -lq[rows, nxt]}


def wilson(k: int, n: int) -> list[float]:
    if n == 0:
        return [math.nan, math.nan]
    ph, z2 = k / n, Z95 * Z95
    centre = (ph + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(ph * (1 - ph) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # at 0 or n successes the bound on that side is exact: 0 or 1 (the formula gives it to rounding)
    return [0.0 if k == 0 else max(0.0, centre - half), 1.0 if k == n else min(1.0, centre + half)]


def figures(scores: list[dict]) -> dict:
    keep = [s["finite"] for s in scores]
    cat = {k: np.concatenate([s[k][f] for s, f in zip(scores, keep, strict=True)])
           for k in ("kld", "dp", "same_top", "nll_ref", "nll_tgt")}
    n = int(cat["kld"].size)
    kld, dp = cat["kld"], cat["dp"]
    pct = (lambda a, q: float(np.percentile(a, q))) if n else (lambda a, q: math.nan)
    same = int(cat["same_top"].sum())
    out = {
        "positions": n,
        "nonfinite_positions": int(sum(int((~f).sum()) for f in keep)),
        "kld": {"mean": float(kld.mean()) if n else math.nan,
                "stderr": float(kld.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
                "median": pct(kld, 50), "p90": pct(kld, 90), "p99": pct(kld, 99), "p99_9": pct(kld, 99.9),
                "max": float(kld.max()) if n else math.nan},
        "dp": {"mean": float(dp.mean()) if n else math.nan,
               "rms": float(math.sqrt((dp * dp).mean())) if n else math.nan,
               "p1": pct(dp, 1), "p99": pct(dp, 99)},
        "same_top": {"count": same, "share": same / n if n else math.nan, "wilson95": wilson(same, n)},
        "ppl": {"reference": math.exp(cat["nll_ref"].mean()) if n else math.nan,
                "target": math.exp(cat["nll_tgt"].mean()) if n else math.nan,
                "ln_ratio": float((cat["nll_tgt"] - cat["nll_ref"]).mean()) if n else math.nan},
    }
    per = []
    for j in range(max(s["kld"].size for s in scores)):
        at = [(s["kld"][j], s["same_top"][j]) for s, f in zip(scores, keep, strict=True)
              if j < f.size and f[j]]
        per.append({"position": j, "count": len(at),
                    "mean_kld": float(np.mean([a for a, _ in at])) if at else math.nan,
                    "same_top": sum(bool(b) for _, b in at) / len(at) if at else math.nan})
    out["per_position"] = per
    return out


def _nan_to_null(x):
    if isinstance(x, dict):
        return {k: _nan_to_null(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_nan_to_null(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def read_set(set_dir: Path) -> dict[str, list[int]]:
    if not set_dir.is_dir():
        refuse(f"{set_dir}: not a directory")
    windows = {}
    for f in sorted(set_dir.glob("*.npz")):
        try:
            with np.load(f) as z:
                a = z["input_ids"]
        except (OSError, ValueError, KeyError) as e:
            refuse(f"{f}: no input_ids array ({e})")
        if a.dtype != np.int64 or a.ndim != 2 or a.shape[0] != 1 or a.shape[1] < 2:
            refuse(f"{f}: input_ids must be int64 [1,n] with n >= 2, got {a.dtype} {list(a.shape)}")
        windows[f.stem] = [int(x) for x in a[0]]
    if not windows:
        refuse(f"{set_dir}: no .npz windows")
    return windows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", type=Path, help="the audited decoder-only generation spec")
    ap.add_argument("set_dir", type=Path, help="windows: <id>.npz with input_ids int64 [1,n]")
    ap.add_argument("--target-ep", default="cpu", choices=["cpu", "cpu:noopt"],
                    help="the target: the CPU EP with every graph optimization (cpu) or none (cpu:noopt)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    _runtime()
    levels = {"cpu": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "cpu:noopt": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}
    windows = read_set(args.set_dir)
    target = Spec(args.spec, levels[args.target_ep])
    reference = Spec(target.reference or args.spec, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if reference.start != target.start:
        refuse(f"{reference.path}: start tokens {reference.start}, the target's are {target.start}")
    if None not in (reference.part.vocab, target.part.vocab) and reference.part.vocab != target.part.vocab:
        refuse(f"{reference.path}: logits of {reference.part.vocab}, the target's of {target.part.vocab}")
    vocab = reference.part.vocab or target.part.vocab
    for wid, window in windows.items():
        if min(window) < 0 or (vocab is not None and max(window) >= vocab):
            refuse(f"{wid}: a token id outside the logits' {vocab}: {min(window)} to {max(window)}")
    scores = []
    for wid, window in windows.items():
        r, t = reference.logits(window), target.logits(window)
        if r.shape != t.shape:
            refuse(f"{wid}: the reference's logits are {list(r.shape)}, the target's {list(t.shape)}")
        if max(window) >= r.shape[-1]:
            refuse(f"{wid}: a token id outside the logits' {r.shape[-1]}")
        s = score_window(r, t, window)
        scores.append(s)
        f = s["finite"]
        print(f"{wid}: {len(window)} tokens, mean KLD {s['kld'][f].mean():.6f}, same top "
              f"{int(s['same_top'][f].sum())}/{int(f.sum())}", file=sys.stderr)
    result = {"spec": str(args.spec), "reference": str(reference.path), "target_ep": args.target_ep,
              "feed": {"target": target.feed, "reference": reference.feed}, "windows": len(windows),
              **figures(scores)}
    text = json.dumps(_nan_to_null(result), indent=1) + "\n"
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
