"""A checkpoint written by the official `safetensors` package, not by fp4cl's writer: the tensors
of an fp4cl-made compressed-tensors NVFP4 (W4A4) checkpoint, edited in NumPy into the cases real
exports contain and a loader gets wrong most easily (FP4.md §1, §3):
  - gate and up of every expert with different weight global scales (and different activation
    global scales: the FC1 input takes the wider);
  - negative-zero codes (0x8) and all-zero block scales in the weights;
  - a linear module whose global scales are not powers of two.
The binding must agree with the NumPy reference (which reads the same file) for linear and MoE."""

import json
import os
import shutil

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

import fp4_reference as ref
from conftest import LINEAR, MODEL, MOE_PREFIX


def edit(tensors, rng):
    out = dict(tensors)
    for e in range(MODEL["experts"]):
        p = f"{MOE_PREFIX}.mlp.experts.{e}"
        # quant-direction scales (compressed-tensors): up gets a larger one than gate
        out[f"{p}.up_proj.weight_global_scale"] = (tensors[f"{p}.gate_proj.weight_global_scale"] * np.float32(
            2.75 + e)).astype(np.float32)
        out[f"{p}.up_proj.input_global_scale"] = (tensors[f"{p}.gate_proj.input_global_scale"] * np.float32(
            0.37 + 0.5 * e)).astype(np.float32)
    for module in [LINEAR] + [f"{MOE_PREFIX}.mlp.experts.{e}.{proj}" for e in range(MODEL["experts"])
                              for proj in ("gate_proj", "up_proj", "down_proj")]:
        packed = tensors[f"{module}.weight_packed"].copy()
        codes = ref.unpack_fp4(packed, packed.shape[1] * 2)
        zero = codes % 8 == 0
        codes[zero & (rng.uniform(size=codes.shape) < 0.5)] = 0x8  # negative zeros
        out[f"{module}.weight_packed"] = ref.pack_fp4(codes)
        scale = tensors[f"{module}.weight_scale"].view(np.uint8).copy()
        scale[rng.integers(0, scale.shape[0], 3), rng.integers(0, scale.shape[1], 3)] = 0  # zero block scales
        out[f"{module}.weight_scale"] = scale.view(ml_dtypes.float8_e4m3fn)
    out[f"{LINEAR}.weight_global_scale"] = np.array([1234.5677], np.float32)
    out[f"{LINEAR}.input_global_scale"] = np.array([777.77], np.float32)
    return out


def test_checkpoint_written_by_the_safetensors_package(fp4cl, context, checkpoints, tmp_path):
    source = checkpoints.get("nvfp4", "compressed-tensors")
    target = tmp_path / "handwritten"
    target.mkdir()
    shutil.copy(os.path.join(source, "config.json"), target / "config.json")
    assert not os.path.exists(os.path.join(source, "model.safetensors.index.json"))
    tensors = edit(ref.read_tensors(source), np.random.default_rng(51))
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(target / "model.safetensors"),
              metadata={"format": "pt"})
    with open(target / "config.json") as f:
        assert json.load(f)["quantization_config"]["format"] == "nvfp4-pack-quantized"

    reference = ref.Checkpoint(str(target))
    w = reference.weight(LINEAR)
    assert (w.codes == 0x8).any() and (w.block_scale == 0).any()
    experts = reference.experts(MOE_PREFIX)
    assert all(g.gs_d != u.gs_d for g, u, _ in experts)

    rng = np.random.default_rng(52)
    x = (rng.standard_normal((6, MODEL["hidden"])) * 1.5).astype(ml_dtypes.bfloat16)
    ids = rng.integers(0, MODEL["experts"], (6, MODEL["topk"])).astype(np.int32)
    weights = rng.uniform(0.1, 1, ids.shape).astype(np.float32)
    with context.open(target) as model:
        with model.linear(LINEAR, output="fp32") as layer:
            y = layer.run(x)
        result = ref.linear(w, x.view(np.uint16))
        assert result.accepts(y).all(), np.max(np.abs(y - result.value) - result.bound)
        assert np.count_nonzero(y) > 0.9 * y.size
        with model.moe(MOE_PREFIX, output="fp32") as moe:
            y = moe.run(x, ids, weights)
        result = ref.Moe(reference, MOE_PREFIX).run(x.view(np.uint16), ids, weights)
        assert result.accepts(y).all(), (np.max(np.abs(y - result.value) - result.bound), result.stats)
        assert np.count_nonzero(y) > 0.9 * y.size
