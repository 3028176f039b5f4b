"""`fp4cl run` with the official `safetensors` package on both ends: inputs serialized by the package
(BF16 x from ml_dtypes, F32 router logits, I64 topk_ids), the tool run on a checkpoint it made and
quantized itself, and its output `y` deserialized by the package: right dtype, shape and metadata,
finite; the router-logit run agrees with the equivalent precomputed-top-k run (the same experts,
numpy's softmax weights) within BF16 rounding, and a BF16 and an F32 copy of the same x give
bit-identical outputs.

Usage: run_interop.py PATH_TO_FP4CL
"""

import json
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
from safetensors import deserialize
from safetensors.numpy import save_file

TOOL = sys.argv[1]
T, H, E, K = 6, 64, 4, 2


def fp4cl(*args):
    result = subprocess.run([TOOL, *args], capture_output=True, text=True)
    assert result.returncode == 0, f"fp4cl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def write(path, tensors):
    """Writes numpy arrays (BF16 as ml_dtypes.bfloat16) with the package's own serializer."""
    save_file(tensors, path)


def read(path):
    """The package's deserializer (raw bytes per tensor, any dtype) and the header's metadata."""
    with open(path, "rb") as f:
        data = f.read()
    header_len = int.from_bytes(data[:8], "little")
    metadata = json.loads(data[8:8 + header_len]).get("__metadata__", {})
    return dict(deserialize(data)), metadata


def y_of(path, dtype):
    tensors, metadata = read(path)
    y = tensors["y"]
    assert y["dtype"] == dtype, y["dtype"]
    assert list(y["shape"]) == [T, H], y["shape"]
    values = np.frombuffer(bytes(y["data"]), dtype=ml_dtypes.bfloat16 if dtype == "BF16" else np.float32)
    assert np.all(np.isfinite(values.astype(np.float32))), "non-finite output"
    assert np.any(values.astype(np.float32) != 0), "all-zero output"
    return values, metadata


def main():
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as d:
        src, model = os.path.join(d, "src"), os.path.join(d, "model")
        fp4cl("make-model", src, "--layers", "1", "--hidden", str(H), "--inter", "32", "--experts", str(E),
              "--topk", str(K), "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--vocab", "32")
        fp4cl("quantize", src, model, "--scheme", "nvfp4", "--layout", "compressed-tensors")

        x = rng.standard_normal((T, H)).astype(ml_dtypes.bfloat16)
        logits = rng.standard_normal((T, E)).astype(np.float32) * 2
        # The routing the layer computes from the logits: softmax, top-2 by logit, renormalized.
        order = np.argsort(-logits, axis=1, kind="stable")[:, :K]
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        top = np.take_along_axis(p, order, axis=1)
        weights = (top / top.sum(axis=1, keepdims=True)).astype(np.float32)

        logits_in, topk_in = os.path.join(d, "logits.safetensors"), os.path.join(d, "topk.safetensors")
        write(logits_in, {"x": x, "router_logits": logits})
        write(topk_in, {"x": x.astype(np.float32), "topk_ids": order.astype(np.int64), "topk_weights": weights})
        out_logits, out_topk = os.path.join(d, "y1.safetensors"), os.path.join(d, "y2.safetensors")
        fp4cl("run", model, "--layer", "model.layers.0", "--input", logits_in, "--output", out_logits, "--check")
        fp4cl("run", model, "--layer", "model.layers.0.mlp.experts", "--input", topk_in, "--output", out_topk,
              "--check")
        y1, meta = y_of(out_logits, "BF16")
        y2, _ = y_of(out_topk, "BF16")
        assert meta.get("fp4cl.layer") == "model.layers.0.mlp.experts", meta
        assert meta.get("fp4cl.scheme") == "NVFP4 W4A4", meta
        # The device's fp32 softmax weights may differ from numpy's in the last bits: the outputs
        # agree within two BF16 ulps, and are equal almost everywhere.
        a, b = y1.astype(np.float32), y2.astype(np.float32)
        ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(a), np.abs(b)) + 1e-30)) - 7)
        assert np.all(np.abs(a - b) <= 2 * ulp), np.max(np.abs(a - b) / ulp)
        assert np.mean(a == b) > 0.9, np.mean(a == b)

        out_q = os.path.join(d, "q.safetensors")
        write(os.path.join(d, "q_in.safetensors"), {"x": x})
        fp4cl("run", model, "--layer", "model.layers.0.self_attn.q_proj", "--input",
              os.path.join(d, "q_in.safetensors"), "--output", out_q, "--output-dtype", "f32", "--check")
        q1, _ = y_of(out_q, "F32")
        write(os.path.join(d, "q_in32.safetensors"), {"x": x.astype(np.float32)})
        fp4cl("run", model, "--layer", "model.layers.0.self_attn.q_proj", "--input",
              os.path.join(d, "q_in32.safetensors"), "--output", out_q, "--output-dtype", "f32")
        q2, _ = y_of(out_q, "F32")
        assert np.array_equal(q1.view(np.uint32), q2.view(np.uint32)), "BF16 and exact F32 x differ"
    print("fp4cl run interop: OK")


if __name__ == "__main__":
    main()
