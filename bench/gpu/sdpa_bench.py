#!/usr/bin/env python3
"""PyTorch SDPA baseline for kernels_bench's BM_PrefillAttention (checked against torch 2.11:
docs/gpu-todo.md): causal prefill attention, Llama-3-8B shape (32 query heads, 8 KV heads,
head_dim 128), bf16, one sequence of LEN tokens, with the flash backend only
(torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION): a shape the backend cannot run
raises instead of falling back to another kernel). K and V are expanded to the 32 query heads
before the timed calls, as a non-GQA call must. Each call is timed alone with CUDA events, after
a 256 MiB write that evicts L2; the figure is the median. TFLOP/s are counted as kernels_bench
counts them (bench/kernels_bench.cc): 4 * heads * len^2 * head_dim / 2 (causal).
Exit status: 0 every length measured, 1 a length failed, 2 bad usage or a missing / unsupported
package or device.

usage: python3 bench/gpu/sdpa_bench.py [--lens 512 2048 8192] [--iters 50] [--json OUT.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_python  # noqa: E402

SCRIPT = "sdpa_bench"
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def causal_flops(n):
    """kernels_bench's count for one causal prefill of n tokens (BM_PrefillAttention)."""
    return 4.0 * HEADS * n * n * HEAD_DIM / 2


def median(values):
    s = sorted(values)
    return s[len(s) // 2]


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="sdpa_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lens", type=int, nargs="+", default=[512, 2048, 8192])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    if any(n < 1 for n in args.lens):
        ap.error(f"--lens: expected lengths >= 1, got {args.lens}")
    if args.iters < 1:
        ap.error(f"--iters: expected >= 1, got {args.iters}")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    torch = gpu_python.require(["torch"], SCRIPT)["torch"]
    gpu_python.require_cuda(torch, SCRIPT)
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    impl = getattr(torch.nn.attention, "current_flash_attention_impl", None)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "backend": "flash",
              # None: torch's built-in FlashAttention-2 (no other implementation activated).
              "flash_impl": (impl() if impl else None) or "FA2 (built in)", "lens": []}
    print(f"device: {result['device']}  torch {torch.__version__}  backend flash "
          f"(implementation {result['flash_impl']})")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    failed = []
    for n in args.lens:
        q = torch.randn(1, HEADS, n, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(1, KV_HEADS, n, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        v = torch.randn_like(k)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                for _ in range(3):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)
                times = []
                for _ in range(args.iters):
                    flush.zero_()
                    a = torch.cuda.Event(enable_timing=True)
                    b = torch.cuda.Event(enable_timing=True)
                    a.record()
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    b.record()
                    torch.cuda.synchronize()
                    times.append(a.elapsed_time(b) * 1e-3)  # elapsed_time is in ms
        except RuntimeError as e:
            failed.append(n)
            print(f"{SCRIPT}: error: len {n}: flash SDPA failed: {e}", file=sys.stderr)
            continue
        t = median(times)
        row = {"len": n, "ms": t * 1e3, "tflops": causal_flops(n) / t / 1e12}
        result["lens"].append(row)
        print(f"len {n:6d}: {row['ms']:8.3f} ms  {row['tflops']:7.1f} TFLOP/s (median of "
              f"{args.iters}, flash)", flush=True)
    result["failed_lens"] = failed
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
