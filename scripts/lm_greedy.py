#!/usr/bin/env python3
"""An independent greedy decoder for decoder-only generation specs (docs/generation.md), on the
ONNX Runtime CPU EP from Python: what `npu-audit eval --task generate` must reproduce.

    python3 scripts/lm_greedy.py [--json OUT] [--no-reference] SPEC.toml SET_DIR

For every SET_DIR/<id>.npz (input_ids int64 [1,n]; ids in sorted order) the prompt is the spec's
start_tokens then those ids; the part of the spec's form decodes greedily: argmax of the last
position's logits (the first index among equal maxima), suppress_tokens (and on the first new token
suppress_at_start) set to -inf first, stop when end_token is chosen (not kept) or after
max_new_tokens new tokens. Static form: the `step` part, the prompt fed one token per call
(position_ids = slots filled n, attention_mask [1,K+1] = 1 for slots 0..n-1 and for the last
element, the token's present.N.key|value written into slot n); with a `prefill` part
(prefill_length = N), the prompt goes through it in chunks of N instead, the last padded at its end
with the end token (attention_mask [1,K+N]: the filled slots, then 1 for each real chunk token;
position_ids filled + j; the real tokens' presents written into the next slots), the last real
token's logits choosing the first new token, and the step decodes from there. Dynamic form: the
`decoder` part, the whole prompt in the first call, then one token per call with the growing past.
A part may be a chain of files (`step = ["a.onnx", "b.onnx"]`): run in order, each fed by name
from the part's inputs and the earlier files' outputs. The text is the tokenizer.json's byte-level
decode of the new tokens, special tokens skipped (written out here, not taken from another
script). When the spec names a reference spec, it is decoded too and each sample says how many
tokens agree before the two depart. Sessions: no graph optimizations, one thread (the
tool's cpu:noopt). Needs NumPy and onnxruntime: run without them, the script re-executes itself in
scripts/build-smollm2's virtual environment when that exists.

Verified on scripts/build-smollm2's specs: smollm2_fp32.toml (a token per call),
smollm2_fp32_chunked.toml (prefill chunks of 32, then the step) and smollm2_fp32_split.toml (the
step as four files) decode three chat prompts of 33 to 40 tokens (scripts/prompt-set --system) to
the same tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import tomllib
from pathlib import Path

np = ort = None


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
        raise SystemExit("lm_greedy: needs numpy and onnxruntime (scripts/build-smollm2 makes an environment "
                         "with them)") from None
    np, ort = numpy, onnxruntime


class Spec:
    def __init__(self, path: Path):
        self.path = path.resolve()
        g = tomllib.loads(self.path.read_text(encoding="utf-8"))
        gen, parts = g["generation"], g["parts"]
        if gen["layout"] != "decoder-only":
            raise SystemExit(f"{path}: layout {gen['layout']!r}; this checker decodes decoder-only specs")
        base = self.path.parent
        self.form = gen["form"]

        def files(name):
            v = parts[name]
            return [base / f for f in (v if isinstance(v, list) else [v])]

        self.part = files("step" if self.form == "static" else "decoder")
        self.prefill = files("prefill") if self.form == "static" and "prefill" in parts else None
        self.prefill_length = int(gen["prefill_length"]) if self.prefill else None
        self.kv_length = int(gen["kv_length"]) if self.form == "static" else None
        self.max_new = int(gen["max_new_tokens"])
        self.suppress = [int(t) for t in gen.get("suppress_tokens", [])]
        self.suppress_start = [int(t) for t in gen.get("suppress_at_start", [])]
        self.reference = base / gen["reference"] if gen.get("reference") else None
        tok = json.loads((base / gen["tokenizer"]).read_text(encoding="utf-8"))
        self.vocab = dict(tok["model"]["vocab"])
        for t in tok.get("added_tokens", []):
            self.vocab[t["content"]] = t["id"]
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.special = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
        self.start = [self.vocab[t] for t in gen["start_tokens"]]
        self.end = self.vocab[gen["end_token"]]
        # GPT-2's byte <-> character map, inverted
        keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
        extra = [b for b in range(256) if b not in keep]
        self.unbyte = {chr(b): b for b in keep} | {chr(256 + k): b for k, b in enumerate(extra)}

    def decode(self, ids) -> str:
        out = bytearray()
        for i in ids:
            if i in self.special:
                continue
            for ch in self.id_to_token[i]:
                b = self.unbyte.get(ch)
                out.extend(ch.encode("utf-8") if b is None else bytes([b]))
        return out.decode("utf-8", errors="replace")


def session(path: Path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


class Part:
    """A part's files, run in order: each fed by name from the part's inputs and the earlier files'
    outputs. get_inputs, get_outputs and run as one session's."""

    def __init__(self, paths: list[Path]):
        self.sessions = [session(p) for p in paths]

    def get_inputs(self):
        return [i for s in self.sessions for i in s.get_inputs()]

    def get_outputs(self):
        return [o for s in self.sessions for o in s.get_outputs()]

    def run(self, names, feeds):
        pool = dict(feeds)
        for s in self.sessions:
            outs = [o.name for o in s.get_outputs()]
            pool.update(zip(outs, s.run(outs, {i.name: pool[i.name] for i in s.get_inputs()}), strict=True))
        return [pool[n] for n in names]


def choose(spec: Spec, logits, first: bool) -> int:
    z = np.array(logits, dtype=np.float32, copy=True)
    z[spec.suppress] = -np.inf
    if first:
        z[spec.suppress_start] = -np.inf
    return int(np.argmax(z))


def decode_static(spec: Spec, sess, prompt: list[int], prefill=None):
    K = spec.kv_length
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    cache = {i.name: np.zeros([int(d) for d in i.shape], np.float32) for i in pasts}
    outs = [o.name for o in sess.get_outputs()]

    def step(tok, n):
        if n >= K:
            raise SystemExit(f"kv_length {K} exceeded")
        mask = np.zeros((1, K + 1), np.int64)
        mask[0, :n] = 1
        mask[0, K] = 1
        r = dict(zip(outs, sess.run(outs, {"input_ids": np.array([[tok]], np.int64),
                                           "position_ids": np.array([[n]], np.int64),
                                           "attention_mask": mask, **cache}), strict=True))
        for name, buf in cache.items():
            buf[:, :, n, :] = r[name.replace("past_key_values.", "present.")][:, :, 0, :]
        return r["logits"][0, -1]

    def chunk(toks, n):
        N, real = spec.prefill_length, len(toks)
        if n + N > K:
            raise SystemExit(f"kv_length {K} exceeded")
        mask = np.zeros((1, K + N), np.int64)
        mask[0, :n] = 1
        mask[0, K:K + real] = 1
        pouts = [o.name for o in prefill.get_outputs()]
        r = dict(zip(pouts, prefill.run(pouts, {"input_ids": np.array([toks + [spec.end] * (N - real)], np.int64),
                                                 "position_ids": np.arange(n, n + N, dtype=np.int64)[None, :],
                                                 "attention_mask": mask, **cache}), strict=True))
        for name, buf in cache.items():
            buf[:, :, n:n + real, :] = r[name.replace("past_key_values.", "present.")][:, :, :real, :]
        return r["logits"][0, real - 1]

    if prefill is None:
        for n, tok in enumerate(prompt):
            logits = step(tok, n)
    else:
        for n in range(0, len(prompt), spec.prefill_length):
            logits = chunk(prompt[n:n + spec.prefill_length], n)
    new = []
    while True:
        nxt = choose(spec, logits, not new)
        if nxt == spec.end:
            return new, "end"
        new.append(nxt)
        if len(new) == spec.max_new:
            return new, "max_new_tokens"
        logits = step(nxt, len(prompt) + len(new) - 1)


def decode_dynamic(spec: Spec, sess, prompt: list[int]):
    inputs = {i.name: i for i in sess.get_inputs()}
    cache = {n: np.zeros([1, int(i.shape[1]), 0, int(i.shape[3])], np.float32)
             for n, i in inputs.items() if n.startswith("past_key_values.")}
    outs = [o.name for o in sess.get_outputs()]

    def call(ids, p):
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, p + len(ids)), np.int64),
                 **cache}
        if "position_ids" in inputs:
            feeds["position_ids"] = np.arange(p, p + len(ids), dtype=np.int64)[None, :]
        r = dict(zip(outs, sess.run(outs, feeds), strict=True))
        for name in cache:
            cache[name] = r[name.replace("past_key_values.", "present.")]
        return r["logits"][0, -1]

    logits = call(prompt, 0)
    new = []
    while True:
        nxt = choose(spec, logits, not new)
        if nxt == spec.end:
            return new, "end"
        new.append(nxt)
        if len(new) == spec.max_new:
            return new, "max_new_tokens"
        logits = call([nxt], len(prompt) + len(new) - 1)


def run(spec: Spec, samples: dict[str, list[int]]) -> dict:
    sess = Part(spec.part)
    prefill = Part(spec.prefill) if spec.prefill else None
    res = {}
    for sid, ids in samples.items():
        t0 = time.perf_counter()
        if spec.form == "static":
            new, why = decode_static(spec, sess, spec.start + ids, prefill)
        else:
            new, why = decode_dynamic(spec, sess, spec.start + ids)
        res[sid] = {"prompt_tokens": len(spec.start) + len(ids), "tokens": new, "text": spec.decode(new),
                    "stop": why, "seconds": round(time.perf_counter() - t0, 3)}
    return res


def names(files: list[Path]):
    """A part's file name, or its files' names when it is a chain."""
    return files[0].name if len(files) == 1 else [f.name for f in files]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", type=Path)
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("--json", type=Path, help="write every sample's tokens and text here")
    ap.add_argument("--no-reference", action="store_true", help="do not decode the spec's reference")
    args = ap.parse_args()
    _runtime()
    spec = Spec(args.spec)
    samples = {}
    for f in sorted(args.set_dir.glob("*.npz")):
        with np.load(f) as z:
            a = z["input_ids"]
        if a.dtype != np.int64 or a.ndim != 2 or a.shape[0] != 1:
            raise SystemExit(f"{f}: input_ids must be int64 [1,n], got {a.dtype} {a.shape}")
        samples[f.stem] = [int(x) for x in a[0]]
    if not samples:
        raise SystemExit(f"{args.set_dir}: no .npz samples")
    result = {"spec": str(spec.path), "part": names(spec.part), "form": spec.form, "samples": run(spec, samples)}
    if spec.prefill:
        result["prefill"] = names(spec.prefill)
    if spec.reference is not None and not args.no_reference:
        ref = Spec(spec.reference)
        result["reference"] = {"spec": str(ref.path), "part": names(ref.part), "samples": run(ref, samples)}
    for sid, r in result["samples"].items():
        line = f"{sid}: {len(r['tokens'])} tokens ({r['stop']}, {r['seconds']:.2f} s)"
        if "reference" in result:
            rt = result["reference"]["samples"][sid]["tokens"]
            n = 0
            while n < min(len(rt), len(r["tokens"])) and rt[n] == r["tokens"][n]:
                n += 1
            r["agree_with_reference"] = n
            r["identical_to_reference"] = rt == r["tokens"]
            line += f", agrees with the reference for {n} of its {len(rt)} tokens" + \
                (" (identical)" if rt == r["tokens"] else "")
        print(line)
        print(f"  {r['tokens']}")
        print(f"  {r['text']!r}")
        if "reference" in result and not r["identical_to_reference"]:
            print(f"  reference: {result['reference']['samples'][sid]['text']!r}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
