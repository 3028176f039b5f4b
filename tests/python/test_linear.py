"""Linear layers through the binding, every scheme and layout, against the independent NumPy
reference (value ± a rigorous fp32 bound, BF16 and fp32 outputs)."""

import ml_dtypes
import numpy as np
import pytest

import fp4_reference as ref
from conftest import LINEAR


def inputs(k, rows=7, seed=11):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, k)) * 2.0
    x[1] = 0.0  # an all-zero row: zero block scales (W4A4)
    x[2] *= 1e-3  # a small row: its blocks scale on their own
    x[3, :16] = 0.0  # a zero block next to non-zero ones
    return x.astype(ml_dtypes.bfloat16)


def check(result, y, what):
    ok = result.accepts(y)
    assert ok.all(), (f"{what}: {int((~ok).sum())} of {ok.size} outputs outside the reference's bound; first at "
                      f"{np.argwhere(~ok)[0]}: got {y[tuple(np.argwhere(~ok)[0])]}, reference "
                      f"{result.value[tuple(np.argwhere(~ok)[0])]} ± {result.bound[tuple(np.argwhere(~ok)[0])]}")


@pytest.mark.parametrize("output", ["bf16", "fp32"])
def test_linear_matches_reference(fp4cl, context, checkpoint, output):
    scheme, layout, path = checkpoint
    reference = ref.Checkpoint(path)
    assert reference.scheme == scheme
    w = reference.weight(LINEAR)
    with context.open(path) as model:
        info = model.layer(LINEAR)
        assert (info.kind, info.scheme) == ("linear", scheme)
        assert (info.out_features, info.in_features) == w.codes.shape
        with model.linear(LINEAR, max_tokens=16, output=output) as layer:
            assert (layer.n, layer.k, layer.scheme) == (*w.codes.shape, scheme)
            x = inputs(layer.k)
            y = layer.run(x)
    assert y.dtype == (ml_dtypes.bfloat16 if output == "bf16" else np.float32)
    assert y.shape == (x.shape[0], w.codes.shape[0])
    result = ref.linear(w, x.view(np.uint16))
    check(result, y, f"{scheme} {layout} {output}")
    # Not a vacuous comparison: the outputs are non-trivial and the bound is tight.
    assert np.count_nonzero(y[0]) > 0.9 * y.shape[1]
    assert not y[1].astype(np.float32).any()  # a zero row gives zero
    assert np.all(result.bound[0] < 1e-3 * np.abs(result.value[0]).max())


def test_linear_one_row_and_out_array(fp4cl, context, checkpoints):
    path = checkpoints.get("nvfp4", "compressed-tensors")
    with context.open(path) as model, model.linear(LINEAR, output="fp32") as layer:
        x = inputs(layer.k)
        y_all = layer.run(x)
        y_row = layer.run(x[0])  # 1-D x: one row, 1-D y (bit for bit the [1, k] batch: the same kernel)
        assert y_row.shape == (layer.n,) and np.array_equal(y_row, layer.run(x[:1])[0])
        out = np.full((x.shape[0], layer.n), np.nan, np.float32)
        assert layer.run(x, out=out) is out and np.array_equal(out, y_all)
        empty = layer.run(np.zeros((0, layer.k), ml_dtypes.bfloat16))
        assert empty.shape == (0, layer.n)


def test_linear_kernel_description_names_the_kernel(fp4cl, context, checkpoints, monkeypatch):
    path = checkpoints.get("nvfp4", "compressed-tensors")
    monkeypatch.setenv("FP4CL_LINEAR_KERNEL", "gemv_rows")
    with context.open(path) as model, model.linear(LINEAR) as layer:
        text = layer.kernel_description(2)
        assert text.startswith("gemv_rows("), text
        with pytest.raises(fp4cl.InvalidArgumentError, match="m = 0: must be 1"):
            layer.kernel_description(0)


def test_linear_layers_by_index(fp4cl, context, checkpoints):
    path = checkpoints.get("mxfp4a16", "compressed-tensors")
    reference = ref.Checkpoint(path)
    with context.open(path) as model:
        layers = model.layers
        linears = [l for l in layers if l.kind == "linear"]
        names = [l.name for l in layers]
        assert [l.index for l in layers] == list(range(len(layers)))
        # every attention projection of the decoder layer is a quantized linear layer
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            assert f"model.layers.0.self_attn.{proj}" in names
        assert sum(l.kind == "moe" for l in layers) == 1
        for info in linears:
            w = reference.weight(info.name)
            with model.linear(info.index, max_tokens=4) as layer:
                x = inputs(layer.k, rows=4, seed=info.index)
                check(ref.linear(w, x.view(np.uint16)), layer.run(x), info.name)


@pytest.mark.parametrize("scheme", ["nvfp4a16", "mxfp4a16"])
def test_w4a16_integer_gemv_multiplies_the_activations_on_their_grid(fp4cl, context, checkpoints, scheme,
                                                                     monkeypatch):
    """gemv_int (forced: it runs on any device) under W4A16 puts each 16-element chunk of activations on
    an integer grid (README "Numerics"): its outputs are those of the activations rounded to that grid,
    which fp4_reference.w4a16_int_grid computes with NumPy (rint, frexp), within the tight bound of
    exact products, though the unrounded activations' own values lie outside it."""
    monkeypatch.setenv("FP4CL_LINEAR_KERNEL", "gemv_int")
    monkeypatch.delenv("FP4CL_W4A16_INT", raising=False)
    path = checkpoints.get(scheme, "compressed-tensors")
    reference = ref.Checkpoint(path)
    w = reference.weight(LINEAR)
    rng = np.random.default_rng(5)
    k = w.codes.shape[1]
    x = rng.standard_normal((4, k))
    chunks = x.reshape(4, -1, 16)
    chunks[:, ::3, 0] *= 2.0**9  # one element 2^9 above its chunk: the others round to 7 bits or fewer
    chunks[:, 1::3, 5] = 3.0  # the others 2^6 to 2^9 below it, ties among them
    chunks[:, 1::3, 6:] = np.ldexp(rng.integers(-255, 256, (4, chunks[:, 1::3].shape[1], 10)), -14)
    x = x.astype(ml_dtypes.bfloat16)
    a = x.astype(np.float64)
    grid = ref.w4a16_int_grid(a).astype(ml_dtypes.bfloat16)
    assert np.array_equal(grid.astype(np.float64), ref.w4a16_int_grid(a)), "the grid values are BF16 numbers"
    assert np.count_nonzero(grid != x) > 100, "the data should exercise the rounding"
    with context.open(path) as model, model.linear(LINEAR, max_tokens=8, output="fp32") as layer:
        y = layer.run(x)
        y_grid = layer.run(grid)
    assert np.array_equal(y, y_grid), "x and x on its grid should give the same bits"
    on_grid = ref.linear(w, grid.view(np.uint16))
    exact = ref.linear(w, x.view(np.uint16))
    check(ref.Result(on_grid.value, on_grid.bound), y, f"{scheme} gemv_int on the grid")
    tight = np.abs(y.astype(np.float64) - exact.value) <= gamma_bound(exact)
    assert not tight.all(), "the unrounded activations' exact products should differ beyond their fp32 bound"


def gamma_bound(result):
    """The bound of exact products alone, without the grid's slack: what an exact kernel must meet."""
    return result.bound - result.slack
