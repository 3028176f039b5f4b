"""The Python binding in one page: open a quantized model, list its layers, run its first linear
layer and its first MoE layer (router logits and precomputed top-k) on random BF16 inputs.

    PYTHONPATH=python FP4CL_LIBRARY=build/libfp4cl.so python3 examples/run_layers.py MODEL_DIR [TOKENS]

(tests/python runs it on a checkpoint the fp4cl tool writes.)
"""

import sys

import ml_dtypes
import numpy as np

import fp4cl


def main(directory, tokens=4):
    rng = np.random.default_rng(0)
    try:
        model = fp4cl.Model(directory)  # a context on FP4CL_DEVICE, else the first GPU, else PoCL
    except fp4cl.Error as e:  # the library's message: which file, tensor or argument, and why
        print(f"cannot open {directory}: {e}", file=sys.stderr)
        return 1
    with model:
        print(f"libfp4cl {fp4cl.library_version()} on {model.context.device}")
        for info in model.layers:
            shape = (f"[{info.out_features}, {info.in_features}]" if info.kind == "linear" else
                     f"E={info.num_experts} H={info.hidden} I={info.intermediate} k={info.top_k}")
            print(f"  {info.index:3d} {info.kind:6s} {info.scheme:8s} {info.name} {shape}")

        first_linear = next(info for info in model.layers if info.kind == "linear")
        with model.linear(first_linear.name, max_tokens=tokens) as layer:
            x = rng.standard_normal((tokens, layer.k)).astype(ml_dtypes.bfloat16)
            y = layer.run(x)  # [tokens, n] bfloat16
            print(f"{first_linear.name}: y {y.shape} {y.dtype}, |y| max {np.abs(y.astype(np.float32)).max():.4g}")

        first_moe = next((info for info in model.layers if info.kind == "moe"), None)
        if first_moe is not None:
            with model.moe(first_moe.name, output="fp32") as moe:
                x = rng.standard_normal((tokens, moe.hidden)).astype(ml_dtypes.bfloat16)
                logits = rng.standard_normal((tokens, moe.num_experts)).astype(np.float32)
                out = moe.run_logits(x, logits)  # softmax, top-k and renormalization on the device
                ids = np.argsort(-logits, axis=1)[:, :moe.top_k]
                weights = np.full(ids.shape, 1.0 / moe.top_k, np.float32)
                out_topk = moe.run(x, ids, weights)  # precomputed routing
                print(f"{first_moe.name}: out {out.shape} {out.dtype}, |out| max {np.abs(out).max():.4g}; "
                      f"equal-weight top-{moe.top_k}: |out| max {np.abs(out_topk).max():.4g}")
                try:
                    moe.run(x, np.full(ids.shape, moe.num_experts, np.int32), weights)
                except fp4cl.InvalidExpertIdError as e:
                    print(f"refused as expected: {e.message}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], *(int(a) for a in sys.argv[2:3])))
