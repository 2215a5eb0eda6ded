#!/usr/bin/env python3
"""Hugging Face transformers `generate` baseline for the engine's end-to-end figures (checked
against torch 2.11 and transformers 5.17: docs/gpu-todo.md): a Llama-3-8B-shaped LlamaForCausalLM
with random bf16 weights (made on the GPU), CONCURRENCY prompts of PROMPT_LEN random tokens batched
together, OUTPUT_LEN new tokens each, greedy (do_sample=False), with transformers' default KV cache
(DynamicCache) and attention (sdpa). min_new_tokens = max_new_tokens masks the EOS id until the
last step, so every sequence runs the full length; the script checks that each generate returned
exactly that many new tokens. Per concurrency level:
  - TTFT: the median time of `generate(max_new_tokens=1)` on the batch (prefill + one token);
  - E2E: the median time of the full `generate`; TPOT = (E2E - TTFT) / (OUTPUT_LEN - 1);
  - output tokens/s = CONCURRENCY * OUTPUT_LEN / E2E.
The engine's counterpart is `engine run bench/gpu/e2e-cN.yaml --device cuda` (summary.json);
`gpu-check e2e` runs both and compares. Exit status: 0 done, 1 a generate misbehaved, 2 bad usage
or a missing / unsupported package or device.

usage: python3 bench/gpu/hf_generate_bench.py [--concurrency 1 8 32 128] [--prompt-len 512]
                                              [--output-len 256] [--rounds 1] [--json OUT.json]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_python  # noqa: E402

SCRIPT = "hf_generate_bench"


def llama3_8b_config():
    """LlamaConfig's arguments (transformers 5 names) for the shape of Meta-Llama-3-8B, the model
    bench/gpu/e2e-*.yaml runs (experiments/catalog/models/Llama-3-8B.yaml)."""
    return dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 500000.0})


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="hf_generate_bench.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1, help="timed batches per measurement")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    for name in ("prompt_len", "output_len", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: expected >= 1, got {getattr(args, name)}")
    if any(c < 1 for c in args.concurrency):
        ap.error(f"--concurrency: expected values >= 1, got {args.concurrency}")
    if args.prompt_len + args.output_len > llama3_8b_config()["max_position_embeddings"]:
        ap.error("--prompt-len + --output-len exceeds the model's 8192 positions")
    return args


def level_figures(concurrency, output_len, ttft_s, e2e_s):
    """The figures of one concurrency level (report.py reads these keys)."""
    tpot = (e2e_s - ttft_s) / max(output_len - 1, 1)
    return {"concurrency": concurrency, "output_tokens_per_s": concurrency * output_len / e2e_s,
            "ttft_ms": ttft_s * 1e3, "tpot_ms": tpot * 1e3, "e2e_s": e2e_s}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    mods = gpu_python.require(["torch", "transformers"], SCRIPT)
    torch, transformers = mods["torch"], mods["transformers"]
    gpu_python.require_cuda(torch, SCRIPT)

    def timed(fn, rounds):
        times = []
        for _ in range(rounds):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]

    cfg = transformers.LlamaConfig(**llama3_8b_config())
    torch.manual_seed(0)
    # Built in fp32 on the GPU (32 GB for 8B), then cast: no reliance on a bf16 default dtype.
    # The explicit .to("cuda") covers a constructor that ignores the device context.
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg)
    model = model.to("cuda").to(torch.bfloat16).eval()
    torch.cuda.empty_cache()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "transformers": transformers.__version__,
              "attention": getattr(model.config, "_attn_implementation", None),
              "prompt_len": args.prompt_len, "output_len": args.output_len, "levels": []}
    print(f"device: {result['device']}  torch {torch.__version__}  transformers "
          f"{transformers.__version__}  attention {result['attention']}")
    bad = []
    for c in args.concurrency:
        ids = torch.randint(0, cfg.vocab_size, (c, args.prompt_len), device="cuda")
        mask = torch.ones_like(ids)

        def gen(n, ids=ids, mask=mask, c=c):
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                                     min_new_tokens=n, do_sample=False, pad_token_id=0)
            if tuple(out.shape) != (c, args.prompt_len + n):
                bad.append(f"concurrency {c}: generate(max_new_tokens={n}) returned shape "
                           f"{tuple(out.shape)}, expected ({c}, {args.prompt_len + n})")

        gen(2)  # warm-up
        ttft = timed(lambda: gen(1), max(args.rounds, 3))
        e2e = timed(lambda: gen(args.output_len), args.rounds)
        level = level_figures(c, args.output_len, ttft, e2e)
        result["levels"].append(level)
        print(f"concurrency {c:4d}: {level['output_tokens_per_s']:9.1f} output tok/s  "
              f"TTFT {level['ttft_ms']:8.1f} ms  TPOT {level['tpot_ms']:7.2f} ms", flush=True)
        torch.cuda.empty_cache()
    for b in bad:
        print(f"{SCRIPT}: error: {b}", file=sys.stderr)
    result["ok"] = not bad
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
