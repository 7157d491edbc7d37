#!/usr/bin/env bash
# Collects the report CaptureReport.kt wrote on a phone, adds what the phone says about its
# chipset (getprop) and the ONNX Runtime / QNN lines of its log (logcat), and zips it for
# `npu-audit triage`.
#
#   collect.sh com.example.app report.zip        (adb must see one device)
set -euo pipefail
pkg="${1:?package name}"
out="${2:?output .zip}"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The app's private files, through run-as (a debuggable build).
adb exec-out run-as "$pkg" tar -C files -cf - npu-audit-report | tar -C "$work" -xf -
report="$work/npu-audit-report"

# What the phone says it is; these keys override what the app wrote when the app could not read them.
prop() { adb shell getprop "$1" | tr -d '\r'; }
python3 - "$report/device.json" "$(prop ro.soc.model)" "$(prop ro.board.platform)" "$(prop ro.product.model)" "$(prop ro.soc.manufacturer)" <<'PY'
import json, sys
path, soc, board, model, maker = sys.argv[1:6]
d = json.load(open(path))
for key, value in (("soc_model", soc), ("board_platform", board), ("device_model", model), ("manufacturer", maker)):
    if value and not d.get(key):
        d[key] = value[:256]
json.dump(d, open(path, "w"), indent=2)
PY

# ONNX Runtime's and QNN's lines of the log, in logcat's threadtime format (what triage reads).
mkdir -p "$report/logs"
adb logcat -d -v threadtime | grep -E "onnxruntime|QnnDsp|QNN|Qnn" > "$report/logs/logcat.txt" || true

(cd "$report" && rm -f "$out.tmp" && zip -qr "$out.tmp" device.json outputs.npz inputs.npz logs)
mv "$out.tmp" "$out"
echo "wrote $out"
