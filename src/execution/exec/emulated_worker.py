"""The worker protocol of `npu-audit __worker JOB.json [--serve]`, in Python, for the CPU EP.

Why this file exists: ARM64 CPU targets run the official onnxruntime aarch64 Python wheel under
qemu user-mode emulation, where the tool's own (x86) binary cannot load that runtime. The audit
starts this script in the emulated Python instead of its Rust worker:

    python3.11 -s emulated_worker.py JOB.json [--serve]

and reads what it leaves exactly as it reads the Rust worker's (src/execution/exec/child.rs): the same job
file (src/execution/exec/job.rs), the same `result.json` beside the outputs, the same `s{k}/o{i}.npy`
files, the same frames on the pipes in `--serve` mode (src/execution/exec/wire.rs) and the same exit codes.
It needs only the Python standard library, numpy and onnxruntime.

Only `ep.kind == "cpu"` jobs are run; any other kind, and a job with `delta_root` set (growing
stream states written as deltas, a format only the Rust side writes), end in a failed result
that says why. What differs from the Rust worker's result is listed below the imports.
"""

import errno
import io
import json
import os
import re
import struct
import sys
import time

# What the result holds differently from the Rust worker's (tests/it/worker_protocol.rs runs
# both workers on the corpus of tests/data/worker_conformance/ and masks exactly these; anything
# else that differs fails it):
# - register_ms is 0.0 (no plugin library is ever registered);
# - ort_version is `onnxruntime.__version__`, load_ms the time to import numpy and onnxruntime;
# - runtime_graph is always null (the CPU EP asks for no layout change, so the Rust worker
#   records none for CPU jobs either);
# - floats in result.json are Python's shortest repr (`1e-05`) where serde_json writes `1e-5`.

# Exit codes (src/execution/exec/child.rs `run`, src/execution/exec/pool.rs).
EXIT_OK = 0
EXIT_NO_RESULT = 2
WORKER_NO_SPACE = 28  # pool::WORKER_NO_SPACE: the result could not be written, the disk is full
EXIT_INJECTED = 7  # pool::inject_fault "exit"

FAULT_INJECTION_ENV = "NPU_AUDIT_FAULT_INJECT"

# Session config entry that makes ONNX Runtime record the EP assignment (assignment.rs).
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"

CPU_EP = "CPUExecutionProvider"

# Phase names, in order (job.rs `Phase`, serde snake_case).
LOAD_RUNTIME = "load_runtime"
REGISTER_EP = "register_ep"
CREATE_SESSION = "create_session"
RUN = "run"
WRITE_OUTPUTS = "write_outputs"
DONE = "done"

# ONNX TensorProto.DataType codes of the element types the audit reads, by the type name
# onnxruntime's Python API gives (`NodeArg.type` is `tensor(NAME)`), with the audit's DType name
# (tensor/mod.rs) and its `.npy` type code.
SUPPORTED = {
    "float": (1, "float32", "f4"),
    "uint8": (2, "uint8", "u1"),
    "int8": (3, "int8", "i1"),
    "uint16": (4, "uint16", "u2"),
    "int16": (5, "int16", "i2"),
    "int32": (6, "int32", "i4"),
    "int64": (7, "int64", "i8"),
    "bool": (9, "bool", "b1"),
    "float16": (10, "float16", "f2"),
    "double": (11, "float64", "f8"),
    "uint32": (12, "uint32", "u4"),
    "uint64": (13, "uint64", "u8"),
}
# The audit's DType name of each `.npy` type code it reads.
DTYPE_OF_CODE = {code: name for (_, name, code) in SUPPORTED.values()}

# ort's `TensorElementType` names of the tensor types the audit does not read, for the Rust
# worker's "has element type X, which the audit does not support".
ORT_TYPE_NAMES = {
    "string": "String",
    "bfloat16": "Bfloat16",
    "complex64": "Complex64",
    "complex128": "Complex128",
    "float8e4m3fn": "Float8E4M3FN",
    "float8e4m3fnuz": "Float8E4M3FNUZ",
    "float8e5m2": "Float8E5M2",
    "float8e5m2fnuz": "Float8E5M2FNUZ",
    "uint4": "Uint4",
    "int4": "Int4",
    "float4e2m1": "Float4E2M1",
    "uint2": "Uint2",
    "int2": "Int2",
    "float8e8m0": "Float8E8M0",
}

# Limits of a frame (wire.rs).
MAX_NAME = 64 << 10
MAX_TENSORS = 1 << 16
MAX_NPY = 16 << 30

# onnxruntime's Python exceptions carry `[ONNXRuntimeError] : CODE : NAME : ` before the message
# the C API (and so the Rust worker) reports.
ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", re.DOTALL)

np = None  # numpy, imported in the load phase
ort = None  # onnxruntime, likewise
C = None  # its binding (onnxruntime.capi._pybind_state), likewise


class WorkerError(Exception):
    """A failure of the job, its text as the Rust worker's (anyhow's `{e:#}`)."""


class BadJob(Exception):
    """The job file cannot be read: no result is written (exit 2)."""


def log_line(text):
    """A line in the worker's log (stderr); a log that cannot be written is not an error."""
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def io_text(e):
    """An OS error as Rust's `std::io::Error` displays it."""
    if isinstance(e, OSError) and e.errno is not None:
        return "%s (os error %d)" % (os.strerror(e.errno), e.errno)
    return str(e)


def ort_text(e):
    """An onnxruntime exception as the C API's message."""
    return ORT_PREFIX.sub("", str(e), count=1)


def error_text(e):
    """The text of a job's failure for its result (and for an `E` frame)."""
    if isinstance(e, WorkerError):
        return str(e)
    if isinstance(e, OSError):
        # A pipe the audit closed, a frame it could not take.
        return io_text(e)
    return "%s: %s" % (type(e).__name__, e)


def ms_since(start):
    return (time.perf_counter() - start) * 1e3


def absolute(path):
    """`std::path::absolute` on Unix: relative paths joined to the working directory, `.`
    components and repeated separators dropped, `..` kept."""
    path = os.fspath(path)
    if not path.startswith("/"):
        path = os.getcwd() + "/" + path
    lead = "//" if path.startswith("//") and not path.startswith("///") else "/"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    trailing = "/" if path.endswith("/") and parts else ""
    return lead + "/".join(parts) + trailing


# ---------------------------------------------------------------------------------------------
# The job


def read_job(path):
    """Reads and checks the job as serde does (unknown fields are ignored; a missing or mistyped
    field makes the job unreadable), with every path absolute (`Job::absolutize`)."""
    try:
        with open(path, "rb") as f:
            job = json.loads(f.read())
    except OSError as e:
        raise BadJob(io_text(e))
    except ValueError as e:
        raise BadJob(str(e))

    def need(obj, key, kind, what="job"):
        if not isinstance(obj, dict) or key not in obj:
            raise BadJob("missing field `%s` in the %s" % (key, what))
        value = obj[key]
        if kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise BadJob("invalid type for field `%s` in the %s" % (key, what))
        return value

    def pairs(value, key, second):
        if not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], second)
            for p in value
        ):
            raise BadJob("invalid type for field `%s`" % key)
        return [(p[0], p[1]) for p in value]

    if not isinstance(job, dict):
        raise BadJob("the job is not a JSON object")
    need(job, "target_id", str)
    need(job, "ort_library", str)
    ep = need(job, "ep", dict)
    kind = need(ep, "kind", str, "ep")
    if kind not in ("cpu", "plugin", "built_in"):
        raise BadJob("unknown variant `%s` of ep.kind" % kind)
    if kind == "cpu":
        ep["options"] = pairs(need(ep, "options", list, "ep"), "options", str)
    opt = need(job, "opt", str)
    if opt not in ("disable", "basic", "extended", "all"):
        raise BadJob("unknown variant `%s` of opt" % opt)
    job["model"] = absolute(need(job, "model", str))
    job["output_dir"] = absolute(need(job, "output_dir", str))
    for sample in need(job, "samples", list):
        if not isinstance(sample, list):
            raise BadJob("invalid type for field `samples`")
        for inp in sample:
            need(inp, "name", str, "input file")
            inp["path"] = absolute(need(inp, "path", str, "input file"))
    need(job, "intra_threads", int)
    job["free_dims"] = pairs(need(job, "free_dims", list), "free_dims", int)
    job["session_config"] = pairs(need(job, "session_config", list), "session_config", str)
    for key, default in (("inspect_placement", False), ("compile_only", False)):
        job.setdefault(key, default)
        need(job, key, bool)
    job.setdefault("repeat", 1)
    need(job, "repeat", int)
    job.setdefault("feedback", [])
    for f in need(job, "feedback", list):
        need(f, "output", str, "feedback")
        need(f, "input", str, "feedback")
    root = job.get("delta_root")
    if root is not None and not isinstance(root, str):
        raise BadJob("invalid type for field `delta_root`")
    return job


def new_result(job):
    """`JobResult::starting()`, its fields in the Rust struct's order (serde writes them so)."""
    return {
        "ok": False,
        "phase": LOAD_RUNTIME,
        "error": None,
        "ort_version": None,
        "load_ms": 0.0,
        "register_ms": 0.0,
        "session_create_ms": 0.0,
        "run_ms": [],
        "io_ms": 0.0,
        "outputs": [],
        "devices": [],
        "placement": [],
        "placement_error": None,
        "runtime_graph": None,
        "repeat_differences": [],
        "output_types": [],
        "intra_threads": job["intra_threads"],
        "peak_rss_mb": 0.0,
    }


def peak_rss_mb():
    """Peak resident memory in MiB, as `timings::peak_rss_mb` (getrusage; Linux says KiB). Under
    qemu user mode that is the emulator's."""
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    except Exception:
        pass
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except Exception:
        pass
    return 0.0


# ---------------------------------------------------------------------------------------------
# Faults injected on purpose (pool.rs), so the parent's handling of a dying worker can be tested
# with this worker too.


def faults(target_id):
    spec = os.environ.get(FAULT_INJECTION_ENV)
    if spec is None:
        return []
    out = []
    for item in spec.split(";"):
        if "=" in item:
            tid, fault = item.split("=", 1)
            if tid == target_id:
                out.append(fault)
    return out


def crash():
    log_line("npu-audit worker: injected crash")
    os.abort()


def inject_fault(target_id):
    for fault in faults(target_id):
        if fault == "crash":
            crash()
        elif fault == "hang":
            while True:
                time.sleep(3600)
        elif fault == "exit":
            os._exit(EXIT_INJECTED)


def inject_sample_fault(target_id, n):
    for fault in faults(target_id):
        if fault == "slow":
            time.sleep(0.1)
        elif fault.startswith("crash@"):
            try:
                at = int(fault[len("crash@"):])
            except ValueError:
                continue
            if at == n:
                crash()


def refused_output(target_id):
    for fault in faults(target_id):
        if fault.startswith("refuse-output:"):
            return fault[len("refuse-output:"):]
    return None


# ---------------------------------------------------------------------------------------------
# Tensors


def check_array(a, where):
    """An array the audit can exchange: one of its element types, little-endian, C order."""
    code = a.dtype.str[1:]
    if a.dtype.names is not None or a.dtype.subdtype is not None or code not in DTYPE_OF_CODE:
        raise WorkerError("%sunsupported .npy dtype '%s'" % (where, a.dtype.str))
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = a.copy(order="C")
    return a


DELTA_MAGIC = b"\x93NPU-AUDIT-DELTA"  # tensor/delta.rs: a stream state kept as what a step added
NPY_MAGIC = b"\x93NUMPY"


def check_npy_start(head, where):
    """The first bytes of a `.npy` checked as tensor/npy.rs `read_header` checks them (its magic
    and version read first, in its words), before numpy reads the rest."""
    if len(head) < 8:
        raise WorkerError(
            "%snot a valid .npy file: cannot read its magic and version: failed to fill whole buffer" % where
        )
    if head[:6] != NPY_MAGIC:
        raise WorkerError("%snot a valid .npy file: it does not start with the magic \\x93NUMPY" % where)


def read_array(stream, room):
    """A `.npy` array from `stream` (its magic checked), read as tensor/npy.rs reads it: its
    element type checked before its data, no more data read than the header's shape needs, and a
    shortfall said in its words. `room`: the size of the whole file, which the data must fit (None
    for a frame's tensor). Raises ValueError, which the caller prefixes with what it read."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    if dtype.names is not None or dtype.subdtype is not None or dtype.str[1:] not in DTYPE_OF_CODE:
        raise ValueError("unsupported .npy dtype '%s'" % dtype.str)
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    name = DTYPE_OF_CODE[dtype.str[1:]]
    dims = "[%s]" % ", ".join(str(d) for d in shape)
    if room is not None and nbytes > room:
        raise ValueError(
            "truncated .npy data: shape %s of %s needs %d bytes but the file or archive entry holds %d"
            % (dims, name, nbytes, room)
        )
    data = stream.read(nbytes) if nbytes else b""
    if len(data) != nbytes:
        raise ValueError("truncated .npy data: %d bytes for shape %s of %s, expected %d" % (len(data), dims, name, nbytes))
    a = np.frombuffer(data, dtype=dtype, count=count)
    if fortran:
        return a.reshape(shape[::-1]).transpose()
    return a.reshape(shape)


def read_npy(path):
    """An input file, as `Tensor::read_npy` takes it (any byte order or memory order)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise WorkerError("cannot open %s: %s" % (path, io_text(e)))
    with f:
        try:
            head = f.read(len(DELTA_MAGIC))
            if head == DELTA_MAGIC:
                # This worker reads no delta file (it refuses jobs with delta_root), so every one
                # is outside the roots it registered: tensor/delta.rs `read` in its words.
                raise WorkerError(
                    "%s is a delta file of an audit's work directory, readable only while that audit runs" % path
                )
            check_npy_start(head, "%s: " % path)
            f.seek(0)
            # The file's length bounds the data, as in `Tensor::read_npy`.
            a = read_array(f, os.fstat(f.fileno()).st_size)
        except WorkerError:
            raise
        except OSError as e:
            raise WorkerError("%s: %s" % (path, io_text(e)))
        except Exception as e:
            raise WorkerError("%s: %s" % (path, e))
    return check_array(a, "%s: " % path)


def npy_bytes(a):
    """The `.npy` encoding (`Tensor::to_npy_bytes`, byte for byte what `numpy.save` writes)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, allow_pickle=False)
    return buf.getvalue()


def write_npy(path, a):
    data = npy_bytes(a)
    try:
        f = open(path, "wb")
    except OSError as e:
        raise WorkerError("cannot create %s: %s" % (path, io_text(e)))
    try:
        with f:
            f.write(data)
    except OSError as e:
        raise WorkerError("cannot write %s: %s" % (path, io_text(e)))


def differing_bits(a, b):
    """Elements of `b` whose bits differ from `a`'s (every element when shape or type differ)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return max(a.size, b.size)
    if a.size == 0:
        return 0
    unsigned = "u%d" % a.dtype.itemsize
    x = np.ascontiguousarray(a).reshape(-1).view(unsigned)
    y = np.ascontiguousarray(b).reshape(-1).view(unsigned)
    return int(np.count_nonzero(x != y))


# ---------------------------------------------------------------------------------------------
# The session


def load_runtime(job, result):
    """Imports onnxruntime (the phase the Rust worker loads its library in) and lists the EP
    devices it offers."""
    global np, ort, C
    if job.get("delta_root") is not None:
        raise WorkerError(
            "this worker writes every output whole and cannot write deltas: the job must leave "
            "delta_root unset (it is %s)" % job["delta_root"]
        )
    start = time.perf_counter()
    try:
        import numpy
        import onnxruntime
        from onnxruntime.capi import _pybind_state
    except Exception as e:
        raise WorkerError("cannot load ONNX Runtime: %s" % e)
    np, ort, C = numpy, onnxruntime, _pybind_state
    result["ort_version"] = getattr(ort, "__version__", None)
    result["load_ms"] = ms_since(start)

    result["phase"] = REGISTER_EP
    kind = job["ep"]["kind"]
    if kind != "cpu":
        name = job["ep"].get("ep_name") or kind
        raise WorkerError(
            "the emulated worker runs only the CPU execution provider; this job asks for %s (%s)"
            % (name, kind)
        )
    result["register_ms"] = 0.0
    result["devices"] = [
        "%s: %s %s" % (d.ep_name, d.device.vendor, d.device.type.name) for d in ort.get_ep_devices()
    ]


OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def session_options(job):
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[job["opt"]])
    so.intra_op_num_threads = job["intra_threads"]
    # Sequential execution uses no inter-op pool; 1 keeps it so whatever the defaults become.
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    for name, value in job["free_dims"]:
        so.add_free_dimension_override_by_name(name, value)
    so.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    for key, value in job["session_config"]:
        so.add_session_config_entry(key, value)
    # As the Rust worker: the CPU EP's devices chosen explicitly, its options passed with them.
    options = job["ep"]["options"]
    cpu = [d for d in ort.get_ep_devices() if d.ep_name == CPU_EP]
    if cpu:
        so.add_provider_for_devices(cpu, {k: v for k, v in options})
    elif options:
        raise WorkerError("this ONNX Runtime offers no CPU device to pass CPU EP options to")
    return so


def tensor_elem(type_name):
    """The element type of a `tensor(ELEM)` type name (as onnxruntime's Python API spells them),
    None for other types (`seq(...)`, `map(...)`)."""
    m = re.fullmatch(r"tensor\((\w+)\)", type_name or "")
    return m.group(1) if m else None


def output_type(arg):
    """A session output's declared type as `child.rs::output_type`: ONNX code (0 for types the
    audit does not read, and for non-tensors) and shape (-1 for open dimensions)."""
    elem = tensor_elem(arg.type)
    if elem is None:
        return {"name": arg.name, "elem_type": 0, "shape": []}
    code = SUPPORTED.get(elem, (0,))[0]
    shape = [d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or [])]
    return {"name": arg.name, "elem_type": code, "shape": shape}


def create_session(job, result):
    if job["inspect_placement"]:
        # EPs explain rejected nodes only at verbose level (never asked for CPU targets).
        ort.set_default_logger_severity(0)
    start = time.perf_counter()
    try:
        so = session_options(job)
        if not os.path.exists(job["model"]):
            # What `ort` says before it calls the runtime.
            raise WorkerError("File at `%s` does not exist" % job["model"])
        session = ort.InferenceSession(job["model"], sess_options=so)
    except WorkerError:
        raise
    except Exception as e:
        raise WorkerError(ort_text(e))
    finally:
        if job["inspect_placement"]:
            ort.set_default_logger_severity(3)
    result["session_create_ms"] = ms_since(start)
    result["output_types"] = [output_type(o) for o in session.get_outputs()]
    try:
        result["placement"] = [
            {
                "ep": sg.ep_name,
                "nodes": [{"name": n.name, "op_type": n.op_type} for n in sg.get_nodes()],
            }
            for sg in session.get_provider_graph_assignment_info()
        ]
    except Exception as e:
        result["placement_error"] = ort_text(e)
    return session


def plain_outputs(session):
    """Whether every output is declared a tensor of a type numpy holds (the binding's `run` can
    then return them all as arrays)."""
    return all(tensor_elem(o.type) in SUPPORTED for o in session.get_outputs())


def run_once(session, inputs, names, plain):
    """One run on `inputs` ((name, array) pairs): every output, in `names` order.

    Runs go through the binding, not the Python wrappers, which add their own check of missing
    inputs (in words other than the runtime's). The binding's `run` takes the inputs in the
    order given (the runtime reports the first bad one), but converts every output to numpy,
    failing on types numpy lacks (int4) in words of its own; a session that declares such an
    output (`plain` false) runs through `run_with_ort_values`, which returns the values to be
    looked at first, as the Rust worker does (its inputs then go in an order of its own)."""
    try:
        if plain:
            values = session._sess.run(names, dict(inputs), None)
        else:
            cpu = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
            feed = {name: C.OrtValue.ortvalue_from_numpy(a, cpu) for name, a in inputs}
            values = list(session._sess.run_with_ort_values(feed, names, None))
    except Exception as e:
        raise WorkerError(ort_text(e))
    if len(values) != len(names):
        raise WorkerError("output '%s' missing" % names[min(len(values), len(names) - 1)])
    out = []
    for name, value in zip(names, values):
        if not plain:
            if not value.is_tensor():
                raise WorkerError(
                    "output '%s': is not a tensor (sequence and map outputs are not supported)" % name
                )
            elem = tensor_elem(value.data_type())
            if elem not in SUPPORTED:
                raise WorkerError(
                    "output '%s': has element type %s, which the audit does not support"
                    % (name, ORT_TYPE_NAMES.get(elem, elem or value.data_type()))
                )
            value = value.numpy()
        if not isinstance(value, np.ndarray):
            raise WorkerError("output '%s': is not a tensor" % name)
        out.append(check_array(value, "output '%s': " % name))
    return out


def output_path(output_dir, si, oi):
    return os.path.join(output_dir, "s%d" % si, "o%d.npy" % oi)


def write_outputs(output_dir, si, names, tensors):
    directory = os.path.join(output_dir, "s%d" % si)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise WorkerError(io_text(e))
    files = []
    for oi, (name, a) in enumerate(zip(names, tensors)):
        path = output_path(output_dir, si, oi)
        write_npy(path, a)
        files.append(
            {"name": name, "dtype": DTYPE_OF_CODE[a.dtype.str[1:]], "shape": list(a.shape), "path": path}
        )
    return files


def run_samples(job, session, result):
    """Every sample (`repeat` times, repeats compared bit for bit with the first run), the first
    run's outputs written as `s{k}/o{i}.npy`; a stream's fed-back inputs taken from the previous
    step's outputs."""
    names = [o.name for o in session.get_outputs()]
    plain = plain_outputs(session)
    refused = refused_output(job["target_id"])
    if refused is not None and refused in names:
        result["phase"] = RUN
        raise WorkerError("injected fault: this session cannot return output %s" % refused)
    fed = []
    for f in job["feedback"]:
        if f["output"] not in names:
            raise WorkerError("the session has no output '%s' to feed back" % f["output"])
        fed.append((names.index(f["output"]), f["input"]))
    state = []
    for si, sample in enumerate(job["samples"]):
        result["phase"] = RUN
        reading = time.perf_counter()
        tensors = []
        for inp in sample:
            carried = None
            if si > 0:
                k = next((k for k, (_, name) in enumerate(fed) if name == inp["name"]), None)
                if k is not None and k < len(state) and state[k] is not None:
                    carried, state[k] = state[k], None
            tensors.append((inp["name"], carried if carried is not None else read_npy(inp["path"])))
        result["io_ms"] += ms_since(reading)
        start = time.perf_counter()
        first = run_once(session, tensors, names, plain)
        result["run_ms"].append(ms_since(start))
        for run in range(1, max(job["repeat"], 1)):
            again = run_once(session, tensors, names, plain)
            for name, reference, tensor in zip(names, first, again):
                differing = differing_bits(reference, tensor)
                if differing > 0:
                    result["repeat_differences"].append(
                        {
                            "sample": si,
                            "run": run,
                            "output": name,
                            "differing": differing,
                            "elements": int(reference.size),
                        }
                    )
        state = [first[o] if o < len(first) else None for o, _ in fed]
        result["phase"] = WRITE_OUTPUTS
        writing = time.perf_counter()
        result["outputs"].append(write_outputs(job["output_dir"], si, names, first))
        result["io_ms"] += ms_since(writing)


def execute(job, result):
    load_runtime(job, result)
    result["phase"] = CREATE_SESSION
    session = create_session(job, result)
    if not job["compile_only"]:
        run_samples(job, session, result)
    return session


# ---------------------------------------------------------------------------------------------
# Serving (wire.rs): one session, samples from standard input, answers as frames.


class Frames:
    """The frames of wire.rs over a copy of standard output; standard output itself is pointed
    at standard error (the log), so that nothing the runtime prints can corrupt them."""

    def __init__(self):
        fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.out = os.fdopen(fd, "wb")

    def _text(self, kind, text):
        self.out.write(kind + struct.pack("<Q", len(text)) + text)
        self.out.flush()

    def ready(self, result):
        compact = json.dumps(result, separators=(",", ":"), ensure_ascii=False)
        self._text(b"R", compact.encode("utf-8"))

    def error(self, text):
        self._text(b"E", text.encode("utf-8"))

    def outputs(self, named, run_ms):
        parts = [b"O", struct.pack("<d", run_ms), struct.pack("<Q", len(named))]
        for name, a in named:
            raw = name.encode("utf-8")
            body = npy_bytes(a)
            parts += [struct.pack("<Q", len(raw)), raw, struct.pack("<Q", len(body)), body]
        self.out.write(b"".join(parts))
        self.out.flush()

    def close(self):
        try:
            self.out.close()
        except Exception:
            pass


class Limited:
    """At most `left` bytes of a stream (Rust's `Read::take`), with bytes put back in front."""

    def __init__(self, stream, left):
        self.stream = stream
        self.left = left
        self.front = b""

    def unread(self, data):
        self.front = data + self.front
        self.left += len(data)

    def read(self, k=-1):
        if k is None or k < 0 or k > self.left:
            k = self.left
        data, self.front = self.front[:k], self.front[k:]
        if len(data) < k:
            data += self.stream.read(k - len(data)) or b""
        self.left -= len(data)
        return data


def read_exact(stream, n):
    data = stream.read(n)
    if data is None or len(data) != n:
        # wire.rs: the context over `read_exact`'s own words.
        raise WorkerError("a frame ends early: failed to fill whole buffer")
    return data


def read_u64(stream):
    return struct.unpack("<Q", read_exact(stream, 8))[0]


def read_request(stream):
    """The next sample ((name, array) pairs), or None at the end of the input (between
    frames)."""
    kind = stream.read(1)
    if not kind:
        return None
    if kind not in b"SROE":
        raise WorkerError("a frame of unknown kind %#04x" % kind[0])
    if kind != b"S":
        raise WorkerError("the audit sent a frame that is not a sample")
    count = read_u64(stream)
    if count > MAX_TENSORS:
        raise WorkerError("a frame claims %d tensors" % count)
    inputs = []
    for _ in range(count):
        n = read_u64(stream)
        if n > MAX_NAME:
            raise WorkerError("a frame claims a name of %d bytes" % n)
        try:
            name = read_exact(stream, n).decode("utf-8")
        except UnicodeDecodeError:
            raise WorkerError("a tensor name that is not UTF-8")
        n = read_u64(stream)
        if n > MAX_NPY:
            raise WorkerError("a frame claims a tensor of %d bytes" % n)
        # As wire.rs: the array read from at most `n` bytes of the stream, and what it left of
        # them counted after (a stream that ends inside those bytes is noticed by the array only).
        body = Limited(stream, n)
        head = body.read(8)
        check_npy_start(head, "tensor '%s': " % name)
        body.unread(head)
        try:
            a = read_array(body, None)
        except Exception as e:
            raise WorkerError("tensor '%s': %s" % (name, e))
        if body.left:
            raise WorkerError("tensor '%s': %d bytes after its data" % (name, body.left))
        inputs.append((name, check_array(a, "tensor '%s': " % name)))
    return inputs


def serve_samples(job, result, frames):
    try:
        load_runtime(job, result)
        result["phase"] = CREATE_SESSION
        session = create_session(job, result)
    except Exception as e:
        try:
            frames.error(error_text(e))
        except OSError:
            pass
        raise
    frames.ready(result)
    names = [o.name for o in session.get_outputs()]
    plain = plain_outputs(session)
    requests = sys.stdin.buffer
    served = 0
    while True:
        inputs = read_request(requests)
        if inputs is None:
            break
        served += 1
        inject_sample_fault(job["target_id"], served)
        result["phase"] = RUN
        start = time.perf_counter()
        try:
            outputs = run_once(session, inputs, names, plain)
        except WorkerError as e:
            frames.error(str(e))
            continue
        ms = ms_since(start)
        result["run_ms"].append(ms)
        frames.outputs(list(zip(names, outputs)), ms)
    return session


# ---------------------------------------------------------------------------------------------


def write_result(job, result):
    """`result.json` in the output directory, written beside it and renamed in place. Returns
    the exit code."""
    final_path = os.path.join(job["output_dir"], "result.json")
    tmp_path = os.path.join(job["output_dir"], "result.json.tmp")
    try:
        data = json.dumps(result, indent=2, ensure_ascii=False).encode("utf-8")
        with open(tmp_path, "wb") as f:
            f.write(data)
        os.rename(tmp_path, final_path)
        return EXIT_OK
    except OSError as e:
        log_line("npu-audit worker: cannot write %s: %s" % (final_path, io_text(e)))
        return WORKER_NO_SPACE if e.errno == errno.ENOSPC else EXIT_NO_RESULT
    except Exception as e:
        log_line("npu-audit worker: cannot write %s: %s" % (final_path, e))
        return EXIT_NO_RESULT


def main(argv):
    args = argv[1:]
    serve = "--serve" in args
    args = [a for a in args if a != "--serve"]
    if len(args) != 1:
        log_line("usage: emulated_worker.py JOB.json [--serve]")
        return EXIT_NO_RESULT
    job_path = args[0]
    try:
        job = read_job(job_path)
    except BadJob as e:
        log_line("npu-audit worker: cannot read job %s: %s" % (job_path, e))
        return EXIT_NO_RESULT
    inject_fault(job["target_id"])
    result = new_result(job)
    frames = None
    _session = None  # kept alive until the result is written
    try:
        if serve:
            try:
                frames = Frames()
            except OSError as e:
                raise WorkerError("cannot set up the worker's frames: %s" % io_text(e))
            _session = serve_samples(job, result, frames)
        else:
            _session = execute(job, result)
        result["ok"] = True
        result["phase"] = DONE
    except Exception as e:
        result["error"] = error_text(e)
    result["peak_rss_mb"] = peak_rss_mb()
    code = write_result(job, result)
    if frames is not None:
        frames.close()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    # As the Rust worker: the process ends without tearing the session down.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
