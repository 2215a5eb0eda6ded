#!/usr/bin/env python3
"""End-to-end parity with Hugging Face transformers (a GPU machine with torch and transformers
4.4x or 5.x; `gpu-check tests` runs it from the bundle).

1. Builds a randomly initialised LlamaForCausalLM (head_dim 64, GQA 2:1, Llama-3 RoPE scaling),
   weights scaled as the engine's random weights are (projections N(0, 1/in), embeddings N(0, 1),
   LM head N(0, 16/hidden): logits with a spread of a few units), saved as bf16 safetensors +
   config.json (transformers 5 writes rope_parameters, 4.x rope_scaling; the engine reads both).
2. Runs gpu_dump_logits on it with --device cuda and --device cpu: P prompts (the engine's own
   ids), each with S greedy tokens and the logits of every step.
3. Runs the same model in transformers (fp32 on the GPU) and checks, for every prompt:
     - logits, teacher-forced on prompt + the engine's tokens:
         CPU engine (fp32):  max |engine - HF| / max(1, max |logit|) <= 1e-3
         CUDA engine (bf16): max |engine - HF| / max(1, max |logit|) <= 3e-2
       (bf16 keeps 8 bits of mantissa: each rounding is ~4e-3 relative, and a logit is the sum
       of a few hundred rounded products, so a few 1e-3 of the largest logit is the expected
       spread; 3e-2 leaves margin without hiding a wrong kernel, whose errors are O(1));
     - greedy tokens: the CUDA engine's tokens equal HF's own greedy generation (fp32) for all
       S steps. A step whose HF top-2 margin is below 2 x the bf16 tolerance x max(1, max|logit|)
       is a near-tie that bf16 may break either way: a divergence that starts there is reported
       as a tie and does not fail the check; any other divergence does.
Writes a JSON summary with --json. Exit status 0 when everything agrees, 1 otherwise.

usage: python3 tests/gpu/hf_compare.py --exe BUNDLE/bin/gpu_dump_logits [--prompts 8]
                                       [--steps 64] [--json OUT.json] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

CPU_TOL, CUDA_TOL = 1e-3, 3e-2
MAJOR = int(transformers.__version__.split(".")[0])


def make_config():
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}
    common = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1024,
                  max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False)
    if MAJOR >= 5:
        return LlamaConfig(rope_parameters=dict(rope, rope_theta=500000.0), **common)
    return LlamaConfig(rope_theta=500000.0, rope_scaling=rope, **common)


def make_model(path):
    cfg = make_config()
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
    model.to(torch.bfloat16).save_pretrained(path)


def dump(exe, model_dir, device, prompts, steps, out):
    subprocess.run([exe, model_dir, out, "--device", device, "--steps", str(steps),
                    "--prompts", str(prompts)], check=True)
    with open(out) as f:
        return json.load(f)["runs"]


def load_fp32(model_dir):
    kw = {"dtype": torch.float32} if MAJOR >= 5 else {"torch_dtype": torch.float32}
    return LlamaForCausalLM.from_pretrained(model_dir, **kw).cuda().eval()


def logit_error(hf, prompt, run):
    ids = torch.tensor([prompt + run["tokens"][:-1]], device="cuda")
    with torch.no_grad():
        ref = hf(ids).logits[0, len(prompt) - 1:].float().cpu()
    mine = torch.tensor(run["logits"])
    scale = torch.clamp(ref.abs().amax(dim=1, keepdim=True), min=1.0)
    return ((mine - ref).abs() / scale).max().item()


def greedy_check(hf, prompt, tokens):
    """(equal steps, 'ok' | 'tie' | 'diverged', margin at the first difference)."""
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=len(tokens),
                          min_new_tokens=len(tokens), do_sample=False, output_scores=True,
                          return_dict_in_generate=True, pad_token_id=0)
    ref = out.sequences[0, len(prompt):].tolist()
    for step, (a, b) in enumerate(zip(ref, tokens)):
        if a != b:
            scores = out.scores[step][0].float()
            top2 = torch.topk(scores, 2).values
            margin = (top2[0] - top2[1]).item()
            tie = margin < 2 * CUDA_TOL * max(1.0, scores.abs().max().item())
            return step, "tie" if tie else "diverged", margin
    return len(tokens), "ok", None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True, help="the gpu_dump_logits program")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--keep", help="directory to keep the model and dumps in")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="hf_compare_")
    os.makedirs(work, exist_ok=True)
    model_dir = os.path.join(work, "model")
    make_model(model_dir)
    gpu = dump(args.exe, model_dir, "cuda", args.prompts, args.steps, os.path.join(work, "cuda.json"))
    cpu = dump(args.exe, model_dir, "cpu", args.prompts, args.steps, os.path.join(work, "cpu.json"))
    hf = load_fp32(model_dir)

    result = {"transformers": transformers.__version__, "torch": torch.__version__,
              "prompts": args.prompts, "steps": args.steps,
              "tolerance": {"cpu": CPU_TOL, "cuda": CUDA_TOL}, "runs": []}
    ok = True
    for k, (g, c) in enumerate(zip(gpu, cpu)):
        assert g["prompt"] == c["prompt"], "CPU and CUDA dumps disagree on the prompt ids"
        err_cpu = logit_error(hf, c["prompt"], c)
        err_gpu = logit_error(hf, g["prompt"], g)
        equal, verdict, margin = greedy_check(hf, g["prompt"], g["tokens"])
        good = err_cpu <= CPU_TOL and err_gpu <= CUDA_TOL and verdict != "diverged"
        ok &= good
        result["runs"].append({"prompt_len": len(g["prompt"]), "cpu_logit_error": err_cpu,
                               "cuda_logit_error": err_gpu, "greedy_equal_steps": equal,
                               "greedy": verdict, "margin_at_difference": margin, "ok": good})
        print(f"prompt {k} (len {len(g['prompt'])}): logits cpu {err_cpu:.2e} cuda {err_gpu:.2e}; "
              f"greedy {equal}/{len(g['tokens'])} equal ({verdict}"
              + (f", HF top-2 margin {margin:.3f}" if margin is not None else "") + ")")
    identical = sum(r["greedy"] == "ok" for r in result["runs"])
    worst_gpu = max(r["cuda_logit_error"] for r in result["runs"])
    worst_cpu = max(r["cpu_logit_error"] for r in result["runs"])
    result["ok"] = ok
    result["summary"] = (f"{identical}/{len(gpu)} prompts x {args.steps} tokens identical; "
                         f"logit error cuda {worst_gpu:.1e} (tol {CUDA_TOL:g}), "
                         f"cpu {worst_cpu:.1e} (tol {CPU_TOL:g})")
    print(result["summary"])
    print("OK" if ok else "FAILED", f"(files in {work})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
