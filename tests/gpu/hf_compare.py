#!/usr/bin/env python3
"""End-to-end agreement with Hugging Face transformers (GPU machine with torch + transformers).

1. Builds a randomly initialised LlamaForCausalLM (head_dim 64, GQA 2:1, Llama-3 RoPE scaling),
   with weights scaled as the engine's random weights are (projections N(0, 1/in), embeddings
   N(0, 1), LM head N(0, 16/hidden)) so logits have a spread of a few units, and saves it as
   safetensors (bf16) + config.json.
2. Runs build/.../tests/gpu_dump_logits on it with --device cuda and --device cpu: the prompt
   ids the engine uses, its greedy tokens and the logits of every step.
3. Runs the same model in transformers (fp32, on the GPU) teacher-forced on prompt + the engine's
   tokens and compares:
     - CPU engine logits vs HF fp32: |diff| <= 1e-3 * max(1, max |logit|)  (fp32 vs fp32)
     - CUDA engine logits vs HF fp32: |diff| <= 3e-2 * max(1, max |logit|)  (bf16 tolerance)
     - HF greedy generation from the prompt equals the CUDA engine's tokens for >= 32 steps
       (up to the first step whose HF top-2 margin is below 0.1, which is reported).
Exit status 0 when everything agrees, 1 otherwise.

usage: python3 tests/gpu/hf_compare.py [--build build/h4] [--steps 40] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make_model(path):
    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1024,
                      max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=500000.0,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 1024},
                      tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(1234)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.normal_(0, 1)
            elif "lm_head" in name:
                p.normal_(0, 4 / cfg.hidden_size ** 0.5)
            else:
                p.normal_(0, 1 / p.shape[1] ** 0.5)
    model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    return cfg


def dump(build, model_dir, device, steps, out):
    exe = os.path.join(build, "tests", "gpu_dump_logits")
    subprocess.run([exe, model_dir, out, "--device", device, "--steps", str(steps)], check=True)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/h4")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--keep", help="directory to keep the model and dumps in")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="hf_compare_")
    os.makedirs(work, exist_ok=True)
    model_dir = os.path.join(work, "model")
    make_model(model_dir)
    gpu = dump(args.build, model_dir, "cuda", args.steps, os.path.join(work, "cuda.json"))
    cpu = dump(args.build, model_dir, "cpu", args.steps, os.path.join(work, "cpu.json"))
    assert gpu["prompt"] == cpu["prompt"]

    hf = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).cuda().eval()
    prompt = gpu["prompt"]
    ok = True
    for name, run, tol in (("cpu", cpu, 1e-3), ("cuda", gpu, 3e-2)):
        ids = torch.tensor([prompt + run["tokens"][:-1]], device="cuda")
        with torch.no_grad():
            logits = hf(ids).logits[0, len(prompt) - 1:].float().cpu()
        mine = torch.tensor(run["logits"])
        scale = torch.clamp(logits.abs().amax(dim=1, keepdim=True), min=1.0)
        worst = ((mine - logits).abs() / scale).max().item()
        print(f"{name}: max |engine - HF| / max(1, max|logit|) = {worst:.2e} (tolerance {tol:g})")
        ok &= worst <= tol

    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=args.steps,
                          do_sample=False, output_scores=True, return_dict_in_generate=True)
    hf_tokens = out.sequences[0, len(prompt):].tolist()
    agree = 0
    for step, (a, b) in enumerate(zip(hf_tokens, gpu["tokens"])):
        top2 = torch.topk(out.scores[step][0].float(), 2).values
        if a != b:
            margin = (top2[0] - top2[1]).item()
            print(f"greedy: first difference at step {step} (HF top-2 margin {margin:.3f})")
            break
        agree += 1
    print(f"greedy: {agree} of {len(hf_tokens)} steps equal (need >= 32)")
    ok &= agree >= min(32, args.steps)
    print("OK" if ok else "FAILED", f"(files in {work})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
