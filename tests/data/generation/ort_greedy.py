#!/usr/bin/env python3
"""An independent greedy decoder of a generation spec on onnxruntime's CPU EP, written from the
generation-spec contract alone (not from the Rust loop in src/generation/decode.rs, nor from
make_tiny.py's NumPy loop): layouts encoder-decoder and decoder-only, forms dynamic and static,
a chunked `prefill` part, and parts split into several files (run in order, tensors by name).
Needs NumPy and onnxruntime only (tests/data/numpy-ort-requirements.txt); the TOML is
read with tomllib, the tokenizer.json with json (its vocabulary only: a token's text is its
vocabulary entry, tokens are joined with single spaces, special tokens skipped, which is what a
WordLevel tokenizer without a decoder gives).

    ort_greedy.py SPEC.toml SET_DIR [--opt all|extended|basic|disable] [--check EXPECTED.json]
                  [--qnn PLUGIN SOC_MODEL HTP_ARCH]

Prints one JSON line per sample of SET_DIR (its `<id>.npz` files in name order):
{"id", "tokens", "text", "ended"}; `tokens` holds every token chosen, the end token included when
it was chosen. --check compares the tokens with EXPECTED.json's entry for this spec (the file
make_tiny.py writes) and exits 1 when any sample differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

import numpy as np
import onnxruntime as ort

LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}
PARTS = {
    ("encoder-decoder", "dynamic"): ("encoder", "decoder", "decoder_with_past"),
    ("encoder-decoder", "static"): ("encoder", "prompt", "step"),
    ("decoder-only", "dynamic"): ("decoder",),
    ("decoder-only", "static"): ("step",),
}


# --qnn PLUGIN: the QNN plugin EP library and its HTP options (backend_path beside the plugin,
# soc_model and htp_arch of the chipset), devices chosen explicitly as ONNX Runtime's plugin API
# asks (once the plugin is registered, a session left to choose would take it for CPU work too).
QNN = None


def qnn_session_options(so):
    plugin, soc_model, htp_arch = QNN
    if "QNNExecutionProvider" not in {d.ep_name for d in ort.get_ep_devices()}:
        ort.register_execution_provider_library("QNNExecutionProvider", plugin)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    backend = str(Path(plugin).parent / "libQnnHtp.so")
    so.add_provider_for_devices(devices, {"backend_path": backend, "soc_model": soc_model, "htp_arch": htp_arch})


class File:
    def __init__(self, path: Path, level):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        if QNN is not None:
            qnn_session_options(so)
            self.session = ort.InferenceSession(str(path), so)
        else:
            self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, feeds: dict) -> dict:
        return dict(zip(self.output_names, self.session.run(None, feeds)))


class Part:
    """A part: one file, or a chain of files run in order, each fed by name from the part's
    inputs and the earlier files' outputs."""

    def __init__(self, paths: list[Path], level):
        self.files = [File(p, level) for p in paths]
        self.inputs = {}
        given = set()
        for f in self.files:
            self.inputs.update({n: i for n, i in f.inputs.items() if n not in given and n not in self.inputs})
            given.update(f.output_names)

    def __call__(self, feeds: dict) -> dict:
        pool = dict(feeds)
        for f in self.files:
            pool.update(f({n: v for n, v in pool.items() if n in f.inputs}))
        return {n: v for n, v in pool.items() if n not in feeds}


class Spec:
    def __init__(self, path: Path, level):
        with open(path, "rb") as f:
            t = tomllib.load(f)
        g = t["generation"]
        d = path.parent
        self.layout, self.form = g["layout"], g["form"]
        tok = json.loads((d / g["tokenizer"]).read_text(encoding="utf-8"))
        vocab = dict(tok["model"]["vocab"])
        for a in tok.get("added_tokens", []):
            vocab[a["content"]] = a["id"]
        self.piece = {i: s for s, i in vocab.items()}
        self.special = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
        self.start = [vocab[s] for s in g.get("start_tokens", [])]
        self.end = vocab[g["end_token"]]
        self.max_new = int(g["max_new_tokens"])
        self.kv_length = g.get("kv_length")
        self.suppress = list(g.get("suppress_tokens", []))
        self.suppress_first = list(g.get("suppress_at_start", []))
        self.prefill = g.get("prefill_length")
        names = PARTS[(self.layout, self.form)] + (("prefill",) if self.prefill else ())

        def paths(entry):
            return [d / e for e in entry] if isinstance(entry, list) else [d / entry]

        self.parts = {p: Part(paths(t["parts"][p]), level) for p in names}
        infix = ".decoder" if self.layout == "encoder-decoder" else ""
        step = self.parts["step" if self.form == "static" else ("decoder_with_past" if self.layout == "encoder-decoder"
                                                                  else "decoder")]
        self.self_names = sorted((n for n in step.inputs if n.startswith("past_key_values.") and
                                  n.endswith((f"{infix}.key", f"{infix}.value")) and
                                  (infix or ".encoder." not in n)), key=_layer_order)
        self.cross_names = sorted((n for n in step.inputs if ".encoder." in n), key=_layer_order)
        shape = step.inputs[self.self_names[0]].shape
        self.kv_heads, self.head_dim = int(shape[1]), int(shape[3])

    def text(self, tokens):
        return " ".join(self.piece[t] for t in tokens if t not in self.special)


def _layer_order(name: str):
    parts = name.split(".")
    return (int(parts[1]), name)


def ids(values) -> np.ndarray:
    return np.asarray([list(values)], dtype=np.int64)


def present_of(name: str) -> str:
    return "present." + name[len("past_key_values."):]


class Decoder:
    """The state between calls: `kv` the self-attention keys/values by input name (growing
    arrays, or K-slot buffers), `cross` the encoder ones, `n` the positions filled."""

    def __init__(self, spec: Spec):
        self.s = spec

    def start(self, sample: dict) -> np.ndarray:
        s = self.s
        self.n = 0
        if s.form == "static":
            self.kv = {k: np.zeros((1, s.kv_heads, s.kv_length, s.head_dim), np.float32) for k in s.self_names}
        else:
            self.kv = {k: np.zeros((1, s.kv_heads, 0, s.head_dim), np.float32) for k in s.self_names}
        self.cross = {}
        if s.layout == "encoder-decoder":
            features = sample["input_features"].astype(np.float32)
            hidden = s.parts["encoder"]({"input_features": features})["last_hidden_state"]
            part = s.parts["decoder" if s.form == "dynamic" else "prompt"]
            out = part({"input_ids": ids(s.start), "encoder_hidden_states": hidden})
            for k in s.self_names:
                new = out[present_of(k)]
                if s.form == "static":
                    self.kv[k][:, :, : new.shape[2]] = new
                else:
                    self.kv[k] = new
            self.cross = {k: out[present_of(k)] for k in s.cross_names}
            self.n = len(s.start)
            return out["logits"][0, -1]
        prompt = s.start + [int(v) for v in sample["input_ids"].reshape(-1)]
        if s.form == "dynamic":
            return self._dynamic_lm(prompt)
        if s.prefill:
            return self._prefill(prompt)
        for t in prompt:
            logits = self.feed(t)
        return logits

    def _prefill(self, tokens):
        """The prompt in chunks of prefill_length: the buffers' mask then the chunk's, the last
        chunk padded with the end token and masked, positions counting on from the filled slots;
        the real tokens' keys and values written into the next slots."""
        s, n, k = self.s, self.s.prefill, self.s.kv_length
        logits = None
        for c in range(0, len(tokens), n):
            chunk = tokens[c: c + n]
            real = len(chunk)
            mask = np.zeros((1, k + n), np.int64)
            mask[0, : self.n] = 1
            mask[0, k: k + real] = 1
            feeds = {"input_ids": ids(chunk + [s.end] * (n - real)), "position_ids": ids(range(self.n, self.n + n)),
                     "attention_mask": mask, **self.kv}
            out = s.parts["prefill"](feeds)
            for name in s.self_names:
                self.kv[name][:, :, self.n: self.n + real] = out[present_of(name)][:, :, :real]
            self.n += real
            logits = out["logits"][0, real - 1]
        return logits

    def _dynamic_lm(self, tokens):
        s, part = self.s, self.s.parts["decoder"]
        total = self.n + len(tokens)
        feeds = {"input_ids": ids(tokens), "attention_mask": ids([1] * total), **self.kv}
        if "position_ids" in part.inputs:
            feeds["position_ids"] = ids(range(self.n, total))
        out = part(feeds)
        self.kv = {k: out[present_of(k)] for k in s.self_names}
        self.n = total
        return out["logits"][0, -1]

    def feed(self, token: int) -> np.ndarray:
        s = self.s
        if s.form == "static":
            k = s.kv_length
            if self.n >= k:
                raise RuntimeError("the KV buffers are full")
            mask = np.zeros((1, k + 1), np.int64)
            mask[0, : self.n] = 1
            mask[0, k] = 1
            feeds = {"input_ids": ids([token]), "position_ids": ids([self.n]), "attention_mask": mask,
                     **self.kv, **self.cross}
            out = s.parts["step"](feeds)
            for name in s.self_names:
                self.kv[name][:, :, self.n] = out[present_of(name)][:, :, 0]
            self.n += 1
            return out["logits"][0, -1]
        if s.layout == "decoder-only":
            return self._dynamic_lm([token])
        out = s.parts["decoder_with_past"]({"input_ids": ids([token]), **self.kv, **self.cross})
        self.kv = {k: out[present_of(k)] for k in s.self_names}
        self.n += 1
        return out["logits"][0, -1]


def choose(logits: np.ndarray, banned: list[int]) -> int:
    x = logits.astype(np.float64).copy()
    x[banned] = -np.inf
    return int(np.argmax(x))   # the first of equal maxima


def greedy(spec: Spec, sample: dict) -> tuple[list[int], bool]:
    dec = Decoder(spec)
    logits = dec.start(sample)
    tokens: list[int] = []
    while True:
        t = choose(logits, spec.suppress + (spec.suppress_first if not tokens else []))
        tokens.append(t)
        if t == spec.end:
            return tokens, True
        if len(tokens) == spec.max_new:
            return tokens, False
        logits = dec.feed(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", type=Path)
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("--opt", choices=sorted(LEVELS), default="all", help="graph optimization level (default all)")
    ap.add_argument("--check", type=Path, help="expected.json: compare the tokens, exit 1 on any difference")
    ap.add_argument("--qnn", nargs=3, metavar=("PLUGIN", "SOC_MODEL", "HTP_ARCH"),
                    help="run every part on the QNN plugin EP (libonnxruntime_providers_qnn.so) for this chipset")
    a = ap.parse_args()
    global QNN
    QNN = tuple(a.qnn) if a.qnn else None
    spec = Spec(a.spec, LEVELS[a.opt])
    want = None
    if a.check:
        e = json.loads(a.check.read_text(encoding="utf-8"))["specs"][a.spec.name]
        want = {s["id"]: s for s in e["samples"]}
    bad = 0
    for f in sorted(a.set_dir.glob("*.npz")):
        with np.load(f) as z:
            sample = {k: z[k] for k in z.files}
        tokens, ended = greedy(spec, sample)
        row = {"id": f.stem, "tokens": tokens, "text": spec.text(tokens), "ended": ended}
        print(json.dumps(row), flush=True)
        if want is not None:
            w = want.get(f.stem)
            if w is None or w["tokens"] != tokens or w["ended"] != ended or w["text"] != row["text"]:
                bad += 1
                print(f"MISMATCH {f.stem}: expected {w and w['tokens']}", file=sys.stderr)
    if want is not None:
        print(f"{a.spec.name} --opt {a.opt}: {bad} of {len(want)} samples differ from {a.check.name}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
