"""Makes the models and inputs of the worker conformance corpus (tests/it/worker_protocol.rs).

Run once with NumPy and onnx (tests/data/numpy-onnx-requirements.txt); its outputs are committed,
so the test never runs it:

    python3 tests/data/worker_conformance/make_corpus.py

Every model is tiny and built from onnx.helper; every input is drawn from a fixed seed. The job
templates (jobs/*.json) and the cases (cases.json) are written by hand.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
INPUTS = os.path.join(HERE, "inputs")
F = TensorProto.FLOAT


def save(graph, name):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_corpus")
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(MODELS, name))


def const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def affine():
    """y = x * 2 + 1 over a float32 [1, 4]."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["t"], name="mul"), helper.make_node("Add", ["t", "one"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes,
        "affine",
        [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4])],
        [const("two", np.float32(2)), const("one", np.float32(1))],
    )
    save(graph, "affine.onnx")


def multi():
    """Eight outputs of eight element types from a float32 [2, 3]; `scaled` is also consumed
    inside the graph (an intermediate tensor exposed as an output, as the per-layer audit taps)."""
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["scaled"], name="scale"),
        helper.make_node("ArgMax", ["scaled"], ["argmax"], axis=1, keepdims=0, name="argmax"),
        helper.make_node("QuantizeLinear", ["scaled", "qs", "qz_u8"], ["codes"], name="q_u8"),
        helper.make_node("QuantizeLinear", ["scaled", "qs", "qz_i8"], ["codes_i8"], name="q_i8"),
        helper.make_node("Greater", ["scaled", "zero"], ["positive"], name="greater"),
        helper.make_node("Cast", ["scaled"], ["half"], to=TensorProto.FLOAT16, name="to_half"),
        helper.make_node("Cast", ["scaled"], ["wide"], to=TensorProto.DOUBLE, name="to_double"),
        helper.make_node("Cast", ["argmax"], ["index32"], to=TensorProto.INT32, name="to_i32"),
    ]
    outputs = [
        ("scaled", F, [2, 3]),
        ("argmax", TensorProto.INT64, [2]),
        ("codes", TensorProto.UINT8, [2, 3]),
        ("codes_i8", TensorProto.INT8, [2, 3]),
        ("positive", TensorProto.BOOL, [2, 3]),
        ("half", TensorProto.FLOAT16, [2, 3]),
        ("wide", TensorProto.DOUBLE, [2, 3]),
        ("index32", TensorProto.INT32, [2]),
    ]
    graph = helper.make_graph(
        nodes,
        "multi",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [
            const("k", np.float32(1.5)),
            const("qs", np.float32(0.05)),
            const("qz_u8", np.uint8(128)),
            const("qz_i8", np.int8(0)),
            const("zero", np.float32(0)),
        ],
    )
    save(graph, "multi.onnx")


def dynamic():
    """y = Relu(x) over a float32 [batch, 3], `batch` a symbolic dimension (free_dims pins it)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "dynamic",
        [helper.make_tensor_value_info("x", F, ["batch", 3])],
        [helper.make_tensor_value_info("y", F, ["batch", 3])],
    )
    save(graph, "dynamic.onnx")


def stream():
    """A recurrent step: y = x + state, next_state = y * 0.5 (fed back as `state`)."""
    nodes = [
        helper.make_node("Add", ["x", "state"], ["y"], name="add"),
        helper.make_node("Mul", ["y", "half"], ["next_state"], name="decay"),
    ]
    graph = helper.make_graph(
        nodes,
        "stream",
        [helper.make_tensor_value_info("x", F, [1, 2]), helper.make_tensor_value_info("state", F, [1, 2])],
        [helper.make_tensor_value_info("y", F, [1, 2]), helper.make_tensor_value_info("next_state", F, [1, 2])],
        [const("half", np.float32(0.5))],
    )
    save(graph, "stream.onnx")


def unsupported_type():
    """An output of an element type the audit does not read (bfloat16) beside a plain one."""
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16, name="to_bf16"),
    ]
    graph = helper.make_graph(
        nodes,
        "bfloat16",
        [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4]), helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [1, 4])],
    )
    save(graph, "bfloat16_output.onnx")


def sequence():
    """An output that is a sequence of tensors, not a tensor."""
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["seq"], name="seq")],
        "sequence",
        [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_sequence_value_info("seq", F, [1, 4])],
    )
    save(graph, "sequence_output.onnx")


def inputs():
    rng = np.random.default_rng(41)
    for k in range(3):
        np.save(os.path.join(INPUTS, "affine_%d.npy" % k), rng.standard_normal((1, 4)).astype(np.float32))
    # The same kind of input stored big-endian and another in Fortran order: the workers take any
    # byte or memory order.
    np.save(os.path.join(INPUTS, "affine_big_endian.npy"), rng.standard_normal((1, 4)).astype(">f4"))
    multi = rng.standard_normal((2, 3)).astype(np.float32)
    np.save(os.path.join(INPUTS, "multi.npy"), multi)
    np.save(os.path.join(INPUTS, "multi_fortran.npy"), np.asfortranarray(rng.standard_normal((2, 3)).astype(np.float32)))
    np.save(os.path.join(INPUTS, "dynamic.npy"), rng.standard_normal((2, 3)).astype(np.float32))
    for k in range(3):
        np.save(os.path.join(INPUTS, "stream_x%d.npy" % k), rng.standard_normal((1, 2)).astype(np.float32))
    np.save(os.path.join(INPUTS, "stream_state0.npy"), np.zeros((1, 2), np.float32))
    np.save(os.path.join(INPUTS, "cnn_image.npy"), rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    # An input of the wrong element type and one of the wrong shape for affine.onnx.
    np.save(os.path.join(INPUTS, "affine_int32.npy"), np.arange(4, dtype=np.int32).reshape(1, 4))
    np.save(os.path.join(INPUTS, "affine_wrong_shape.npy"), np.zeros((2, 4), np.float32))
    # An element type no tensor of the audit has.
    np.save(os.path.join(INPUTS, "affine_complex.npy"), np.zeros((1, 4), np.complex64))
    # A stream's input cut inside its data (the last 6 bytes of affine_0.npy missing) and one
    # shorter than a .npy's magic and version.
    with open(os.path.join(INPUTS, "affine_0.npy"), "rb") as f:
        whole = f.read()
    with open(os.path.join(INPUTS, "affine_cut_short.npy"), "wb") as f:
        f.write(whole[:-6])
    with open(os.path.join(INPUTS, "short.npy"), "wb") as f:
        f.write(b"\x93NU")
    # A delta file (a stream state the Rust worker wrote as what a step added): readable only
    # inside a running audit's work directory, so both workers refuse it here.
    with open(os.path.join(INPUTS, "affine_delta.npy"), "wb") as f:
        f.write(b'\x93NPU-AUDIT-DELTA{"base":"s0/o0.npy","axis":1,"dtype":"float32","shape":[1,4]}\n')
        f.write(np.zeros(2, np.float32).tobytes())
    # Not a .npy file at all.
    with open(os.path.join(INPUTS, "not_npy.npy"), "wb") as f:
        f.write(b"this is not an array\n")
    # Not an ONNX model.
    with open(os.path.join(MODELS, "broken.onnx"), "wb") as f:
        f.write(b"\x08\x07this is not a protobuf model")


def main():
    os.makedirs(MODELS, exist_ok=True)
    os.makedirs(INPUTS, exist_ok=True)
    affine()
    multi()
    dynamic()
    stream()
    unsupported_type()
    sequence()
    inputs()


if __name__ == "__main__":
    main()
