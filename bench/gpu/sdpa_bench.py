#!/usr/bin/env python3
"""PyTorch SDPA baseline for kernels_bench's BM_PrefillAttention: causal prefill attention,
Llama-3-8B shape (32 query heads, 8 KV heads, head_dim 128), bf16, one sequence of LEN tokens.
Prints TFLOP/s counted as in kernels_bench (4 * heads * len^2 * head_dim / 2).

usage: python3 bench/gpu/sdpa_bench.py [--lens 512 2048 8192] [--iters 50]
"""
import argparse
import json

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lens", type=int, nargs="+", default=[512, 2048, 8192])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    # The flash backend, as the target names it; the default choice where unavailable.
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)  # noqa: E731 (single-use)
        backend_name = "flash"
    except ImportError:
        import contextlib
        backend = contextlib.nullcontext
        backend_name = "default"
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "backend": backend_name, "lens": []}
    heads, kv_heads, hd = 32, 8, 128
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for n in args.lens:
        q = torch.randn(1, heads, n, hd, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(1, kv_heads, n, hd, dtype=torch.bfloat16, device="cuda")
        v = torch.randn_like(k)
        # GQA: expand K/V to the query heads, as a non-GQA-aware SDPA call must.
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        with backend():
            times = run(q, k, v, flush, args.iters)
        t = sorted(times)[len(times) // 2]
        flops = 4.0 * heads * n * n * hd / 2
        result["lens"].append({"len": n, "ms": t * 1e3, "tflops": flops / t / 1e12})
        print(f"len {n:6d}: {t * 1e3:8.3f} ms  {flops / t / 1e12:7.1f} TFLOP/s (median, {backend_name})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


def run(q, k, v, flush, iters):
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    times = []
    for _ in range(iters):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return times


if __name__ == "__main__":
    main()
