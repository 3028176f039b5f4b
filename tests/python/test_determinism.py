"""Same inputs → bit-identical outputs (repeated calls, new layer objects, every accepted input
dtype of the same BF16 values), and the binding gives the same bits as the C++ API that the
`fp4cl run` tool drives (whose --check compares with the library's scalar reference)."""

import os

import ml_dtypes
import numpy as np
import pytest
from safetensors import deserialize
from safetensors.numpy import save_file

from conftest import LINEAR, MODEL, MOE_PREFIX, run_cli


def bits(a):
    return np.asarray(a).view(np.uint16 if a.dtype == ml_dtypes.bfloat16 else np.uint32)


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4a16"])
def test_repeated_runs_are_bit_identical(fp4cl, context, checkpoints, scheme):
    path = checkpoints.get(scheme, "compressed-tensors")
    rng = np.random.default_rng(21)
    x = rng.standard_normal((6, MODEL["hidden"])).astype(np.float32)
    x_bf16 = x.astype(ml_dtypes.bfloat16)  # ml_dtypes rounds to nearest even, as the binding does
    ids = rng.integers(0, MODEL["experts"], (6, MODEL["topk"])).astype(np.int32)
    w = rng.uniform(0, 1, ids.shape).astype(np.float32)
    with context.open(path) as model:
        with model.linear(LINEAR) as a, model.linear(LINEAR) as b:
            first = a.run(x_bf16)
            for y in (a.run(x_bf16), b.run(x_bf16), a.run(x_bf16.view(np.uint16)), a.run(x)):
                assert np.array_equal(bits(y), bits(first))
        with model.moe(MOE_PREFIX) as a, model.moe(MOE_PREFIX) as b:
            first = a.run(x_bf16, ids, w)
            for y in (a.run(x_bf16, ids, w), b.run(x_bf16, ids, w), a.run(x, ids.astype(np.int64), w)):
                assert np.array_equal(bits(y), bits(first))


def test_float32_input_rounds_to_nearest_even(fp4cl):
    from fp4cl.arrays import float32_to_bf16_bits
    v = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-20), 3.0e38, np.inf, -0.0, 1e-45], np.float32)
    assert np.array_equal(float32_to_bf16_bits(v), v.astype(ml_dtypes.bfloat16).view(np.uint16))
    nan = float32_to_bf16_bits(np.array([np.nan, -np.nan], np.float32)).view(ml_dtypes.bfloat16)
    assert np.isnan(nan.astype(np.float32)).all()


def read_y(path):
    with open(path, "rb") as f:
        tensors = dict(deserialize(f.read()))
    y = tensors["y"]
    dtype = ml_dtypes.bfloat16 if y["dtype"] == "BF16" else np.float32
    return np.frombuffer(bytes(y["data"]), dtype=dtype).reshape(y["shape"])


@pytest.mark.parametrize("scheme,layout", [("nvfp4", "modelopt"), ("mxfp4", "compressed-tensors")])
def test_same_bits_as_the_cli_checked_against_the_scalar_reference(fp4cl, context, checkpoints, tmp_path, scheme,
                                                                   layout):
    path = checkpoints.get(scheme, layout)
    rng = np.random.default_rng(22)
    x = rng.standard_normal((5, MODEL["hidden"])).astype(ml_dtypes.bfloat16)
    ids = rng.integers(0, MODEL["experts"], (5, MODEL["topk"])).astype(np.int32)
    w = rng.uniform(0, 1, ids.shape).astype(np.float32)
    save_file({"x": x}, str(tmp_path / "linear_in.safetensors"))
    save_file({"x": x, "topk_ids": ids, "topk_weights": w}, str(tmp_path / "moe_in.safetensors"))
    run_cli("run", path, "--layer", LINEAR, "--input", tmp_path / "linear_in.safetensors", "--output",
            tmp_path / "linear_out.safetensors", "--check")
    run_cli("run", path, "--layer", MOE_PREFIX, "--input", tmp_path / "moe_in.safetensors", "--output",
            tmp_path / "moe_out.safetensors", "--check")
    with context.open(path) as model:
        with model.linear(LINEAR) as layer:
            assert np.array_equal(bits(layer.run(x)), bits(read_y(tmp_path / "linear_out.safetensors")))
        with model.moe(MOE_PREFIX) as moe:
            assert np.array_equal(bits(moe.run(x, ids, w)), bits(read_y(tmp_path / "moe_out.safetensors")))
    assert os.path.getsize(tmp_path / "moe_out.safetensors") > 0
