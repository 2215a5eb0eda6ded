#!/usr/bin/env python3
"""End-to-end parity with Hugging Face transformers 5 (`gpu-check tests` runs it from the bundle;
checked against torch 2.11 and transformers 5.17: docs/gpu-todo.md).

1. Builds a randomly initialised LlamaForCausalLM (head_dim 64, GQA 2:1, Llama-3 RoPE scaling in
   `rope_parameters`), weights scaled as the engine's random weights are (projections N(0, 1/in),
   embeddings N(0, 1), LM head N(0, 16/hidden): logits with a spread of a few units), and saves it
   with save_pretrained in bf16: config.json (transformers 5 writes "dtype" and rope_theta inside
   "rope_parameters") and model.safetensors. Before anything runs, tests/gpu/hf_checkpoint.py
   checks that the files hold every tensor the engine loads, by name and shape.
2. Runs gpu_dump_logits on it for each engine device (--engine-devices, default cuda,cpu): P
   prompts (the engine's own ids), each with S greedy tokens and the logits of every step.
3. Loads the checkpoint back with from_pretrained(dtype=float32, attn_implementation="eager"),
   checks that it holds exactly the saved weights, and runs it teacher-forced on prompt + the
   engine's tokens (one forward per prompt and device, fp32, TF32 off). For every prompt:
     - logits: max |engine - HF| / max(1, max |HF logit|) over the steps and the vocabulary,
         CPU engine (fp32) <= 1e-3, CUDA engine (bf16) <= 3e-2
       (bf16 keeps 8 bits of mantissa: each rounding is ~4e-3 relative, and a logit is the sum
       of a few hundred rounded products, so a few 1e-3 of the largest logit is the expected
       spread; 3e-2 leaves margin without hiding a wrong kernel, whose errors are O(1));
     - greedy tokens: HF's greedy choice at step s is the argmax of its logits after the engine's
       first s tokens, so the first step where that argmax differs from the engine's token is
       where HF's own greedy generation would leave the engine's. Every engine token, at every
       step (teacher-forced, the steps after a difference are still comparable), must equal it,
       except where HF's margin between its choice and the engine's token is below 2 x the
       device's tolerance x max(1, max |logit|): a near-tie that the engine's precision may break
       either way, reported as "tie" and not failed. The summary counts the tokens that are HF's
       choice over all prompts and steps.
   generate() is not used here: with min_new_tokens it masks the EOS id (2, LlamaConfig's
   default) until the last step, so HF would refuse a token the engine may rightly pick.
Writes a JSON summary with --json. Exit status: 0 everything agrees, 1 a check failed, 2 bad usage
or a missing / unsupported package or device.

usage: python3 tests/gpu/hf_compare.py --exe BUNDLE/bin/gpu_dump_logits [--prompts 8]
           [--steps 64] [--engine-devices cuda,cpu] [--hf-device cuda] [--config MODEL.json]
           [--json OUT.json] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "gpu"))
import hf_checkpoint  # noqa: E402
import gpu_python  # noqa: E402

SCRIPT = "hf_compare"
TOLERANCE = {"cpu": 1e-3, "cuda": 3e-2}


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="hf_compare.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--exe", required=True, help="the gpu_dump_logits program")
    ap.add_argument("--prompts", type=int, default=8, help="prompts, 1..64 (default 8)")
    ap.add_argument("--steps", type=int, default=64, help="greedy tokens per prompt (default 64)")
    ap.add_argument("--engine-devices", default="cuda,cpu",
                    help="engine devices to compare, comma-separated from cuda, cpu")
    ap.add_argument("--hf-device", default="cuda", choices=("cuda", "cpu"),
                    help="where transformers runs the fp32 reference (default cuda)")
    ap.add_argument("--config", help="a JSON file of LlamaConfig arguments to use instead of the "
                                     "built-in model (model_config())")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--keep", help="directory to keep the model and dumps in (its model/ must not "
                                   "exist yet)")
    args = ap.parse_args(argv)
    if args.config:
        try:
            with open(args.config) as f:
                args.config = json.load(f)
        except (OSError, ValueError) as e:
            ap.error(f"--config: {e}")
        missing = [k for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads", "vocab_size") if k not in args.config]
        if missing:
            ap.error(f"--config: missing {', '.join(missing)}")
    else:
        args.config = model_config()
    if not 1 <= args.prompts <= 64:
        ap.error(f"--prompts: expected 1..64, got {args.prompts}")
    if args.steps < 1:
        ap.error(f"--steps: expected >= 1, got {args.steps}")
    devices = [d for d in args.engine_devices.split(",") if d]
    if not devices or any(d not in TOLERANCE for d in devices) or len(set(devices)) != len(devices):
        ap.error(f"--engine-devices: expected a comma-separated list of cuda, cpu; got "
                 f"'{args.engine_devices}'")
    args.engine_devices = devices
    if not os.access(args.exe, os.X_OK):
        ap.error(f"--exe: {args.exe} is not an executable file")
    if args.keep and os.path.exists(os.path.join(args.keep, "model")):
        ap.error(f"--keep: {os.path.join(args.keep, 'model')} exists; remove it or choose another "
                 f"directory")
    return args


def model_config():
    """LlamaConfig's arguments (transformers 5 names): a tiny Llama-3-style model."""
    return dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=64, vocab_size=1024, max_position_embeddings=4096,
                rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_act="silu",
                attention_bias=False, mlp_bias=False,
                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 1024})


def init_scale(name, shape, hidden):
    """(mean, std) of a parameter's random init, as the engine draws its random weights
    (engine/llama_weights.cc random_tensor_params)."""
    if len(shape) == 1:
        return (1.0 if name.endswith("norm.weight") else 0.0), 0.1
    if "embed_tokens" in name:
        return 0.0, 1.0
    if name.startswith("lm_head"):
        return 0.0, 4.0 / hidden ** 0.5
    return 0.0, 1.0 / shape[1] ** 0.5


def compare_run(ref, run, tol):
    """One prompt on one engine device against HF's teacher-forced logits.

    ref: one list of vocab floats per step (HF after prompt + the engine's first s tokens);
    run: {"tokens": [...], "logits": [[...], ...]} from gpu_dump_logits.
    Returns {"logit_error", "greedy_equal_steps" (steps before the first difference),
    "agree_steps" (steps whose token is HF's choice), "tie_steps", "greedy": ok|tie|diverged
    (tie: every difference is a near-tie), "margin" (HF's largest margin over the differences,
    None without one)}.
    """
    tokens, mine = run["tokens"], run["logits"]
    if not (len(ref) == len(tokens) == len(mine)):
        raise ValueError(f"compare_run: {len(ref)} reference rows, {len(tokens)} tokens, "
                         f"{len(mine)} logit rows")
    error, equal, verdict, margin = 0.0, len(tokens), "ok", None
    agree = ties = 0
    for step, (r, m, token) in enumerate(zip(ref, mine, tokens)):
        if len(r) != len(m):
            raise ValueError(f"compare_run: step {step}: {len(m)} engine logits, {len(r)} HF")
        scale = max(1.0, max(abs(x) for x in r))
        error = max(error, max(abs(a - b) for a, b in zip(m, r)) / scale)
        best = max(range(len(r)), key=r.__getitem__)
        if best == token:
            agree += 1
            continue
        equal = min(equal, step)
        gap = r[best] - r[token]
        margin = gap if margin is None else max(margin, gap)
        if gap < 2 * tol * scale:
            ties += 1
            verdict = "tie" if verdict == "ok" else verdict
        else:
            verdict = "diverged"
    return {"logit_error": error, "greedy_equal_steps": equal, "agree_steps": agree,
            "tie_steps": ties, "greedy": verdict, "margin": margin}


def summarize(result):
    """The one-line summary and the verdict of a result dict (runs filled in)."""
    ok = all(r["ok"] for r in result["runs"])
    parts = []
    for dev in result["engine_devices"]:
        rows = [r[dev] for r in result["runs"]]
        same = sum(r["greedy"] == "ok" for r in rows)
        ties = sum(r["greedy"] == "tie" for r in rows)
        worst = max(r["logit_error"] for r in rows)
        text = (f"{dev}: {same}/{len(rows)} prompts x {result['steps']} tokens identical"
                + (f" ({ties} near-tie)" if ties else ""))
        if all("agree_steps" in r for r in rows):
            agree = sum(r["agree_steps"] for r in rows)
            tie_steps = sum(r["tie_steps"] for r in rows)
            margins = [r["margin"] for r in rows if r.get("margin") is not None]
            text += (f", {agree}/{len(rows) * result['steps']} tokens HF's greedy choice"
                     + (f" ({tie_steps} near-ties, largest margin {max(margins):.3f})"
                        if tie_steps and margins else ""))
        parts.append(text + f", logit error {worst:.1e} (tol {TOLERANCE[dev]:g})")
    return "; ".join(parts), ok


def run_dump(exe, model_dir, device, prompts, steps, out):
    cmd = [exe, model_dir, out, "--device", device, "--steps", str(steps), "--prompts",
           str(prompts)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"{SCRIPT}: error: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr.strip()}",
              file=sys.stderr)
        sys.exit(2 if p.returncode == 2 else 1)
    with open(out) as f:
        return json.load(f)["runs"]


def make_model(torch, transformers, config, path):
    """Saves a random bf16 LlamaForCausalLM of LlamaConfig(**config) to `path`; returns its state
    dict (bf16, on the CPU)."""
    cfg = transformers.LlamaConfig(**config)
    torch.manual_seed(1234)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            mean, std = init_scale(name, list(p.shape), cfg.hidden_size)
            p.normal_(mean, std)
    model = model.to(torch.bfloat16)
    model.save_pretrained(path)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    mods = gpu_python.require(["torch", "transformers", "safetensors"], SCRIPT)
    torch, transformers = mods["torch"], mods["transformers"]
    if args.hf_device == "cuda" or "cuda" in args.engine_devices:
        gpu_python.require_cuda(torch, SCRIPT)
    torch.set_float32_matmul_precision("highest")  # the reference is fp32: no TF32 GEMMs
    work = args.keep or tempfile.mkdtemp(prefix="hf_compare_")
    os.makedirs(work, exist_ok=True)
    model_dir = os.path.join(work, "model")
    saved = make_model(torch, transformers, args.config, model_dir)
    problems = hf_checkpoint.check_checkpoint(model_dir)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    print(f"{SCRIPT}: config.json dtype {config.get('dtype', config.get('torch_dtype'))}, "
          f"rope {hf_checkpoint.rope_parameters(config)}; files {sorted(os.listdir(model_dir))}")
    if problems:
        for p in problems:
            print(f"{SCRIPT}: error: the saved checkpoint does not fit the engine: {p}",
                  file=sys.stderr)
        return 1
    dumps = {d: run_dump(args.exe, model_dir, d, args.prompts, args.steps,
                         os.path.join(work, f"{d}.json")) for d in args.engine_devices}

    hf = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                       attn_implementation="eager")
    hf = hf.to(args.hf_device).eval()
    loaded = hf.state_dict()
    for name, _ in hf_checkpoint.expected_tensors(config):
        if name not in loaded or not torch.equal(loaded[name].to("cpu", torch.bfloat16),
                                                 saved[name]):
            print(f"{SCRIPT}: error: from_pretrained did not load '{name}' as saved",
                  file=sys.stderr)
            return 1

    def reference(ids, first):
        with torch.no_grad():
            out = hf(input_ids=torch.tensor([ids], device=args.hf_device), use_cache=False)
        return out.logits[0, first:].float().cpu().tolist()

    result = {"transformers": transformers.__version__, "torch": torch.__version__,
              "hf_device": args.hf_device, "hf_attention": "eager", "prompts": args.prompts,
              "steps": args.steps, "engine_devices": args.engine_devices,
              "tolerance": {d: TOLERANCE[d] for d in args.engine_devices}, "runs": []}
    first = dumps[args.engine_devices[0]]
    for k in range(len(first)):
        prompt = first[k]["prompt"]
        row = {"prompt_len": len(prompt), "ok": True}
        for dev in args.engine_devices:
            run = dumps[dev][k]
            if run["prompt"] != prompt:
                print(f"{SCRIPT}: error: the {dev} dump's prompt {k} differs from the "
                      f"{args.engine_devices[0]} dump's", file=sys.stderr)
                return 1
            ref = reference(prompt + run["tokens"][:-1], len(prompt) - 1)
            c = compare_run(ref, run, TOLERANCE[dev])
            c["ok"] = c["logit_error"] <= TOLERANCE[dev] and c["greedy"] != "diverged"
            row[dev] = c
            row["ok"] &= c["ok"]
        result["runs"].append(row)
        print(f"prompt {k} (len {len(prompt)}): " + "; ".join(
            f"{d} logits {row[d]['logit_error']:.2e}, greedy {row[d]['greedy_equal_steps']}/"
            f"{args.steps} ({row[d]['greedy']}"
            + (f", HF margin {row[d]['margin']:.3f}" if row[d]["margin"] is not None else "") + ")"
            for d in args.engine_devices))
    result["summary"], result["ok"] = summarize(result)
    print(result["summary"])
    print("OK" if result["ok"] else "FAILED", f"(files in {work})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
