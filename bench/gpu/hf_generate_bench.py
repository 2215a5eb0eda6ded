#!/usr/bin/env python3
"""Hugging Face transformers `generate` baseline for the engine's end-to-end throughput:
a Llama-3-8B-shaped LlamaForCausalLM with random bf16 weights, CONCURRENCY prompts of 512 random
tokens batched together (left padding), 256 new tokens each (min_new_tokens = max_new_tokens, so
no early stop), greedy. Prints output tokens/s. The engine's counterpart is
`engine run bench/gpu/e2e-cN.yaml --device cuda` (summary.json output throughput); the target is
engine >= 10x HF at concurrency >= 32 (docs/gpu-todo.md).

usage: python3 bench/gpu/hf_generate_bench.py --concurrency 1 8 32 128 [--rounds 2]
"""
import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2, help="batches per concurrency level")
    args = ap.parse_args()
    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
                      torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for c in args.concurrency:
        ids = torch.randint(0, cfg.vocab_size, (c, args.prompt_len), device="cuda")
        mask = torch.ones_like(ids)
        model.generate(input_ids=ids[:, :16], attention_mask=mask[:, :16], max_new_tokens=4,
                       do_sample=False)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.rounds):
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.output_len,
                           min_new_tokens=args.output_len, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        dt = time.perf_counter() - start
        toks = c * args.output_len * args.rounds
        print(f"concurrency {c:4d}: {toks / dt:9.1f} output tok/s ({dt:.1f} s)")


if __name__ == "__main__":
    main()
