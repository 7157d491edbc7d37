"""Builds labelled eval sets of rendered text lines for PaddleOCR's models, labels exact by
construction (tests/it/eval.rs). `cls` and `rec` need NumPy and Pillow only
(tests/data/evalset-requirements.txt); `vocab` needs onnx and `quantize` ONNX Runtime
(tests/data/eval-requirements.txt, the tests' environment).

    make_eval_set.py cls OUT --count N --seed S [--hard] [--stacked]
        Text-direction classification (PP-OCR cls, input x [1, 3, 48, 192]): a line upright is
        class 0 ("0"), turned half a turn class 1 ("180"). --hard: low contrast and noise.
        --stacked: one OUT.npz with x [N, 3, 48, 192] and a `labels` member, instead of a
        directory of one .npz per sample and labels.csv.
    make_eval_set.py rec OUT --count N --seed S --vocab FILE
        Text recognition (PP-OCRv4 rec, input x [1, 3, 48, 320]): the label is the line's text.
    make_eval_set.py vocab MODEL OUT
        Writes a recognizer's dictionary (its `character` metadata) one entry per line.
    make_eval_set.py quantize FP32 OUT --calibrate DIR [--a16w8]
        A QDQ model of FP32 (ONNX Runtime's static quantization, per-tensor, MinMax) calibrated
        on the set in DIR: u8 activations and weights, or u16 activations and u8 weights.

Lines are drawn with Pillow's bundled font (the same glyphs on every machine with this Pillow),
preprocessed as PaddleOCR preprocesses them: resized to height 48 keeping the aspect ratio,
scaled to [-1, 1], padded with zeros on the right.
"""

import argparse
import csv
import math
import pathlib

import numpy as np
from PIL import Image, ImageDraw, ImageFont

WORDS = (
    "the quick brown fox jumps over lazy dog model phone chipset release drift layer "
    "output input quantized rounding compiler kernel tensor accuracy sample label audit "
    "north south east west seven eleven forty 2026 v1.2 ID-7 A13 0.5x"
).split()


def render(text, rng, hard):
    """A grey-scale text line as an RGB uint8 array, tight around the text with a margin."""
    font = ImageFont.load_default(size=int(rng.integers(26, 40)))
    left, top, right, bottom = font.getbbox(text)
    pad = int(rng.integers(4, 12))
    width, height = right - left + 2 * pad, bottom - top + 2 * pad
    if hard:
        background = int(rng.integers(110, 160))
        ink = background - int(rng.integers(25, 45))
    else:
        background, ink = 255, int(rng.integers(0, 60))
    image = Image.new("L", (width, height), background)
    ImageDraw.Draw(image).text((pad - left, pad - top), text, fill=ink, font=font)
    pixels = np.asarray(image, dtype=np.float64)
    if hard:
        pixels = pixels + rng.normal(0.0, 18.0, pixels.shape)
    pixels = np.clip(np.rint(pixels), 0, 255).astype(np.uint8)
    return np.stack([pixels] * 3, axis=-1)


def preprocess(rgb, height, width):
    """PaddleOCR's resize_norm_img: height fixed, width by the ratio (at most `width`), [-1, 1],
    zeros on the right."""
    h, w = rgb.shape[:2]
    resized_w = min(width, math.ceil(height * w / h))
    resized = Image.fromarray(rgb).resize((resized_w, height), Image.BILINEAR)
    chw = np.asarray(resized, dtype=np.float32).transpose(2, 0, 1) / 255.0
    chw = (chw - 0.5) / 0.5
    out = np.zeros((3, height, width), dtype=np.float32)
    out[:, :, :resized_w] = chw
    return out


def line_text(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


def write_set(out, rows, stacked):
    """rows: (id, x [3, H, W], label). A directory of `<id>.npz` and labels.csv, or one archive."""
    if stacked:
        np.savez(
            out,
            x=np.stack([x for _, x, _ in rows]),
            labels=np.array([label for _, _, label in rows], dtype=np.int64),
        )
        return
    out.mkdir(parents=True, exist_ok=False)
    for sample_id, x, _ in rows:
        np.savez(out / f"{sample_id}.npz", x=x[None])
    with open(out / "labels.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["id", "label"])
        for sample_id, _, label in rows:
            writer.writerow([sample_id, label])


def cls_set(args):
    rng = np.random.default_rng(args.seed)
    rows = []
    for k in range(args.count):
        rgb = render(line_text(rng, int(rng.integers(1, 4))), rng, args.hard)
        label = int(rng.integers(0, 2))
        if label == 1:
            rgb = rgb[::-1, ::-1].copy()
        rows.append((f"line{k:05d}", preprocess(rgb, 48, 192), label))
    write_set(pathlib.Path(args.out), rows, args.stacked)


def rec_set(args):
    rng = np.random.default_rng(args.seed)
    known = set(pathlib.Path(args.vocab).read_text(encoding="utf-8").split("\n")) | {" "}
    rows = []
    while len(rows) < args.count:
        text = line_text(rng, int(rng.integers(1, 3)))
        rgb = render(text, rng, args.hard)
        if rgb.shape[1] / rgb.shape[0] > 320 / 48 or not set(text) <= known:
            continue  # too long for one 320-wide input, or a character the model cannot read
        rows.append((f"text{len(rows):05d}", preprocess(rgb, 48, 320), text))
    write_set(pathlib.Path(args.out), rows, False)


def vocab(args):
    import onnx

    model = onnx.load(args.model, load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    pathlib.Path(args.out).write_text(meta["character"], encoding="utf-8")


def quantize(args):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self, files):
            self.files = iter(files)

        def get_next(self):
            f = next(self.files, None)
            return None if f is None else {"x": np.load(f)["x"]}

    files = sorted(pathlib.Path(args.calibrate).glob("*.npz"))
    quantize_static(
        args.fp32,
        args.out,
        Reader(files),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt16 if args.a16w8 else QuantType.QUInt8,
        weight_type=QuantType.QUInt8,
        per_channel=False,
    )


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="kind", required=True)
    for kind in ("cls", "rec"):
        p = sub.add_parser(kind)
        p.add_argument("out")
        p.add_argument("--count", type=int, required=True)
        p.add_argument("--seed", type=int, required=True)
        p.add_argument("--hard", action="store_true")
        if kind == "cls":
            p.add_argument("--stacked", action="store_true")
        else:
            p.add_argument("--vocab", required=True)
    p = sub.add_parser("vocab")
    p.add_argument("model")
    p.add_argument("out")
    p = sub.add_parser("quantize")
    p.add_argument("fp32")
    p.add_argument("out")
    p.add_argument("--calibrate", required=True)
    p.add_argument("--a16w8", action="store_true")
    args = parser.parse_args()
    {"cls": cls_set, "rec": rec_set, "vocab": vocab, "quantize": quantize}[args.kind](args)


if __name__ == "__main__":
    main()
