"""The NumPy reference itself, checked against the spec's worked numbers (FP4.md §1, §3, §4, §8)
and against exact rational arithmetic, so that a wrong reference cannot pass the layer tests."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp4_reference as ref


def test_worked_nvfp4_example():
    # FP4.md §8: [3.0, -1.296875, 0.1298828125, 0.125] and 12 zeros, gs = 1.
    x = np.zeros((1, 16), np.float32)
    x[0, :4] = [3.0, -1.296875, 0.1298828125, 0.125]
    codes, sf = ref.quantize_nvfp4(x, 1.0)
    assert sf.tolist() == [[0x30]]
    assert codes[0, :4].tolist() == [0x7, 0xD, 0x1, 0x0]
    assert ref.pack_fp4(codes)[0, :2].tolist() == [0xD7, 0x01]
    deq = ref.quantized_activations(x, "nvfp4", 1.0)
    assert deq[0, :4].tolist() == [3.0, -1.5, 0.25, 0.0]
    assert not deq[0, 4:].any()


def test_e2m1_thresholds_and_codes():
    # FP4.md §1: magnitudes of codes 0..7, 0x8 is negative zero, thresholds with ties to even.
    assert ref.e2m1_decode(np.arange(16)).tolist() == [0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6]
    cases = {0.25: 0, 0.2501: 0.5, 0.75: 1, 1.25: 1, 1.2501: 1.5, 1.75: 2, 2.5: 2, 2.5001: 3, 3.5: 4, 5: 4,
             5.001: 6, 100: 6, -0.75: -1, -5.001: -6}
    for v, want in cases.items():
        assert ref.e2m1_decode(ref.e2m1_encode([v]))[0] == want, v


def test_e4m3_encode_clamps_and_rounds():
    assert ref.e4m3_encode([448, 464, 1e9]).tolist() == [0x7E, 0x7E, 0x7E]  # never NaN
    assert ref.e4m3_decode([0x7E, 0x01, 0x30, 0x08]).tolist() == [448, 2**-9, 0.5, 2**-6]
    assert ref.e4m3_encode([2**-10, 3 * 2**-11]).tolist() == [0, 1]  # tie to even, round up


def test_mxfp4_ceil_rule_exact():
    rng = np.random.default_rng(1)
    amax = np.concatenate([rng.uniform(0, 100, 200), [6, 3, 1.5, 12.0000001, 1e-30, 1e-40]]).astype(np.float32)
    got = ref.mxfp4_scale_byte(amax).astype(int) - 127
    for a, e in zip(amax, got):
        q = Fraction(float(a)) / 6
        exact = next(n for n in range(-200, 200) if Fraction(2) ** n >= q)  # ceil(log2(q)), exactly
        assert e == max(-127, min(127, exact)), float(a)
    assert ref.mxfp4_scale_byte(np.float32([0, np.inf])).tolist() == [0, 254]


def test_round_to_bf16_matches_ml_dtypes_on_float32():
    rng = np.random.default_rng(2)
    v = np.concatenate([rng.standard_normal(1000) * 10.0**rng.integers(-30, 30, 1000), [1 + 2**-8, 1 + 3 * 2**-8]])
    v = v.astype(np.float32)
    assert np.array_equal(ref.round_to_bf16(v.astype(np.float64)), v.astype(ml_dtypes.bfloat16).astype(np.float64))


def test_nvfp4_quantization_dequantizes_within_half_a_step():
    # Every quantized value is one of the two FP4 grid points around x·mult (RNE), and the block
    # scale is amax/6 rounded to E4M3: so |deq - x| <= half a step at the block's scale.
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 64)) * 3).astype(ml_dtypes.bfloat16).astype(np.float32)
    gs = np.float32(448 * 6 / 12.0)
    codes, sf = ref.quantize_nvfp4(x, gs)
    scale = np.repeat(ref.e4m3_decode(sf), 16, axis=1) / float(gs)
    deq = ref.e2m1_decode(codes) * scale
    assert np.all(np.abs(deq - x) <= 1.0 * scale + 1e-12)  # the widest FP4 step (4 → 6) is 2
    assert np.all(np.sign(deq) * np.sign(x) >= 0)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_linear_reference_is_the_dequantized_matmul(fmt):
    rng = np.random.default_rng(4)
    n, k = 8, 64
    block = 16 if fmt == "nvfp4" else 32
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    scale = (ref.e4m3_decode(rng.integers(0x20, 0x50, (n, k // block))) if fmt == "nvfp4"
             else ref.e8m0_decode(rng.integers(120, 134, (n, k // block))))
    w = ref.Weight(fmt, False, codes, scale, gs_d=np.float32(0.25) if fmt == "nvfp4" else np.float32(1))
    x = rng.standard_normal((3, k)).astype(ml_dtypes.bfloat16)
    result = ref.linear(w, x.view(np.uint16))
    direct = np.zeros((3, n))
    for i in range(3):
        for j in range(n):
            direct[i, j] = sum(float(x[i, c]) * ref.e2m1_decode([codes[j, c]])[0] * scale[j, c // block]
                               for c in range(k)) * float(w.gs_d)
    assert np.allclose(result.value, direct, rtol=1e-12, atol=1e-12)
    assert np.all(result.accepts(result.value.astype(np.float32)))
    assert not np.all(result.accepts((result.value * 1.01 + 0.01).astype(np.float32)))


def test_softmax_topk_ties_to_lower_index():
    ids, w, _ = ref.softmax_topk(np.array([[1.0, 3.0, 3.0, 0.0]]), 2, True)
    assert ids.tolist() == [[1, 2]] and np.allclose(w, 0.5)
    ids, w, _ = ref.softmax_topk(np.array([[0.0, math.log(3.0)]]), 1, False)
    assert ids.tolist() == [[1]] and np.isclose(w[0, 0], 0.75)
