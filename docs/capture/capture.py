#!/usr/bin/env python3
"""Capture a device report for `npu-audit triage` on any machine with ONNX Runtime.

Runs MODEL on each input set with the execution provider asked for, configured as npu-audit
configures its targets (graph optimizations `all`, one intra-op thread, devices chosen
explicitly), and writes the report format of docs/device-reports.md: `device.json`,
`outputs.npz` (per output, the samples stacked on a new leading axis), `inputs.npz` (what was
fed, the same way) and, with --log, `logs/onnxruntime.log` (ONNX Runtime's verbose log of the
session). The report is a directory, or a .zip when OUT ends in `.zip`; it appears whole or not
at all.

Needs Python 3.9+, numpy and onnxruntime (>= 1.24 for the QNN plugin: `pip install
onnxruntime-qnn` on Windows on Snapdragon, or the plugin library `npu-audit runtime path qnn`
prints, which runs Qualcomm's HTP simulator on x86-64 Linux).

    python capture.py model.onnx --inputs s0.npz --inputs s1.npz --out report.zip \
        --ep qnn --chipset sm8650 --log
"""

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

__version__ = "1"

# Chipset -> (htp_arch, soc_model), as npu-audit's `qnn:<chipset>` targets pass them.
CHIPSETS = {
    "sm8350": (68, 30),
    "sm8450": (69, 36),
    "sm8475": (69, 42),
    "sm8550": (73, 43),
    "sm8635": (73, 68),
    "sm8650": (75, 57),
    "sm8750": (79, 69),
    "sm8735": (79, 85),
    "sm8850": (81, 87),
}

# device.json keys (docs/device-reports.md); npu-audit refuses any other.
DEVICE_KEYS = (
    "manufacturer", "device_model", "soc_model", "board_platform", "chipset", "os", "app_version",
    "onnxruntime_version", "ep", "ep_options", "qnn_release", "model_sha256",
)
MAX_VALUE = 256

OPT_LEVELS = ("disable", "basic", "extended", "all")


class CaptureError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="the quantized ONNX model the app runs")
    p.add_argument("--inputs", action="append", required=True, metavar="FILE.npz",
                   help="one input set (one sample) per file, arrays named as the model's inputs; repeatable")
    p.add_argument("--out", required=True, help="the report: a directory, or a .zip")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--ep", choices=("cpu", "qnn"), default="cpu", help="execution provider (default cpu)")
    p.add_argument("--qnn-plugin", metavar="PATH",
                   help="the QNN plugin library (default: the one of the installed onnxruntime-qnn package)")
    p.add_argument("--qnn-release", help="the onnxruntime-qnn release of the plugin (default: found from the package or path)")
    p.add_argument("--chipset", help="QNN: the chipset whose htp_arch/soc_model to pass (sm8650, ...)")
    p.add_argument("--htp-arch", type=int, help="QNN: htp_arch (overrides --chipset's)")
    p.add_argument("--soc-model", type=int, help="QNN: soc_model (overrides --chipset's)")
    p.add_argument("--ep-option", action="append", default=[], metavar="KEY=VALUE", help="another EP option; repeatable")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1, as npu-audit)")
    p.add_argument("--opt", choices=OPT_LEVELS, default="all", help="graph optimization level (default all, as npu-audit's cpu and qnn targets)")
    p.add_argument("--device", action="append", default=[], metavar="KEY=VALUE",
                   help="set or override a device.json key (e.g. soc_model=SM8650); repeatable")
    p.add_argument("--log", action="store_true", help="keep ONNX Runtime's verbose log in logs/onnxruntime.log")
    return p.parse_args(argv)


def key_values(pairs, what):
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CaptureError(f"{what} '{pair}' is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def qnn_plugin_path(given):
    """The plugin library: as given, else inside the installed onnxruntime_qnn package."""
    if given:
        if not os.path.isfile(given):
            raise CaptureError(f"--qnn-plugin {given}: no such file")
        return os.path.abspath(given)
    try:
        import onnxruntime_qnn  # the onnxruntime-qnn wheel's package
    except ImportError as e:
        raise CaptureError("--ep qnn needs --qnn-plugin PATH or `pip install onnxruntime-qnn`") from e
    pkg = os.path.dirname(onnxruntime_qnn.__file__)
    for name in ("libonnxruntime_providers_qnn.so", "onnxruntime_providers_qnn.dll"):
        if os.path.isfile(os.path.join(pkg, name)):
            return os.path.join(pkg, name)
    raise CaptureError(f"no QNN plugin library in {pkg}")


def qnn_release_of(plugin, given):
    if given:
        return given
    try:
        from importlib.metadata import version
        return version("onnxruntime-qnn")
    except Exception:  # not installed as a package: read the release from npu-audit's cache path
        m = re.search(r"onnxruntime-qnn-(\d+(?:\.\d+)+)", plugin)
        return m.group(1) if m else None


def qnn_options(args, plugin):
    """The QNN EP options, as npu-audit passes them for `qnn:<chipset>`."""
    backend = "QnnHtp.dll" if os.name == "nt" else "libQnnHtp.so"
    options = {"backend_path": os.path.join(os.path.dirname(plugin), backend)}
    arch, soc = (None, None)
    if args.chipset:
        chip = args.chipset.strip().lower()
        if chip not in CHIPSETS:
            raise CaptureError(f"--chipset {args.chipset}: not one of {', '.join(CHIPSETS)}")
        arch, soc = CHIPSETS[chip]
    arch = args.htp_arch if args.htp_arch is not None else arch
    soc = args.soc_model if args.soc_model is not None else soc
    if arch is not None:
        options["htp_arch"] = str(arch)
    if soc is not None:
        options["soc_model"] = str(soc)
    options.update(key_values(args.ep_option, "--ep-option"))
    return options


def session_options(ort, args, verbose):
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[args.opt]
    if verbose:
        so.log_severity_level = 0
        so.log_verbosity_level = 0
    return so


def attach_ep(ort, so, args):
    """Chooses the devices explicitly (once a plugin is registered ONNX Runtime would otherwise
    hand even a CPU session to it); returns (EP name, options, QNN release)."""
    if args.ep == "cpu":
        options = key_values(args.ep_option, "--ep-option")
        devices = [d for d in ort.get_ep_devices() if d.ep_name == "CPUExecutionProvider"]
        if devices:
            so.add_provider_for_devices(devices, options)
        return "CPUExecutionProvider", options, None
    plugin = qnn_plugin_path(args.qnn_plugin)
    try:
        ort.register_execution_provider_library("QNNExecutionProvider", plugin)
    except Exception as e:
        raise CaptureError(f"the QNN plugin {plugin} does not register: {e}") from e
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    if not devices:
        raise CaptureError("the QNN plugin registered but offers no device")
    options = qnn_options(args, plugin)
    so.add_provider_for_devices(devices, options)
    return "QNNExecutionProvider", options, qnn_release_of(plugin, args.qnn_release)


def load_inputs(np, files, session):
    names = [i.name for i in session.get_inputs()]
    samples = []
    for f in files:
        if not os.path.isfile(f):
            raise CaptureError(f"--inputs {f}: no such file")
        with np.load(f, allow_pickle=False) as z:
            missing = [n for n in names if n not in z.files]
            if missing:
                raise CaptureError(f"--inputs {f}: no array for input(s) {', '.join(missing)}")
            samples.append({n: z[n] for n in names})
    return samples


@contextlib.contextmanager
def stderr_to(path):
    """Sends file descriptor 2 (where ONNX Runtime's C++ logger writes) to `path`."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def run(ort, np, args, log_path):
    so = session_options(ort, args, log_path is not None)
    with stderr_to(log_path):
        ep, options, release = attach_ep(ort, so, args)
        session = ort.InferenceSession(args.model, sess_options=so)
        samples = load_inputs(np, args.inputs, session)
        outputs = [session.run(None, s) for s in samples]
    names = [o.name for o in session.get_outputs()]
    stacked_out = {n: np.stack([o[k] for o in outputs]) for k, n in enumerate(names)}
    stacked_in = {n: np.stack([s[n] for s in samples]) for n in samples[0]}
    return stacked_out, stacked_in, ep, options, release


def getprop(name):
    try:
        out = subprocess.run(["getprop", name], capture_output=True, text=True, timeout=5, check=False)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def processor_name():
    """What the machine calls its processor: Windows' registry (Snapdragon X names itself there),
    macOS' sysctl, Linux's /proc/cpuinfo."""
    if os.name == "nt":
        try:
            import winreg
            key = winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"HARDWARE\DESCRIPTION\System\CentralProcessor\0")
            return winreg.QueryValueEx(key, "ProcessorNameString")[0].strip()
        except OSError:
            return platform.processor() or None
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5, check=False
            )
            return out.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or None


def machine_facts():
    """What this machine says it is. On Android (Termux) getprop has the SoC; elsewhere the
    processor's own name goes to `chipset`, which triage reads (Snapdragon X Elite, ...)."""
    facts = {"os": f"{platform.system()} {platform.release()}".strip()}
    soc = getprop("ro.soc.model")
    if soc:
        facts.update(soc_model=soc, board_platform=getprop("ro.board.platform"),
                     manufacturer=getprop("ro.product.manufacturer"), device_model=getprop("ro.product.model"))
    else:
        name = processor_name() or ""
        if re.search(r"snapdragon|qualcomm", name, re.IGNORECASE):
            facts["chipset"] = name
    return {k: v for k, v in facts.items() if v}


def device_json(ort, args, ep, options, release):
    info = machine_facts()
    if ep == "QNNExecutionProvider" and args.chipset and "soc_model" not in info and not sys.platform.startswith("win"):
        # Qualcomm's HTP simulator on a host: the device is the chipset simulated.
        info.pop("chipset", None)
        info["soc_model"] = args.chipset.strip().upper()
    info.update(
        app_version=f"capture.py {__version__}",
        onnxruntime_version=ort.__version__,
        ep=ep,
        ep_options={k: str(v) for k, v in options.items() if k != "backend_path"},
        model_sha256=sha256_file(args.model),
    )
    if release:
        info["qnn_release"] = release
    info.update(device_overrides(args))
    for key, value in info.items():
        if isinstance(value, str) and len(value) > MAX_VALUE:
            info[key] = value[:MAX_VALUE]
    return info


def device_overrides(args):
    """The --device KEY=VALUE pairs, checked against device.json's keys."""
    overrides = key_values(args.device, "--device")
    for key in overrides:
        if key not in DEVICE_KEYS or key == "ep_options":
            raise CaptureError(f"--device {key}: not a device.json key ({', '.join(DEVICE_KEYS)})")
    return overrides


def npz_bytes(np, arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def report_files(np, outputs, inputs, device, log_path):
    files = {
        "device.json": (json.dumps(device, indent=2, sort_keys=True) + "\n").encode(),
        "outputs.npz": npz_bytes(np, outputs),
        "inputs.npz": npz_bytes(np, inputs),
    }
    if log_path and os.path.getsize(log_path) > 0:
        with open(log_path, "rb") as f:
            files["logs/onnxruntime.log"] = f.read()
    return files


def write_report(out, files, force):
    """Writes the report beside OUT, then moves it into place: whole or not at all."""
    out = os.path.abspath(out)
    if os.path.lexists(out) and not force:
        raise CaptureError(f"{out} exists (--force replaces it)")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    if out.endswith(".zip"):
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".capture-", suffix=".zip")
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in files.items():
                z.writestr(name, data)
        os.replace(tmp, out)
        return
    tmp = tempfile.mkdtemp(dir=parent, prefix=".capture-")
    for name, data in files.items():
        path = os.path.join(tmp, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    old = None
    if os.path.lexists(out):
        old = tempfile.mkdtemp(dir=parent, prefix=".capture-old-")
        os.rename(out, os.path.join(old, "report"))
    os.rename(tmp, out)
    if old:
        shutil.rmtree(old)


def main(argv):
    args = parse_args(argv)
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        raise CaptureError(f"{e.name} is not installed (pip install numpy onnxruntime)") from e
    if not os.path.isfile(args.model):
        raise CaptureError(f"{args.model}: no such file")
    if args.threads < 1:
        raise CaptureError("--threads must be at least 1")
    device_overrides(args)
    if os.path.lexists(args.out) and not args.force:
        raise CaptureError(f"{os.path.abspath(args.out)} exists (--force replaces it)")
    with tempfile.TemporaryDirectory(prefix="capture-log-") as scratch:
        log_path = os.path.join(scratch, "onnxruntime.log") if args.log else None
        try:
            outputs, inputs, ep, options, release = run(ort, np, args, log_path)
        except CaptureError:
            raise
        except Exception as e:  # ONNX Runtime refused the model, the inputs or the EP
            raise CaptureError(f"ONNX Runtime: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}") from e
        device = device_json(ort, args, ep, options, release)
        write_report(args.out, report_files(np, outputs, inputs, device, log_path), args.force)
    print(f"wrote {args.out}: {len(args.inputs)} sample(s) on {ep}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except CaptureError as e:
        print(f"capture.py: error: {e}", file=sys.stderr)
        sys.exit(2)
