"""Bad input through the binding: each case raises the right fp4cl exception with a message that
names what was wrong (the library's own message for what the C API checks)."""

import ml_dtypes
import numpy as np
import pytest

from conftest import LINEAR, MODEL, MOE_PREFIX


@pytest.fixture(scope="module")
def nvfp4(checkpoints):
    return checkpoints.get("nvfp4", "compressed-tensors")


@pytest.fixture(scope="module")
def layers(fp4cl, context, nvfp4):
    with context.open(nvfp4) as model:
        linear = model.linear(LINEAR, max_tokens=4)
        moe = model.moe(MOE_PREFIX, max_tokens=8)
        yield linear, moe
        linear.close()
        moe.close()


def test_missing_directory(fp4cl, context, tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(fp4cl.InvalidModelError) as e:
        context.open(missing)
    assert str(missing) in e.value.message and e.value.status == fp4cl.Status.INVALID_MODEL
    assert "FP4CL_ERROR_INVALID_MODEL" in str(e.value)


def test_directory_without_model(fp4cl, context, tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(fp4cl.InvalidModelError) as e:
        context.open(tmp_path)
    assert "config.json" in e.value.message


def test_unknown_layer(fp4cl, context, nvfp4):
    with context.open(nvfp4) as model:
        with pytest.raises(fp4cl.NotFoundError) as e:
            model.linear("model.layers.0.self_attn.no_such_proj")
        assert "no_such_proj" in e.value.message
        with pytest.raises(fp4cl.NotFoundError):
            model.linear(MOE_PREFIX + ".mlp.experts")  # an MoE layer is not a linear layer
        with pytest.raises(fp4cl.NotFoundError):
            model.moe(LINEAR)
        with pytest.raises(fp4cl.NotFoundError):
            model.layer("model.layers.7")
        with pytest.raises(fp4cl.NotFoundError):
            model.linear(len(model.layers) + 3)
        with pytest.raises(fp4cl.InvalidArgumentError, match="max_tokens"):
            model.linear(LINEAR, max_tokens=0)
        with pytest.raises(fp4cl.InvalidArgumentError, match="output dtype"):
            model.linear(LINEAR, output="fp16")


def test_bad_device_selector(fp4cl):
    with pytest.raises(fp4cl.DeviceNotFoundError) as e:
        fp4cl.Context("no device has this name 7f3a")
    assert "7f3a" in e.value.message


def test_linear_input_dtype_and_shape(fp4cl, layers):
    linear, _ = layers
    k = linear.k
    for bad in (np.zeros((2, k), np.float64), np.zeros((2, k), np.int32), np.zeros((2, k), np.float16)):
        with pytest.raises(fp4cl.InvalidArgumentError, match=f"x has dtype {bad.dtype}"):
            linear.run(bad)
    with pytest.raises(fp4cl.InvalidArgumentError, match=rf"x has shape \(2, {k + 16}\).*dimension 1"):
        linear.run(np.zeros((2, k + 16), ml_dtypes.bfloat16))
    with pytest.raises(fp4cl.InvalidArgumentError, match="2-D"):
        linear.run(np.zeros((1, 2, k), ml_dtypes.bfloat16))
    with pytest.raises(fp4cl.InvalidArgumentError, match="max_tokens = 4"):
        linear.run(np.zeros((5, k), ml_dtypes.bfloat16))


def test_out_array_checked(fp4cl, layers):
    linear, _ = layers
    x = np.zeros((2, linear.k), ml_dtypes.bfloat16)
    with pytest.raises(fp4cl.InvalidArgumentError, match="out has dtype float32"):
        linear.run(x, out=np.zeros((2, linear.n), np.float32))  # the layer's output is BF16
    with pytest.raises(fp4cl.InvalidArgumentError, match="out has shape"):
        linear.run(x, out=np.zeros((3, linear.n), ml_dtypes.bfloat16))
    with pytest.raises(fp4cl.InvalidArgumentError, match="C-contiguous"):
        linear.run(x, out=np.zeros((linear.n, 2), ml_dtypes.bfloat16).T)


def test_non_contiguous_input_is_copied(fp4cl, layers):
    linear, _ = layers
    rng = np.random.default_rng(0)
    x = rng.standard_normal((linear.k, 3)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(linear.run(x.T).view(np.uint16), linear.run(np.ascontiguousarray(x.T)).view(np.uint16))


def test_expert_id_out_of_range(fp4cl, layers):
    _, moe = layers
    x = np.ones((3, moe.hidden), ml_dtypes.bfloat16)
    w = np.full((3, moe.top_k), 0.5, np.float32)
    for bad_id in (MODEL["experts"], -1, 1000):
        ids = np.zeros((3, moe.top_k), np.int32)
        ids[2, 1] = bad_id
        with pytest.raises(fp4cl.InvalidExpertIdError) as e:
            moe.run(x, ids, w)
        assert str(bad_id) in e.value.message, e.value.message
        assert e.value.status == fp4cl.Status.INVALID_EXPERT_ID
    # the layer still works after a refused call
    ids = np.zeros((3, moe.top_k), np.int32)
    assert np.asarray(moe.run(x, ids, w), np.float32).any()


def test_moe_input_dtype_and_shape(fp4cl, layers):
    _, moe = layers
    x = np.ones((3, moe.hidden), ml_dtypes.bfloat16)
    ids = np.zeros((3, moe.top_k), np.int32)
    w = np.ones((3, moe.top_k), np.float32)
    with pytest.raises(fp4cl.InvalidArgumentError, match="topk_ids has dtype float32"):
        moe.run(x, ids.astype(np.float32), w)
    with pytest.raises(fp4cl.InvalidArgumentError, match=r"topk_ids has shape \(3, 3\)"):
        moe.run(x, np.zeros((3, 3), np.int32), w)
    with pytest.raises(fp4cl.InvalidArgumentError, match="topk_weights has shape"):
        moe.run(x, ids, w[:2])
    with pytest.raises(fp4cl.InvalidArgumentError, match="does not fit int32"):
        moe.run(x, np.full((3, moe.top_k), 2**40, np.int64), w)
    with pytest.raises(fp4cl.InvalidArgumentError, match="router_logits has shape"):
        moe.run_logits(x, np.zeros((3, moe.num_experts + 1), np.float32))
    with pytest.raises(fp4cl.InvalidArgumentError, match="x has dtype int8"):
        moe.run(x.view(np.int8), ids, w)
    # int64 ids in range are accepted (converted)
    assert np.array_equal(moe.run(x, ids.astype(np.int64), w).view(np.uint16), moe.run(x, ids, w).view(np.uint16))


def test_bad_expert_map(fp4cl, context, nvfp4):
    with context.open(nvfp4) as model:
        with pytest.raises(fp4cl.Error) as e:
            model.moe(MOE_PREFIX, expert_map=[0, 1, 9, -1])  # local expert 9 does not exist
        assert "expert_map" in e.value.message
        with pytest.raises(fp4cl.InvalidArgumentError, match="expert_map"):
            model.moe(MOE_PREFIX, expert_map=[[0, 1]])


def test_closed_handles(fp4cl, context, nvfp4):
    model = context.open(nvfp4)
    linear = model.linear(LINEAR)
    model.close()
    model.close()  # idempotent
    x = np.zeros((1, linear.k), ml_dtypes.bfloat16)
    assert linear.run(x).shape == (1, linear.n)  # a layer outlives its model
    linear.close()
    with pytest.raises(fp4cl.InvalidArgumentError, match="closed"):
        linear.run(x)
    with pytest.raises(fp4cl.InvalidArgumentError, match="closed"):
        model.layers
