#!/usr/bin/env python3
"""Hugging Face transformers `generate` baseline for the engine's end-to-end figures: a
Llama-3-8B-shaped LlamaForCausalLM with random bf16 weights (made on the GPU), CONCURRENCY prompts
of PROMPT_LEN random tokens batched together, OUTPUT_LEN new tokens each (min_new_tokens =
max_new_tokens, so no early stop), greedy, with the KV cache. Per concurrency level:
  - TTFT: the median time of `generate(max_new_tokens=1)` on the batch (prefill + one token);
  - E2E: the median time of the full `generate`; TPOT = (E2E - TTFT) / (OUTPUT_LEN - 1);
  - output tokens/s = CONCURRENCY * OUTPUT_LEN / E2E.
The engine's counterpart is `engine run bench/gpu/e2e-cN.yaml --device cuda` (summary.json);
`gpu-check e2e` runs both and compares. Works with transformers 4.4x and 5.x.

usage: python3 bench/gpu/hf_generate_bench.py [--concurrency 1 8 32 128] [--prompt-len 512]
                                              [--output-len 256] [--rounds 1] [--json OUT.json]
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def timed(fn, rounds):
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1, help="timed batches per measurement")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    # rope_theta is accepted by both major versions (5.x folds it into rope_parameters).
    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "prompt_len": args.prompt_len, "output_len": args.output_len, "levels": []}
    print(f"device: {result['device']}  torch {torch.__version__}")
    for c in args.concurrency:
        ids = torch.randint(0, cfg.vocab_size, (c, args.prompt_len), device="cuda")
        mask = torch.ones_like(ids)

        def gen(n):
            with torch.no_grad():
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                               min_new_tokens=n, do_sample=False, pad_token_id=0)

        gen(2)  # warm-up
        ttft = timed(lambda: gen(1), max(args.rounds, 3))
        e2e = timed(lambda: gen(args.output_len), args.rounds)
        tpot = (e2e - ttft) / max(args.output_len - 1, 1)
        level = {"concurrency": c, "output_tokens_per_s": c * args.output_len / e2e,
                 "ttft_ms": ttft * 1e3, "tpot_ms": tpot * 1e3, "e2e_s": e2e}
        result["levels"].append(level)
        print(f"concurrency {c:4d}: {level['output_tokens_per_s']:9.1f} output tok/s  "
              f"TTFT {level['ttft_ms']:8.1f} ms  TPOT {level['tpot_ms']:7.2f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
