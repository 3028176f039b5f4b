"""The NumPy reference against the library as the `fp4cl run` tool drives it (the C++ API), with
no Python binding in between: every scheme and layout, linear and MoE (top-k and router logits).
Keeps the reference honest on its own, and the library checked from Python even without the
shared library."""

import ml_dtypes
import numpy as np
import pytest
from safetensors import deserialize
from safetensors.numpy import save_file

import fp4_reference as ref
from conftest import LINEAR, MODEL, MOE_PREFIX, run_cli


def run_layer(path, layer, tensors, tmp_path, dtype, *flags):
    src, dst = tmp_path / f"{layer}-in.safetensors", tmp_path / f"{layer}-out.safetensors"
    save_file(tensors, str(src))
    run_cli("run", path, "--layer", layer, "--input", src, "--output", dst, "--output-dtype", dtype, *flags)
    with open(dst, "rb") as f:
        y = dict(deserialize(f.read()))["y"]
    return np.frombuffer(bytes(y["data"]), ml_dtypes.bfloat16 if dtype == "bf16" else np.float32).reshape(y["shape"])


def assert_accepted(result, y, what):
    ok = result.accepts(y)
    assert ok.all(), f"{what}: {int((~ok).sum())} of {ok.size} outside the bound ({result.stats})"
    assert np.count_nonzero(y) > 0.9 * y.size


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_cli_linear_within_reference_bound(checkpoint, tmp_path, dtype):
    scheme, layout, path = checkpoint
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((6, MODEL["hidden"])) * 2).astype(ml_dtypes.bfloat16)
    y = run_layer(path, LINEAR, {"x": x}, tmp_path, dtype)
    assert_accepted(ref.linear(ref.Checkpoint(path).weight(LINEAR), x.view(np.uint16)), y, f"{scheme} {layout}")


def test_cli_moe_within_reference_bound(checkpoint, tmp_path):
    scheme, layout, path = checkpoint
    rng = np.random.default_rng(32)
    x = (rng.standard_normal((7, MODEL["hidden"])) * 1.5).astype(ml_dtypes.bfloat16)
    ids = rng.integers(0, MODEL["experts"], (7, MODEL["topk"])).astype(np.int32)
    w = rng.uniform(0.1, 1, ids.shape).astype(np.float32)
    logits = rng.standard_normal((7, MODEL["experts"])).astype(np.float32)
    reference = ref.Moe(ref.Checkpoint(path), MOE_PREFIX)
    y = run_layer(path, MOE_PREFIX, {"x": x, "topk_ids": ids, "topk_weights": w}, tmp_path, "f32")
    assert_accepted(reference.run(x.view(np.uint16), ids, w), y, f"{scheme} {layout} top-k")
    y = run_layer(path, MOE_PREFIX, {"x": x, "router_logits": logits}, tmp_path, "bf16", "--renormalize")
    result, _ = reference.run_logits(x.view(np.uint16), logits, MODEL["topk"], True)
    assert_accepted(result, y, f"{scheme} {layout} logits")
