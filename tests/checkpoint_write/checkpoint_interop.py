#!/usr/bin/env python3
"""Checkpoints written by `fp4cl make-model` / `fp4cl quantize`, read with independent tools.

Usage: checkpoint_interop.py <path to the fp4cl executable>

1. The synthetic model's generator, re-implemented here from its documented recipe (SplitMix64,
   xoshiro256**, FNV-1a, the polar method with the portable logarithm), reproduces the BF16
   tensors bit for bit: the seed names the same bytes in another language.
2. The quantized checkpoints open with the official `safetensors` package; one NVFP4 weight
   (compressed-tensors and ModelOpt layouts) and one MXFP4 weight are dequantized with numpy and
   ml_dtypes (float4_e2m1fn, float8_e4m3fn, float8_e8m0fnu) and compared with the BF16 source
   within the FP4 error bound; their block scales, codes and global scales are recomputed with
   numpy from the producers' formulas (vLLM's NVFP4 recipe, compressed-tensors'
   round_to_power_2 MXFP4 weight scales) and must match exactly.
3. config.json / hf_quant_config.json carry the producers' fields; the CLI shards, excludes
   modules and replaces an existing checkpoint only with --force.
4. ModelOpt with MXFP4 is refused with a clear message and no output.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
from safetensors import deserialize, safe_open

FP4CL = sys.argv[1]
M64 = (1 << 64) - 1
SEED = 17
SHAPE = ["--layers", "1", "--hidden", "128", "--inter", "64", "--experts", "4", "--topk", "2",
         "--heads", "2", "--kv-heads", "1", "--head-dim", "64", "--vocab", "96"]


def run(*args, expect_ok=True):
    result = subprocess.run([FP4CL, *args], capture_output=True, text=True)
    if expect_ok and result.returncode != 0:
        raise AssertionError(f"fp4cl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


# ---------------------------------------------------------------- the generator, re-implemented

def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def fnv1a64(text):
    h = 0xcbf29ce484222325
    for c in text.encode():
        h = ((h ^ c) * 0x100000001b3) & M64
    return h


def portable_log(x):
    m, e = math.frexp(x)
    if m < 0.70710678118654752440:
        m *= 2.0
        e -= 1
    t = (m - 1.0) / (m + 1.0)
    t2 = t * t
    p = 1.0 / 21.0
    for k in range(19, 0, -2):
        p = p * t2 + 1.0 / k  # Python floats are IEEE doubles and never fuse multiply-add
    ln_m = (2.0 * t) * p
    return e * 6.93147180369123816490e-01 + (ln_m + e * 1.90821492927058770002e-10)


class Random:
    def __init__(self, seed, name):
        state = seed ^ fnv1a64(name)
        self.s = []
        for _ in range(4):
            state, out = splitmix64(state)
            self.s.append(out)
        self.spare = None

    def next(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53

    def normal(self):
        if self.spare is not None:
            z, self.spare = self.spare, None
            return z
        while True:
            u = 2.0 * self.uniform() - 1.0
            v = 2.0 * self.uniform() - 1.0
            s = u * u + v * v
            if s >= 1.0 or s == 0.0:
                continue
            f = math.sqrt(-2.0 * portable_log(s) / s)
            self.spare = v * f
            return u * f


def generated(name, shape, dtype):
    """The values of one synthetic tensor (fp4cl/model_writer.hpp's recipe): doubles rounded to
    float32, then (BF16 models) to BF16."""
    r = Random(SEED, name)
    if len(shape) == 1:
        values = [1.0 + 0.1 * r.normal() for _ in range(shape[0])]
    else:
        rows, cols = shape
        sigma = 1.0 / math.sqrt(cols)
        if not name.endswith("_proj.weight"):
            values = [sigma * r.normal() for _ in range(rows * cols)]
        else:
            values = []
            for _ in range(rows):
                a, b = r.uniform(), r.uniform()
                row_sigma = sigma * math.ldexp(1.0 + a, -int(4.0 * b))
                values.extend(row_sigma * r.normal() for _ in range(cols))
            for _ in range(max(1, rows * cols // 1024)):
                index = r.next() % (rows * cols)
                values[index] *= 8.0 + 24.0 * r.uniform()
    return np.array(values, dtype=np.float64).astype(np.float32).astype(dtype).reshape(shape)


# ---------------------------------------------------------------- FP4 checks

def unpack_codes(packed):
    """uint8 [N, K/2] → E2M1 values [N, K]: element 2i in the low nibble, 2i+1 in the high."""
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    return codes, codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)


def check_bound(what, source, dequantized, scale, zero_limit):
    """|x - w| <= s·h(|x|/s) + 2^-20·|x|, h = 0.25 / 0.5 / 1 below 2 / below 4 / above (see the C++
    tests' fp4_error_bound); a zero scale allows |x| <= zero_limit."""
    x = source.astype(np.float64)
    s = np.repeat(scale.astype(np.float64), source.shape[1] // scale.shape[1], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(s > 0, np.abs(x) / s, 0.0)
    h = np.where(t < 2, 0.25, np.where(t < 4, 0.5, 1.0))
    bound = np.where(s > 0, s * h + np.abs(x) * 2.0 ** -20, zero_limit)
    err = np.abs(x - dequantized.astype(np.float64))
    bad = np.argwhere(err > bound)
    assert bad.size == 0, f"{what}: {len(bad)} elements beyond the FP4 bound, first {bad[0]}: " \
                          f"source {x[tuple(bad[0])]}, dequantized {dequantized[tuple(bad[0])]}"
    assert np.max(err) > 0, f"{what}: dequantized equals the source exactly: suspicious"


def blocks(x, size):
    return x.astype(np.float32).reshape(x.shape[0], -1, size)


def check_nvfp4(what, source, packed, scales, gs_quant, gs_dequant):
    """NVFP4 (FP4.md §3): scale bytes and codes from vLLM's recipe, then the dequantized bound."""
    assert packed.dtype == np.uint8 and packed.shape == (source.shape[0], source.shape[1] // 2), what
    assert scales.dtype == ml_dtypes.float8_e4m3fn and scales.shape == (source.shape[0], source.shape[1] // 16), what
    amax_b = np.max(np.abs(blocks(source, 16)), axis=-1)
    expected_scales = (np.float32(gs_quant) * (amax_b * np.float32(1.0 / 6.0))).astype(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(expected_scales.view(np.uint8), scales.view(np.uint8)), f"{what}: block scales"
    sf = scales.astype(np.float32)
    with np.errstate(divide="ignore"):
        mult = np.where(sf == 0, np.float32(0), np.float32(1) / (sf * (np.float32(1) / np.float32(gs_quant))))
    scaled = blocks(source, 16) * mult[..., None].astype(np.float32)
    expected_codes = scaled.reshape(source.shape).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    codes, values = unpack_codes(packed)
    # The sign of a zero code follows the input's sign (x·0 keeps it for finite x).
    assert np.array_equal(expected_codes, codes), f"{what}: E2M1 codes"
    dequantized = values * np.repeat(sf, 16, axis=1) * np.float32(gs_dequant)
    check_bound(what, source.astype(np.float32), dequantized, sf * np.float32(gs_dequant),
                6.0 * 2.0 ** -10 * gs_dequant)


def ct_mxfp4_scale(amax_bf16):
    """compressed-tensors' generate_mxfp4_scales on BF16 block maxima: round_to_power_2 (add half an
    FP4 mantissa step to the BF16 bits, keep sign and exponent), E = 127 + floor(log2) - 2, >= 0."""
    bits = amax_bf16.view(np.uint16).astype(np.int32)
    power = ((bits + (1 << (7 - 1 - 1))) & (((1 << 9) - 1) << 7)).astype(np.uint16).view(ml_dtypes.bfloat16)
    with np.errstate(divide="ignore"):
        e = 127 + np.floor(np.log2(power.astype(np.float32))) - 2
    return np.clip(e, 0, 255).astype(np.uint8)


def check_mxfp4(what, source, packed, scales):
    assert packed.dtype == np.uint8 and packed.shape == (source.shape[0], source.shape[1] // 2), what
    assert scales.dtype == np.uint8 and scales.shape == (source.shape[0], source.shape[1] // 32), what
    amax_b = np.max(np.abs(source.reshape(source.shape[0], -1, 32)), axis=-1)  # BF16, exact
    assert np.array_equal(ct_mxfp4_scale(amax_b), scales), f"{what}: E8M0 scales differ from compressed-tensors'"
    s = scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    scaled = blocks(source, 32) / s[..., None]  # exact: a power of two
    expected_codes = scaled.reshape(source.shape).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    codes, values = unpack_codes(packed)
    assert np.array_equal(expected_codes, codes), f"{what}: E2M1 codes"
    check_bound(what, source.astype(np.float32), values * np.repeat(s, 32, axis=1), s, 0.0)


# safetensors 0.8 maps no F8 dtype to numpy: its parser gives the raw bytes, viewed here.
DTYPES = {"U8": np.uint8, "F32": np.float32, "BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn}


def tensors(directory):
    path = os.path.join(directory, "model.safetensors")
    with open(path, "rb") as f:
        parsed = deserialize(f.read())
    arrays = {name: np.frombuffer(bytes(info["data"]), dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
              for name, info in parsed}
    with safe_open(path, framework="numpy") as f:
        assert sorted(f.keys()) == sorted(arrays)
        return arrays, f.metadata()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        run("make-model", src, "--seed", str(SEED), *SHAPE)
        source, metadata = tensors(src)
        assert metadata == {"format": "pt"}, metadata

        # 1. The generator, bit for bit, in BF16 and F32.
        for name in ["model.norm.weight", "model.layers.0.mlp.gate.weight",
                     "model.layers.0.self_attn.k_proj.weight", "model.layers.0.mlp.experts.1.down_proj.weight"]:
            want = generated(name, list(source[name].shape), ml_dtypes.bfloat16)
            assert source[name].dtype == ml_dtypes.bfloat16, name
            assert np.array_equal(want.view(np.uint16), source[name].view(np.uint16)), f"{name}: generator differs"
        src32 = os.path.join(tmp, "src32")
        run("make-model", src32, "--seed", str(SEED), "--dtype", "f32", *SHAPE)
        source32, _ = tensors(src32)
        for name in ["model.layers.0.input_layernorm.weight", "model.layers.0.mlp.experts.3.up_proj.weight"]:
            want = generated(name, list(source32[name].shape), np.float32)
            assert np.array_equal(want.view(np.uint32), source32[name].view(np.uint32)), f"{name}: F32 generator differs"
        config = json.load(open(os.path.join(src, "config.json")))
        assert config["model_type"] == "qwen3_moe" and config["num_experts"] == 4 and config["hidden_size"] == 128

        weight = "model.layers.0.mlp.experts.2.gate_proj"
        x = source[weight + ".weight"]
        amax = np.float32(np.max(np.abs(x.astype(np.float32))))
        kept = ["lm_head", "model.layers.0.mlp.gate"]

        # 2a. NVFP4, compressed-tensors.
        out = os.path.join(tmp, "ct-nvfp4")
        run("quantize", src, out, "--scheme", "nvfp4", "--layout", "compressed-tensors")
        q, _ = tensors(out)
        gs = q[weight + ".weight_global_scale"]
        assert gs.dtype == np.float32 and gs.shape == (1,), gs
        assert gs[0] == np.float32(2688.0) / amax, "weight_global_scale must be 448·6/amax (quant direction)"
        check_nvfp4("ct nvfp4 " + weight, x, q[weight + ".weight_packed"], q[weight + ".weight_scale"],
                    gs[0], np.float32(1) / gs[0])
        assert q[weight + ".input_global_scale"].shape == (1,)
        assert weight + ".weight" not in q
        for name in ["model.norm.weight", "model.layers.0.mlp.gate.weight", "lm_head.weight"]:
            assert np.array_equal(q[name].view(np.uint16), source[name].view(np.uint16)), name
        qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
        assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "nvfp4-pack-quantized", qc
        assert qc["quantization_status"] == "compressed" and isinstance(qc["version"], str), qc
        assert qc["ignore"] == kept, qc["ignore"]
        group = qc["config_groups"]["group_0"]
        assert group["targets"] == ["Linear"], group
        w = group["weights"]
        assert (w["num_bits"], w["type"], w["strategy"], w["group_size"], w["symmetric"], w["dynamic"]) == \
            (4, "float", "tensor_group", 16, True, False), w
        a = group["input_activations"]
        assert (a["num_bits"], a["strategy"], a["group_size"], a["dynamic"]) == (4, "tensor_group", 16, "local"), a
        assert not os.path.exists(os.path.join(out, "hf_quant_config.json"))

        # 2b. NVFP4, ModelOpt, with a fixed activation amax.
        out = os.path.join(tmp, "modelopt-nvfp4")
        run("quantize", src, out, "--scheme", "nvfp4", "--layout", "modelopt", "--input-amax", "4")
        q, _ = tensors(out)
        ws2, inp = q[weight + ".weight_scale_2"], q[weight + ".input_scale"]
        assert ws2.dtype == np.float32 and ws2.shape == () and inp.shape == (), (ws2, inp)
        assert abs(float(ws2) / (float(amax) / 2688.0) - 1) < 1e-6, "weight_scale_2 must be amax/(448·6)"
        assert inp == np.float32(4.0) / np.float32(2688.0), "input_scale must be amax/(448·6) (dequant)"
        check_nvfp4("modelopt nvfp4 " + weight, x, q[weight + ".weight"], q[weight + ".weight_scale"],
                    np.float32(2688.0) / amax, ws2)
        hf = json.load(open(os.path.join(out, "hf_quant_config.json")))
        assert hf["producer"]["name"] == "modelopt", hf
        assert hf["quantization"]["quant_algo"] == "NVFP4" and hf["quantization"]["group_size"] == 16, hf
        assert hf["quantization"]["exclude_modules"] == sorted(kept), hf
        qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
        assert qc["quant_method"] == "modelopt" and qc["quant_algo"] == "NVFP4" and qc["ignore"] == sorted(kept), qc

        # 2c. MXFP4 (W4A16), compressed-tensors.
        out = os.path.join(tmp, "ct-mxfp4a16")
        run("quantize", src, out, "--scheme", "mxfp4a16", "--layout", "compressed-tensors")
        q, _ = tensors(out)
        for name in [weight, "model.layers.0.mlp.experts.3.down_proj", "model.layers.0.self_attn.o_proj"]:
            check_mxfp4("ct mxfp4 " + name, source[name + ".weight"], q[name + ".weight_packed"],
                        q[name + ".weight_scale"])
            assert name + ".weight_global_scale" not in q and name + ".input_global_scale" not in q
        qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
        assert qc["format"] == "mxfp4-pack-quantized", qc
        w = qc["config_groups"]["group_0"]["weights"]
        assert (w["strategy"], w["group_size"], w["scale_dtype"]) == ("group", 32, "torch.uint8"), w
        assert qc["config_groups"]["group_0"]["input_activations"] is None, qc

        # 3b. CLI options: shards, excluded modules, replacing an existing checkpoint.
        out = os.path.join(tmp, "sharded")
        args = ["quantize", src, out, "--scheme", "nvfp4a16", "--layout", "compressed-tensors",
                "--max-shard-size", "20kB", "--exclude", "*self_attn*"]
        run(*args)
        index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
        shards = sorted(set(index["weight_map"].values()))
        assert len(shards) > 2, shards
        names = set()
        for shard in shards:
            path = os.path.join(out, shard)
            with open(path, "rb") as f:
                data_bytes = os.path.getsize(path) - 8 - int.from_bytes(f.read(8), "little")
            with safe_open(path, framework="numpy") as f:
                keys = set(f.keys())
            # At most 20 kB of tensor data, unless one larger tensor has the shard to itself.
            assert data_bytes <= 20000 or len(keys) == 1, (shard, data_bytes, keys)
            names |= keys
        assert names == set(index["weight_map"]), "shards and weight_map disagree"
        assert "model.layers.0.self_attn.q_proj.weight" in names and weight + ".weight_packed" in names
        assert not any(n.startswith("model.layers.0.self_attn.q_proj.weight_") for n in names)
        qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
        assert "model.layers.0.self_attn.o_proj" in qc["ignore"], qc["ignore"]
        result = run(*args, expect_ok=False)
        assert result.returncode == 1 and "not empty" in result.stderr, result.stderr
        run(*args, "--force")

        # 4. ModelOpt has no MXFP4 layout.
        out = os.path.join(tmp, "modelopt-mxfp4")
        result = run("quantize", src, out, "--scheme", "mxfp4", "--layout", "modelopt", expect_ok=False)
        assert result.returncode == 1, result
        assert "MXFP4" in result.stderr and "compressed-tensors" in result.stderr, result.stderr
        assert not os.path.exists(out)
        assert not [n for n in os.listdir(tmp) if n.startswith(".")], os.listdir(tmp)
    print("checkpoint interop: OK")


if __name__ == "__main__":
    main()
