"""MoE layers through the binding, every scheme and layout, against the independent NumPy
reference: precomputed top-k and router logits (softmax top-k, and DeepSeek-V3's gate from
config.json and the checkpoint's correction bias), BF16 and fp32 outputs, expert parallelism, batch
invariance."""

import json
import os
import shutil
import struct

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import fp4_reference as ref
from conftest import MODEL, MOE_PREFIX

T = 9


def inputs(h, tokens=T, seed=5):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((tokens, h)) * 1.5).astype(ml_dtypes.bfloat16)
    ids = np.stack([rng.permutation(MODEL["experts"])[:MODEL["topk"]] for _ in range(tokens)]).astype(np.int32)
    ids[0] = [1, 1]  # the same expert twice: both slots count
    weights = rng.uniform(0.1, 1.0, ids.shape).astype(np.float32)
    logits = (rng.standard_normal((tokens, MODEL["experts"])) * 2).astype(np.float32)
    return x, ids, weights, logits


def check(result, y, what):
    ok = result.accepts(y)
    assert ok.all(), (f"{what}: {int((~ok).sum())} of {ok.size} outputs outside the reference's bound; first at "
                      f"{np.argwhere(~ok)[0]}: got {y[tuple(np.argwhere(~ok)[0])]}, reference "
                      f"{result.value[tuple(np.argwhere(~ok)[0])]} ± {result.bound[tuple(np.argwhere(~ok)[0])]} "
                      f"({result.stats})")
    # Non-trivial outputs, and a bound far below the outputs' size: relative to each token's
    # largest output, the median bound is under 0.2 % and nearly all are under 5 % (a block whose
    # re-quantization the reference cannot pin down widens its token's whole row).
    assert np.count_nonzero(y) > 0.9 * y.size
    rel = result.bound / np.abs(result.value).max(axis=1, keepdims=True)
    assert np.median(rel) < 2e-3 and np.mean(rel < 0.05) > 0.9, (np.median(rel), np.mean(rel < 0.05), result.stats)


@pytest.mark.parametrize("output", ["bf16", "fp32"])
def test_moe_topk_matches_reference(fp4cl, context, checkpoint, output):
    scheme, layout, path = checkpoint
    reference = ref.Moe(ref.Checkpoint(path), MOE_PREFIX)
    with context.open(path) as model:
        info = model.layer(MOE_PREFIX)
        assert (info.kind, info.scheme, info.num_experts, info.top_k) == ("moe", scheme, MODEL["experts"],
                                                                          MODEL["topk"])
        assert (info.hidden, info.intermediate) == (MODEL["hidden"], MODEL["inter"])
        with model.moe(MOE_PREFIX, output=output) as moe:
            assert (moe.num_experts, moe.top_k, moe.hidden, moe.scheme) == (4, 2, MODEL["hidden"], scheme)
            x, ids, weights, _ = inputs(moe.hidden)
            y = moe.run(x, ids, weights)
    assert y.dtype == (ml_dtypes.bfloat16 if output == "bf16" else np.float32) and y.shape == x.shape
    check(reference.run(x.view(np.uint16), ids, weights), y, f"{scheme} {layout} {output}")


def test_moe_router_logits_match_reference(fp4cl, context, checkpoint):
    scheme, layout, path = checkpoint
    reference_ckpt = ref.Checkpoint(path)
    reference = ref.Moe(reference_ckpt, MOE_PREFIX)
    with context.open(path) as model:
        for renormalize in (True, False):
            with model.moe(MOE_PREFIX, renormalize=renormalize, output="fp32") as moe:
                x, _, _, logits = inputs(moe.hidden, seed=8)
                y = moe.run_logits(x, logits)
            result, _ = reference.run_logits(x.view(np.uint16), logits, MODEL["topk"], renormalize)
            check(result, y, f"{scheme} {layout} logits renormalize={renormalize}")


def deepseek_copy(source, directory, bias):
    """A copy of checkpoint `source` whose config.json routes as DeepSeek-V3 does (sigmoid, 2 groups
    of 2 experts with 1 kept, x 2.5), its gate's e_score_correction_bias F32 [4] in a shard of its
    own that an index lists beside the original file."""
    shutil.copytree(source, directory)
    with open(os.path.join(directory, "model.safetensors"), "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        names = [n for n in json.loads(f.read(size)) if n != "__metadata__"]
    save_file({"model.layers.0.mlp.gate.e_score_correction_bias": np.asarray(bias, dtype=np.float32)},
              os.path.join(directory, "router.safetensors"))
    weight_map = {n: "model.safetensors" for n in names}
    weight_map["model.layers.0.mlp.gate.e_score_correction_bias"] = "router.safetensors"
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    config.update(model_type="deepseek_v3", scoring_func="sigmoid", topk_method="noaux_tc", n_group=2, topk_group=1,
                  routed_scaling_factor=2.5)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    return directory


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4a16"])
def test_moe_router_logits_through_deepseeks_gate_match_numpy(fp4cl, context, checkpoints, tmp_path, scheme):
    bias = [0.25, -0.125, 0.0, 0.5]
    path = deepseek_copy(checkpoints.get(scheme, "compressed-tensors"), str(tmp_path / "deepseek"), bias)
    reference = ref.Moe(ref.Checkpoint(path), MOE_PREFIX)
    with context.open(path) as model:
        with model.moe(MOE_PREFIX, output="fp32") as moe:
            assert moe.routing == {"logits": True, "scoring": "sigmoid", "groups": 2, "top_groups": 1,
                                   "correction_bias": True, "renormalize": True, "scaling_factor": 2.5}
            x, _, _, logits = inputs(moe.hidden, seed=9)
            y = moe.run_logits(x, logits)
    ids, w, rel = ref.grouped_topk(logits, MODEL["topk"], True, "sigmoid", 2, 1, bias, 2.5)
    softmax_ids, _, _ = ref.softmax_topk(logits, MODEL["topk"], True)
    assert not np.array_equal(ids, softmax_ids)  # the gate, not softmax top-k, decides the experts
    check(reference.run(x.view(np.uint16), ids, w, rel), y, f"{scheme} DeepSeek gate")


def shared_copy(source, directory):
    """A copy of checkpoint `source` with expert 1's projections again as
    "model.layers.0.mlp.shared_experts" (a shard of their own that the index lists)."""
    shutil.copytree(source, directory)
    prefix = MOE_PREFIX + ".mlp.experts.1."
    with open(os.path.join(directory, "model.safetensors"), "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data_start = 8 + size
        shared_header, blobs, offset = {}, [], 0
        for name in sorted(n for n in header if n != "__metadata__"):
            if not name.startswith(prefix):
                continue
            entry = header[name]
            begin, end = entry["data_offsets"]
            f.seek(data_start + begin)
            blob = f.read(end - begin)
            shared_header[MOE_PREFIX + ".mlp.shared_experts." + name[len(prefix):]] = {
                "dtype": entry["dtype"], "shape": entry["shape"], "data_offsets": [offset, offset + len(blob)]}
            blobs.append(blob)
            offset += len(blob)
    encoded = json.dumps(shared_header).encode()
    with open(os.path.join(directory, "shared.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))
    index = os.path.join(directory, "model.safetensors.index.json")
    weight_map = {n: "model.safetensors" for n in header if n != "__metadata__"}
    if os.path.exists(index):  # deepseek_copy's, which lists the router's shard too
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
    weight_map.update({n: "shared.safetensors" for n in shared_header})
    with open(index, "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return directory


def test_shared_expert_as_an_mlp_matches_numpy(fp4cl, context, checkpoints, tmp_path):
    # Model.mlp runs the shared expert (expert 1's projections again) as one expert, which the
    # NumPy reference's expert 1 with weight 1 computes.
    source = checkpoints.get("nvfp4", "compressed-tensors")
    directory = shared_copy(source, str(tmp_path / "shared"))
    reference = ref.Moe(ref.Checkpoint(source), MOE_PREFIX)
    with context.open(directory) as model:
        with model.mlp(MOE_PREFIX + ".mlp.shared_experts", output="fp32") as mlp:
            assert (mlp.num_experts, mlp.top_k, mlp.routing["logits"], mlp.shared_experts) == (1, 1, False, 0)
            x, _, _, _ = inputs(mlp.hidden, seed=10)
            ones = np.ones((T, 1), dtype=np.float32)
            y = mlp.run(x, np.zeros((T, 1), dtype=np.int32), ones)
    check(reference.run(x.view(np.uint16), np.ones((T, 1), dtype=np.int32), ones), y, "shared expert")


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4"])
def test_fused_shared_expert_matches_numpy(fp4cl, context, checkpoints, tmp_path, scheme):
    # Model.moe(shared_experts=True): every token's k routed experts, then the shared expert (expert
    # 1's projections again) with weight 1, which the NumPy reference computes as a (k + 1)-th slot
    # of expert 1; from top-k ids and from DeepSeek's gate.
    source = checkpoints.get(scheme, "compressed-tensors")
    bias = [0.25, -0.125, 0.0, 0.5]
    directory = shared_copy(deepseek_copy(source, str(tmp_path / "deepseek"), bias), str(tmp_path / "shared"))
    reference = ref.Moe(ref.Checkpoint(source), MOE_PREFIX)
    with context.open(directory) as model:
        with model.moe(MOE_PREFIX, output="fp32", shared_experts=True) as moe:
            assert (moe.num_experts, moe.num_local_experts, moe.top_k, moe.shared_experts) == (4, 5, 2, 1)
            x, ids, weights, logits = inputs(moe.hidden, seed=11)
            y = moe.run(x, ids, weights)
            y_logits = moe.run_logits(x, logits)
        with model.moe(MOE_PREFIX, output="fp32") as plain:
            assert plain.shared_experts == 0
    ones = np.ones((T, 1), dtype=np.float32)
    with_shared = lambda i, w: (np.concatenate([i, np.ones((T, 1), dtype=np.int32)], axis=1),
                                np.concatenate([w, ones], axis=1))
    check(reference.run(x.view(np.uint16), *with_shared(ids, weights)), y, f"{scheme} fused shared expert")
    gate_ids, gate_w, rel = ref.grouped_topk(logits, MODEL["topk"], True, "sigmoid", 2, 1, bias, 2.5)
    check(reference.run(x.view(np.uint16), *with_shared(gate_ids, gate_w), rel), y_logits,
          f"{scheme} fused shared expert, DeepSeek gate")


def test_moe_expert_map_splits_experts_over_ranks(fp4cl, context, checkpoints):
    # Two "ranks" each hold every expert but answer for half of the global ids: their outputs
    # are each rank's reference, and they sum to the whole layer within the bounds.
    path = checkpoints.get("nvfp4", "modelopt")
    reference_ckpt = ref.Checkpoint(path)
    maps = [[0, 1, -1, -1], [-1, -1, 2, 3]]
    x, ids, weights, _ = inputs(MODEL["hidden"], seed=9)
    parts, bounds = [], []
    with context.open(path) as model:
        for expert_map in maps:
            with model.moe(MOE_PREFIX, output="fp32", expert_map=expert_map) as moe:
                assert moe.num_experts == 4
                y = moe.run(x, ids, weights)
            check_map = ref.Moe(reference_ckpt, MOE_PREFIX, expert_map=expert_map)
            result = check_map.run(x.view(np.uint16), ids, weights)
            ok = result.accepts(y)
            assert ok.all(), f"expert_map {expert_map}: {int((~ok).sum())} outputs outside the bound"
            parts.append(y.astype(np.float64))
            bounds.append(result.bound)
        with model.moe(MOE_PREFIX, output="fp32") as moe:
            whole = moe.run(x, ids, weights).astype(np.float64)
    full = ref.Moe(reference_ckpt, MOE_PREFIX).run(x.view(np.uint16), ids, weights)
    assert np.all(np.abs(parts[0] + parts[1] - whole) <= bounds[0] + bounds[1] + full.bound)


def test_moe_batch_larger_than_max_tokens_runs_in_chunks(fp4cl, context, checkpoints):
    path = checkpoints.get("mxfp4", "compressed-tensors")
    reference = ref.Moe(ref.Checkpoint(path), MOE_PREFIX)
    x, ids, weights, _ = inputs(MODEL["hidden"], tokens=11, seed=10)
    with context.open(path) as model, model.moe(MOE_PREFIX, max_tokens=4) as moe:
        assert moe.max_tokens == 4
        y = moe.run(x, ids, weights)
    check(reference.run(x.view(np.uint16), ids, weights), y, "11 tokens, max_tokens 4")


def test_moe_batch_invariant_keeps_the_bits_of_one_pass(fp4cl, context, checkpoints, monkeypatch):
    # The grouped strategy (forced; its sums depend on how many pairs share a tile) on 45 tokens
    # in chunks of 7: batch_invariant gives the bits of one pass, and without it this data
    # differs (so the option reaches the layer).
    monkeypatch.setenv("FP4CL_MOE_KERNEL", "grouped")
    path = checkpoints.get("nvfp4a16", "compressed-tensors")
    x, ids, weights, _ = inputs(MODEL["hidden"], tokens=45, seed=13)
    with context.open(path) as model:
        def run(max_tokens, batch_invariant):
            with model.moe(MOE_PREFIX, output="fp32", max_tokens=max_tokens, batch_invariant=batch_invariant) as moe:
                return moe.run(x, ids, weights)
        invariant = run(256, True)
        assert np.array_equal(run(7, True).view(np.uint32), invariant.view(np.uint32))
        assert not np.array_equal(run(7, False).view(np.uint32), invariant.view(np.uint32))


def test_moe_kernel_description_names_the_strategy_tiles_and_their_source(fp4cl, context, checkpoints, monkeypatch):
    path = checkpoints.get("nvfp4", "compressed-tensors")
    monkeypatch.setenv("FP4CL_MOE_KERNEL", "grouped")
    monkeypatch.setenv("FP4CL_MOE_TILES", "grouped.tile_m=4")
    with context.open(path) as model, model.moe(MOE_PREFIX) as moe:
        text = moe.kernel_description(5)
        assert text.startswith("grouped: tile_m 4, local sizes "), text
        assert text.endswith("[FP4CL_MOE_TILES]"), text
        with pytest.raises(fp4cl.InvalidArgumentError, match="tokens = 0: must be 1"):
            moe.kernel_description(0)


def test_moe_one_token_as_1d_arrays(fp4cl, context, checkpoints):
    # Compared with the same token as a [1, H] batch: a batch of another size may run another
    # kernel strategy, which sums in another order (equal within the bound, not bit for bit).
    path = checkpoints.get("nvfp4a16", "modelopt")
    x, ids, weights, logits = inputs(MODEL["hidden"], seed=12)
    with context.open(path) as model, model.moe(MOE_PREFIX, output="fp32") as moe:
        one = moe.run(x[4], ids[4], weights[4])
        assert one.shape == (moe.hidden,) and np.array_equal(one, moe.run(x[4:5], ids[4:5], weights[4:5])[0])
        one = moe.run_logits(x[4], logits[4])
        assert one.shape == (moe.hidden,) and np.array_equal(one, moe.run_logits(x[4:5], logits[4:5])[0])
