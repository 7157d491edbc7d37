#!/usr/bin/env python3
"""An independent greedy decoder for encoder-decoder generation specs (Whisper): ONNX Runtime's
Python API on the spec's ONNX parts, the decoding rules of docs/generation.md.

    scripts/whisper_greedy.py [--provider cpu] [--threads N] [--limit N] SPEC.toml SET_DIR

What: for every SET_DIR/<id>.npz (`input_features` float32 [1, 80, 3000]; in the order of
SET_DIR/labels.csv when there is one, else sorted by id) prints one JSON line
{"id": ..., "tokens": [...], "text": ..., "stop": "end"|"limit"|"nan"} where tokens are the new
tokens (the end token not kept) and text their decode with special tokens skipped. With labels.csv
the line also has "label", "words" and "word_errors" (Levenshtein over words, both texts lower-cased,
punctuation dropped but a word-inner apostrophe kept, as npu-audit normalises them), and a last
line on standard error gives the pooled WER.

The loop (both forms of an encoder-decoder spec):
- encoder(input_features) -> last_hidden_state;
- dynamic: decoder(input_ids = start_tokens, encoder_hidden_states) -> logits, present.N.decoder.*,
  present.N.encoder.*; then decoder_with_past(input_ids [[token]], past_key_values.N.decoder.* =
  the last present, past_key_values.N.encoder.* = the first call's) per new token;
- static: prompt(as decoder, s = len(start_tokens)) -> its present.N.decoder.* written into slots
  0..s-1 of zeroed [1, H, kv_length, D] buffers; then step(input_ids [[token]], position_ids [[n]],
  attention_mask [1, kv_length + 1] = 1 for slots 0..n-1 and for the last element, 0 elsewhere,
  the buffers, the prompt's present.N.encoder.*) whose present.N.decoder.* [1, H, 1, D] goes into
  slot n (n = slots filled);
- greedy: the first index of the largest logit of the last position, never a suppress_tokens id
  (nor a suppress_at_start id for the first new token) nor a NaN; stop when end_token is chosen
  (not kept) or after max_new_tokens new tokens.
Text: tokenizer.json's byte-level decoder (Hugging Face tokenizers semantics: special added tokens
skipped, unknown ids dropped, each token's characters mapped back to bytes, UTF-8 with U+FFFD for
invalid bytes), in plain Python.

Why: an audit tool's decoding must be checkable by something that is not the tool;
scripts/build-whisper-tiny also uses this module's loop for its ONNX Runtime side, checked there
against an independent float64 NumPy forward pass of Whisper.

How verified: scripts/build-whisper-tiny runs this loop on both forms against its NumPy reference
(identical tokens, logits within 2.8e-5) and this decoder's text against the `tokenizers` package;
on a set of 10 espeak-ng sentences (scripts/speak-set, then scripts/whisper-set) its texts and WERs for whisper_fp32.toml (17.0%) and
whisper_a16w8.toml (18.2%) are those of `npu-audit eval --task transcribe`.

Runs in scripts/whisper-requirements.txt's virtual environment
(${XDG_CACHE_HOME:-~/.cache}/npu-audit/venvs/whisper-<16 hex of its SHA-256>/), made once
hash-checked, the script re-executing itself there. Sessions: CPU provider, graph optimisations
off, one thread unless --threads (the tool's cpu:noopt settings).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "whisper-requirements.txt"


def venv_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    return cache / "npu-audit" / "venvs" / f"whisper-{digest}"


def ensure_venv() -> None:
    """Re-executes this script in its virtual environment, made first if it is not complete."""
    venv = venv_dir()
    if Path(sys.prefix).resolve() == venv.resolve():
        return
    if not (venv / "complete").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        print(f"{Path(__file__).name}: making {venv} from {REQUIREMENTS.name}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", "--require-hashes", "--only-binary", ":all:",
                        "-r", str(REQUIREMENTS)], check=True)
        (venv / "complete").touch()
    python = venv / "bin" / "python"
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


# ---------------------------------------------------------------------------------------------
# tokenizer.json: ids, special tokens, byte-level decode
# ---------------------------------------------------------------------------------------------

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


class Tokenizer:
    def __init__(self, path: Path):
        tj = json.loads(Path(path).read_text(encoding="utf-8"))
        model = tj.get("model") or {}
        if model.get("type") != "BPE":
            raise SystemExit(f"{path}: a {model.get('type')} model; only byte-level BPE is handled")
        decoder = tj.get("decoder") or {}
        if decoder.get("type") != "ByteLevel":
            raise SystemExit(f"{path}: decoder {decoder.get('type')}; only ByteLevel is handled")
        self.id_to_token: dict[int, str] = {int(i): t for t, i in model["vocab"].items()}
        self.special: set[int] = set()
        for a in tj.get("added_tokens", []):
            self.id_to_token[int(a["id"])] = a["content"]
            if a.get("special"):
                self.special.add(int(a["id"]))
        self.token_to_id = {t: i for i, t in self.id_to_token.items()}
        self.byte_of = {c: b for b, c in bytes_to_unicode().items()}

    def __len__(self) -> int:
        return max(self.id_to_token) + 1

    def id(self, token: str) -> int:
        if token not in self.token_to_id:
            raise SystemExit(f"token {token!r} is not in the tokenizer's vocabulary")
        return self.token_to_id[token]

    def decode(self, ids, skip_special: bool = True) -> str:
        out = bytearray()
        for i in ids:
            i = int(i)
            if skip_special and i in self.special:
                continue
            t = self.id_to_token.get(i)
            if t is None:
                continue
            bs = [self.byte_of.get(c) for c in t]
            out.extend(bytes(bs) if None not in bs else t.encode("utf-8"))
        return out.decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------------------------
# The spec
# ---------------------------------------------------------------------------------------------

ROLES = {"dynamic": ("encoder", "decoder", "decoder_with_past"), "static": ("encoder", "prompt", "step")}


def load_spec(path) -> dict:
    path = Path(path).resolve()
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    g, parts = doc.get("generation", {}), doc.get("parts", {})
    if g.get("layout") != "encoder-decoder":
        raise SystemExit(f"{path}: layout {g.get('layout')!r}; this decoder takes encoder-decoder specs only")
    form = g.get("form")
    if form not in ROLES:
        raise SystemExit(f"{path}: form {form!r}, expected dynamic or static")
    missing = [r for r in ROLES[form] if r not in parts]
    if missing:
        raise SystemExit(f"{path}: [parts] lacks {', '.join(missing)} (the {form} form needs {', '.join(ROLES[form])})")
    tok = Tokenizer(path.parent / g["tokenizer"])
    spec = {
        "path": path, "form": form, "tokenizer": tok,
        "start": [tok.id(t) for t in g["start_tokens"]], "start_tokens": list(g["start_tokens"]),
        "end": tok.id(g["end_token"]), "max_new_tokens": int(g["max_new_tokens"]),
        "kv_length": g.get("kv_length"), "suppress_tokens": [int(i) for i in g.get("suppress_tokens", [])],
        "suppress_at_start": [int(i) for i in g.get("suppress_at_start", [])],
        "reference": g.get("reference"), "parts": {r: path.parent / parts[r] for r in ROLES[form]},
    }
    if not spec["start"]:
        raise SystemExit(f"{path}: an encoder-decoder needs start_tokens")
    if form == "static" and not spec["kv_length"]:
        raise SystemExit(f"{path}: the static form needs kv_length")
    return spec


# ---------------------------------------------------------------------------------------------
# Sessions and the loop
# ---------------------------------------------------------------------------------------------

def session(path: Path, provider: str = "cpu", threads: int = 1):
    import onnxruntime as ort
    if provider != "cpu":
        raise SystemExit(f"provider {provider!r}: only cpu is handled")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def greedy_choice(logits, suppressed) -> int | None:
    """The first index of the largest logit that is neither suppressed nor NaN; None if none is left."""
    import numpy as np
    ok = ~np.isnan(logits)
    if len(suppressed):
        ok[np.asarray(suppressed, dtype=np.int64)] = False
    cand = np.flatnonzero(ok)
    if cand.size == 0:
        return None
    return int(cand[int(np.argmax(logits[cand]))])


class Decoder:
    """One spec's parts in ONNX Runtime sessions and the contract's loop."""

    def __init__(self, spec: dict, provider: str = "cpu", threads: int = 1, sessions: dict | None = None):
        self.spec = spec
        self.sess = sessions or {r: session(p, provider, threads) for r, p in spec["parts"].items()}
        self.outs = {r: [o.name for o in s.get_outputs()] for r, s in self.sess.items()}
        step = self.sess["step" if spec["form"] == "static" else "decoder_with_past"]
        names = [i.name for i in step.get_inputs()]
        self.layers = sum(1 for n in names if n.startswith("past_key_values.") and n.endswith(".decoder.key"))
        first = step.get_inputs()[names.index("past_key_values.0.decoder.key")]
        self.heads, self.head_dim = int(first.shape[1]), int(first.shape[3])

    def run(self, role: str, feeds: dict, record=None) -> dict:
        if record is not None:
            record(role, feeds)
        return dict(zip(self.outs[role], self.sess[role].run(self.outs[role], feeds), strict=True))

    def kv(self, out: dict, kind: str) -> dict:
        return {f"{n}.{kind}.{kv}": out[f"present.{n}.{kind}.{kv}"]
                for n in range(self.layers) for kv in ("key", "value")}

    def decode(self, features, record=None, watch=None) -> dict:
        """Greedy decode of one sample's input_features. record(role, feeds) sees every part's
        inputs (arrays never changed afterwards); watch(step, logits) every choosing step's logits.
        Returns {"tokens", "stop", "logits"} (logits: the choosing steps' last-position logits)."""
        import numpy as np
        spec = self.spec
        static = spec["form"] == "static"
        enc = self.run("encoder", {"input_features": np.asarray(features, np.float32)}, record)
        hidden = enc["last_hidden_state"]
        first = "prompt" if static else "decoder"
        out = self.run(first, {"input_ids": np.array([spec["start"]], np.int64),
                               "encoder_hidden_states": hidden}, record)
        cross = self.kv(out, "encoder")
        s = len(spec["start"])
        if static:
            K = int(spec["kv_length"])
            past = {}
            for name, p in self.kv(out, "decoder").items():
                if p.shape[2] != s:
                    raise SystemExit(f"the prompt's present {name} is {list(p.shape)}, not {s} positions")
                buf = np.zeros((1, self.heads, K, self.head_dim), np.float32)
                buf[:, :, :s] = p
                past[name] = buf
        else:
            past = self.kv(out, "decoder")
        filled = s
        logits = out["logits"][0, -1]
        tokens, steps, stop = [], [], None
        while True:
            step = len(tokens)
            steps.append(logits)
            if watch is not None:
                watch(step, logits)
            sup = spec["suppress_tokens"] + (spec["suppress_at_start"] if step == 0 else [])
            choice = greedy_choice(logits, sup)
            if choice is None:
                stop = "nan"
                break
            if choice == spec["end"]:
                stop = "end"
                break
            tokens.append(choice)
            if len(tokens) == spec["max_new_tokens"]:
                stop = "limit"
                break
            feeds = {"input_ids": np.array([[choice]], np.int64)}
            if static:
                if filled >= K:
                    raise SystemExit(f"the KV buffers' {K} slots are full")
                mask = np.zeros((1, K + 1), np.int64)
                mask[0, :filled] = 1
                mask[0, K] = 1
                feeds["position_ids"] = np.array([[filled]], np.int64)
                feeds["attention_mask"] = mask
            for name, v in past.items():
                feeds[f"past_key_values.{name}"] = v
            for name, v in cross.items():
                feeds[f"past_key_values.{name}"] = v
            out = self.run("step" if static else "decoder_with_past", feeds, record)
            if static:
                new = {}
                for name, p in self.kv(out, "decoder").items():
                    buf = past[name].copy()          # fed buffers stay as they were (record keeps them)
                    buf[:, :, filled] = p[:, :, 0]
                    new[name] = buf
                past = new
            else:
                past = self.kv(out, "decoder")
            filled += 1
            logits = out["logits"][0, -1]
        return {"tokens": tokens, "stop": stop, "logits": steps}


# ---------------------------------------------------------------------------------------------
# WER (npu-audit's normalisation)
# ---------------------------------------------------------------------------------------------

def normalise(text: str) -> str:
    chars = list(text)
    kept = []
    for i, c in enumerate(chars):
        inner = c in ("'", "\u2019") and 0 < i < len(chars) - 1 and chars[i - 1].isalnum() and chars[i + 1].isalnum()
        if inner:
            kept.append("'")
        elif c.isalnum() or c.isspace():
            kept.append(c.lower())
        else:
            kept.append(" ")
    return " ".join("".join(kept).split())


def edit_distance(a: list, b: list) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def word_errors(text: str, label: str) -> tuple[int, int]:
    t, lab = normalise(text).split(), normalise(label).split()
    return edit_distance(t, lab), len(lab)


def read_set(set_dir: Path) -> tuple[list[str], dict[str, str]]:
    labels = {}
    order = None
    lp = set_dir / "labels.csv"
    if lp.is_file():
        rows = list(csv.reader(io.StringIO(lp.read_text(encoding="utf-8-sig"), newline="")))
        if not rows or [c.strip() for c in rows[0]] != ["id", "label"]:
            raise SystemExit(f"{lp}: the header must be id,label")
        order = []
        for r in rows[1:]:
            if r:
                labels[r[0].strip()] = r[1] if len(r) > 1 else ""
                order.append(r[0].strip())
    found = sorted(p.stem for p in set_dir.glob("*.npz"))
    if order is None:
        order = found
    missing = [i for i in order if not (set_dir / f"{i}.npz").is_file()]
    if missing:
        raise SystemExit(f"{set_dir}: labels.csv lists {missing[0]} but {missing[0]}.npz is missing")
    if not order:
        raise SystemExit(f"{set_dir}: no .npz samples")
    return order, labels


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec", type=Path, help="an encoder-decoder generation spec (docs/generation.md)")
    ap.add_argument("set_dir", type=Path, help="<id>.npz with input_features, optional labels.csv")
    ap.add_argument("--provider", default="cpu", choices=["cpu"], help="ONNX Runtime provider (cpu)")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    ap.add_argument("--limit", type=int, help="only the first N samples")
    args = ap.parse_args()
    ensure_venv()
    import numpy as np
    spec = load_spec(args.spec)
    order, labels = read_set(args.set_dir)
    if args.limit:
        order = order[:args.limit]
    dec = Decoder(spec, args.provider, args.threads)
    errs = words = 0
    for sid in order:
        with np.load(args.set_dir / f"{sid}.npz") as z:
            feats = z["input_features"]
        if feats.shape != (1, 80, 3000) or feats.dtype != np.float32:
            raise SystemExit(f"{sid}.npz: input_features {feats.dtype} {list(feats.shape)}, expected float32 [1, 80, 3000]")
        r = dec.decode(feats)
        line = {"id": sid, "tokens": r["tokens"], "text": spec["tokenizer"].decode(r["tokens"]), "stop": r["stop"]}
        if sid in labels:
            e, n = word_errors(line["text"], labels[sid])
            line.update({"label": labels[sid], "words": n, "word_errors": e})
            errs, words = errs + e, words + n
        print(json.dumps(line, ensure_ascii=False), flush=True)
    if words:
        print(f"{args.spec.name}: WER {errs}/{words} = {100 * errs / words:.1f}% over {len(order)} samples",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
