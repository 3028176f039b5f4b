"""gpt-oss's own MXFP4 layout, written by the official `safetensors` package: the experts of an
fp4cl-made compressed-tensors MXFP4 W4A16 checkpoint repacked in NumPy the way transformers
defines gpt-oss's tensors (integrations/mxfp4.py, GptOssExperts): per layer
`<layer>.mlp.experts.gate_up_proj_blocks` U8 [E, 2I, H/32, 16] with gate row j at row 2j and up
row j at row 2j + 1, `gate_up_proj_scales` U8 [E, 2I, H/32] (E8M0), `down_proj_blocks`
[E, H, I/32, 16] and `down_proj_scales`, under quantization_config {"quant_method": "mxfp4"}.
The binding's MoE layer on it must give the bits of the same layer loaded from the original
checkpoint."""

import json
import os
import shutil

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

import fp4_reference as ref
from conftest import MODEL, MOE_PREFIX


def fused_experts(tensors):
    e_count, h, i = MODEL["experts"], MODEL["hidden"], MODEL["inter"]

    def packed(e, proj):
        return tensors[f"{MOE_PREFIX}.mlp.experts.{e}.{proj}.weight_packed"].view(np.uint8)

    def scales(e, proj):
        return tensors[f"{MOE_PREFIX}.mlp.experts.{e}.{proj}.weight_scale"].view(np.uint8)

    gate_up_blocks = np.empty((e_count, 2 * i, h // 2), np.uint8)
    gate_up_scales = np.empty((e_count, 2 * i, h // 32), np.uint8)
    for e in range(e_count):
        gate_up_blocks[e, 0::2], gate_up_blocks[e, 1::2] = packed(e, "gate_proj"), packed(e, "up_proj")
        gate_up_scales[e, 0::2], gate_up_scales[e, 1::2] = scales(e, "gate_proj"), scales(e, "up_proj")
    down_blocks = np.stack([packed(e, "down_proj") for e in range(e_count)])
    down_scales = np.stack([scales(e, "down_proj") for e in range(e_count)])
    p = f"{MOE_PREFIX}.mlp.experts"
    return {
        f"{p}.gate_up_proj_blocks": gate_up_blocks.reshape(e_count, 2 * i, h // 32, 16),
        f"{p}.gate_up_proj_scales": gate_up_scales,
        f"{p}.down_proj_blocks": down_blocks.reshape(e_count, h, i // 32, 16),
        f"{p}.down_proj_scales": down_scales,
    }


def test_gpt_oss_layout_gives_the_bits_of_the_compressed_tensors_layout(context, checkpoints, tmp_path):
    source = checkpoints.get("mxfp4a16", "compressed-tensors")
    target = tmp_path / "gpt-oss"
    target.mkdir()
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    assert config["quantization_config"]["format"] == "mxfp4-pack-quantized"
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.gate", "model.embed_tokens",
                                   "lm_head"]}
    with open(target / "config.json", "w") as f:
        json.dump(config, f)
    tensors = fused_experts(ref.read_tensors(source))
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(target / "model.safetensors"),
              metadata={"format": "pt"})

    rng = np.random.default_rng(61)
    x = (rng.standard_normal((5, MODEL["hidden"])) * 1.5).astype(ml_dtypes.bfloat16)
    ids = np.stack([rng.choice(MODEL["experts"], MODEL["topk"], replace=False) for _ in range(5)]).astype(np.int32)
    weights = rng.uniform(0.1, 1, ids.shape).astype(np.float32)
    outputs = []
    for directory in (source, target):
        with context.open(str(directory)) as model:
            with model.moe(MOE_PREFIX, output="fp32") as moe:
                outputs.append(moe.run(x, ids, weights))
    assert np.count_nonzero(outputs[0]) > 0.9 * outputs[0].size
    assert np.array_equal(outputs[0].view(np.uint32), outputs[1].view(np.uint32))


def limited_copy(source, tmp_path, limit):
    """A copy of checkpoint `source` whose config.json states swiglu_limit = `limit` (gpt-oss's
    clamped SwiGLU)."""
    target = tmp_path / "limited"
    shutil.copytree(source, target)
    with open(target / "config.json") as f:
        config = json.load(f)
    config["swiglu_limit"] = limit
    with open(target / "config.json", "w") as f:
        json.dump(config, f)
    return target


def test_moe_reports_the_activation_config_json_chose(context, checkpoints, tmp_path):
    source = checkpoints.get("mxfp4a16", "compressed-tensors")
    with context.open(str(source)) as model:
        with model.moe(MOE_PREFIX) as moe:
            assert (moe.activation, moe.swiglu_alpha, moe.swiglu_limit) == ("swiglu", None, None)
    target = limited_copy(source, tmp_path, 2.5)
    with context.open(str(target)) as model:
        with model.moe(MOE_PREFIX) as moe:
            assert moe.activation == "swiglu_clamped"
            assert moe.swiglu_limit == 2.5 and abs(moe.swiglu_alpha - 1.702) < 1e-6


def test_moe_takes_the_activation_the_caller_chooses(context, checkpoints, tmp_path):
    """Model.moe(activation=...) replaces config.json's: the clamped form chosen on a plain-SwiGLU
    checkpoint gives the bits of the same checkpoint whose config.json states that limit, and
    "swiglu" chosen there gives the plain checkpoint's bits. Bad arguments are refused by name."""
    import fp4cl
    import pytest

    source = checkpoints.get("mxfp4a16", "compressed-tensors")
    target = limited_copy(source, tmp_path, 2.5)
    rng = np.random.default_rng(41)
    x = rng.standard_normal((5, MODEL["hidden"]), dtype=np.float32).astype(ml_dtypes.bfloat16)
    ids = rng.integers(0, 4, size=(5, 2), dtype=np.int32)
    ids[:, 1] = (ids[:, 0] + 1) % 4
    weights = rng.random((5, 2), dtype=np.float32)

    def run(directory, by_index=False, **kwargs):
        with context.open(str(directory)) as model:
            layer = model.layer(MOE_PREFIX).index if by_index else MOE_PREFIX
            with model.moe(layer, output="fp32", **kwargs) as moe:
                return moe.run(x, ids, weights), (moe.activation, moe.swiglu_alpha, moe.swiglu_limit)

    plain, plain_act = run(source)
    limited, _ = run(target)
    assert not np.array_equal(plain, limited)
    chosen, act = run(source, activation="swiglu_clamped", swiglu_limit=2.5)
    assert act[0] == "swiglu_clamped" and act[2] == 2.5 and abs(act[1] - 1.702) < 1e-6
    assert np.array_equal(chosen, limited)
    by_index, _ = run(source, by_index=True, activation="swiglu_clamped", swiglu_limit=2.5)
    assert np.array_equal(by_index, limited)
    unclamped, act = run(target, activation="swiglu")
    assert act == plain_act == ("swiglu", None, None)
    assert np.array_equal(unclamped, plain)

    with context.open(str(source)) as model:
        for kwargs, fragment in [({"activation": "gelu"}, "activation 'gelu'"),
                                 ({"swiglu_limit": 3.0}, "need activation"),
                                 ({"activation": "swiglu", "swiglu_alpha": 1.0}, "takes no swiglu_alpha"),
                                 ({"activation": "swiglu_clamped", "swiglu_limit": -1.0},
                                  "swiglu_limit -1.0; expected a finite number above 0"),
                                 ({"activation": "swiglu_clamped", "swiglu_alpha": float("nan")}, "swiglu_alpha nan"),
                                 ({"activation": "swiglu_clamped", "swiglu_alpha": "x"}, "swiglu_alpha 'x'")]:
            with pytest.raises(fp4cl.InvalidArgumentError) as e:
                model.moe(MOE_PREFIX, **kwargs)
            assert fragment in str(e.value), (kwargs, str(e.value))
