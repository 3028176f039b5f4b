#!/usr/bin/env python3
"""The PyTorch BF16 baseline for fp4cl's MoE benchmark on a GPU, and the device's copy bandwidth.

One MoE layer as a user without fp4cl would run it: the FP4 expert weights dequantized once to
BF16 (random E2M1 codes times random power-of-two block scales, the values an NVFP4/MXFP4 layer
dequantizes to), the same routing rule as `fp4cl-bench moe` (k distinct experts per token drawn
uniformly, softmax-like positive weights), and two implementations:
  loop     per-expert matmuls: gather the expert's tokens, x @ W13ᵀ, silu(g)·u, @ W2ᵀ,
           weighted index_add into the output (what HF transformers' MoE blocks do);
  grouped  torch._grouped_mm over the expert-sorted tokens (where this PyTorch has it).
Timing: CUDA events around each call, routings rotated so that weights are not served from L2,
after warm-up calls for at least 200 ms (as fp4cl-bench's --warmup-ms: clocks settle), median of
the timed calls. Writes CSV rows to stdout:
  kind,model,tokens,impl,us_median,us_min,tflops,weight_bytes_bf16
and one `copy` row with the device-to-device copy bandwidth (read + write bytes per second).
"""
import argparse
import statistics
import sys
import time

import torch

PRESETS = {  # name: (hidden, inter, experts, top_k), as bench/presets.cpp
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "mixtral-8x7b": (4096, 14336, 8, 2),
}


def dequantized_weights(shape, gen, device):
    """BF16 values e2m1 × 2^s: what an FP4 checkpoint dequantizes to."""
    e2m1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], device=device)
    codes = torch.randint(0, 16, shape, generator=gen, device=device)
    scales = torch.exp2(torch.randint(-8, -4, shape[:-1] + (shape[-1] // 16, 1), generator=gen, device=device).float())
    w = e2m1[codes].view(*shape[:-1], shape[-1] // 16, 16) * scales
    return w.view(shape).to(torch.bfloat16)


def routing(tokens, experts, k, gen, device):
    ids = torch.rand(tokens, experts, generator=gen, device=device).argsort(dim=1)[:, :k].to(torch.int64)
    w = torch.rand(tokens, k, generator=gen, device=device) + 0.1
    return ids, (w / w.sum(dim=1, keepdim=True)).float()


def moe_loop(x, w13, w2, ids, weights):
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    inter = w2.shape[2]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=w13.shape[0]).tolist()
    tok = order // ids.shape[1]
    wts = weights.reshape(-1)[order]
    start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        t = tok[start:start + c]
        h = x[t] @ w13[e].t()
        a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
        y = a @ w2[e].t()
        out.index_add_(0, t, y.float() * wts[start:start + c, None])
        start += c
    return out.to(torch.bfloat16)


def moe_grouped(x, w13, w2, ids, weights):
    inter = w2.shape[2]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=w13.shape[0])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    tok = order // ids.shape[1]
    xs = x[tok]
    h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, y.float() * weights.reshape(-1)[order, None])
    return out.to(torch.bfloat16)


def time_calls(fn, inputs, warmup, iters, warmup_s=0.2):
    """Median and minimum µs of `iters` calls after at least `warmup` calls and `warmup_s` seconds."""
    i, t0 = 0, time.perf_counter()
    while i < warmup or time.perf_counter() - t0 < warmup_s:
        fn(*inputs[i % len(inputs)])
        torch.cuda.synchronize()
        i += 1
    times = []
    for i in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(*inputs[i % len(inputs)])
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times), min(times)


def copy_bandwidth(device, mib=1024, iters=20):
    a = torch.empty(mib << 20, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    us, _ = time_calls(lambda: b.copy_(a), [()], 3, iters)
    return 2 * a.numel() / (us * 1e-6)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", action="append", choices=sorted(PRESETS), help="default: all")
    p.add_argument("--tokens", default="1,8,64,512")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--routings", type=int, default=16)
    args = p.parse_args()
    device = torch.device("cuda")
    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    print("kind,model,tokens,impl,us_median,us_min,tflops,weight_bytes_bf16")
    print(f"copy,,,torch copy_,,,,{copy_bandwidth(device):.0f}")
    sys.stdout.flush()
    for name in args.preset or list(PRESETS):
        H, I, E, k = PRESETS[name]
        w13 = dequantized_weights((E, 2 * I, H), gen, device)
        w2 = dequantized_weights((E, H, I), gen, device)
        for T in (int(t) for t in args.tokens.split(",")):
            x = (torch.randn(T, H, generator=gen, device=device)).to(torch.bfloat16)
            inputs = [(x, w13, w2) + routing(T, E, k, gen, device) for _ in range(args.routings)]
            distinct = statistics.mean(len(torch.unique(i[3])) for i in inputs)
            flops = 2.0 * T * k * 3 * I * H
            impls = {"loop": moe_loop}
            if hasattr(torch, "_grouped_mm"):
                impls["grouped"] = moe_grouped
            for impl, fn in impls.items():
                try:
                    med, mn = time_calls(fn, inputs, 3, args.iters)
                except Exception as exc:  # noqa: BLE001 (report and go on: _grouped_mm is private API)
                    print(f"# {impl} failed for {name} T={T}: {exc}", file=sys.stderr)
                    continue
                print(f"moe,{name},{T},{impl},{med:.2f},{mn:.2f},{flops / (med * 1e-6) * 1e-12:.3f},"
                      f"{distinct * 3 * I * H * 2:.0f}")
                sys.stdout.flush()
        del w13, w2
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
