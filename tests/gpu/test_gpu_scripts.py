"""The GPU machine's Python side, checked without a GPU (ctest GpuPythonScripts).

Runs with the standard library only: every script compiles; argument parsing; the version gate
(bench/gpu/gpu_python.py); the safetensors reader and writer and the checkpoint check
(tests/gpu/hf_checkpoint.py); hf_compare.py's comparison; report.py's tables on made-up work
folders; and, where SERVELAB_GPU_DUMP_LOGITS names the gpu_dump_logits program, the engine's CPU
executor on checkpoints written as transformers 5 (and 4.x) write them, against an independent
float64 Llama forward (tests/gpu/llama_reference.py), and hf_compare.py end to end on the CPU
with tests/gpu/standin in place of torch, transformers and safetensors. The same end-to-end run
with the real torch and transformers skips, saying so, where they are missing.
"""
import contextlib
import importlib.util
import io
import json
import math
import os
import py_compile
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BENCH = os.path.join(ROOT, "bench", "gpu")
sys.path.insert(0, HERE)
sys.path.insert(0, BENCH)

import gpu_python  # noqa: E402
import hf_checkpoint  # noqa: E402
import hf_compare  # noqa: E402
import hf_generate_bench  # noqa: E402
import llama_reference  # noqa: E402
import report  # noqa: E402
import sdpa_bench  # noqa: E402

DUMP = os.environ.get("SERVELAB_GPU_DUMP_LOGITS")
SCRIPTS = [os.path.join(HERE, f) for f in sorted(os.listdir(HERE)) if f.endswith(".py")] + \
          [os.path.join(BENCH, f) for f in sorted(os.listdir(BENCH)) if f.endswith(".py")]
STANDINS = [os.path.join(HERE, "standin", m, "__init__.py")
            for m in ("torch", "transformers", "safetensors")]


def usage_error(fn, argv):
    """The exit status and stderr of an argparse parser given argv."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            fn(argv)
        except SystemExit as e:
            return e.code, err.getvalue()
    return 0, err.getvalue()


class Compile(unittest.TestCase):
    def test_every_script_compiles(self):
        self.assertGreaterEqual(len(SCRIPTS), 8)
        with tempfile.TemporaryDirectory() as d:
            for path in SCRIPTS + STANDINS:
                with self.subTest(script=os.path.relpath(path, ROOT)):
                    py_compile.compile(path, cfile=os.path.join(d, "x.pyc"), doraise=True)

    def test_scripts_import_torch_only_after_parsing(self):
        # `import torch` at module level would make --help and usage errors need torch.
        for path in SCRIPTS:
            with open(path) as f:
                top = [line for line in f if line.startswith(("import ", "from "))]
            for line in top:
                self.assertNotRegex(line, r"\b(torch|transformers|numpy|safetensors)\b",
                                    f"{os.path.relpath(path, ROOT)}: {line.strip()}")


class Versions(unittest.TestCase):
    def test_parse_version(self):
        self.assertEqual(gpu_python.parse_version("2.11.0+cu130"), (2, 11, 0))
        self.assertEqual(gpu_python.parse_version("5.17.0.dev0"), (5, 17, 0))
        self.assertEqual(gpu_python.parse_version("0.8"), (0, 8, 0))
        self.assertIsNone(gpu_python.parse_version("unknown"))

    def test_verified_versions_pass_silently(self):
        errors, notes = gpu_python.check_versions(
            {"torch": "2.11.0+cu130", "transformers": "5.17.0", "safetensors": "0.8.0"})
        self.assertEqual((errors, notes), ([], []))

    def test_other_supported_versions_pass_with_a_note(self):
        errors, notes = gpu_python.check_versions({"torch": "2.10.1", "transformers": "5.2.0"})
        self.assertEqual(errors, [])
        self.assertEqual(len(notes), 2)
        self.assertIn("2.11.0", notes[0])

    def test_unsupported_or_missing_versions_are_errors(self):
        errors, _ = gpu_python.check_versions(
            {"torch": "2.4.1", "transformers": "4.57.1", "safetensors": None})
        self.assertEqual(len(errors), 3)
        self.assertIn("torch 2.4.1 is not supported", errors[0])
        self.assertIn("transformers 4.57.1 is not supported: expected >= 5.0 and < 6.0", errors[1])
        self.assertIn("safetensors is not importable", errors[2])
        self.assertEqual(len(gpu_python.check_versions({"transformers": "6.0.0"})[0]), 1)

    def test_require_exits_2_naming_a_missing_package(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            with self.assertRaises(SystemExit) as cm:
                gpu_python.require(["json", "servelab_no_such_package"], "t")
        self.assertEqual(cm.exception.code, 2)
        self.assertIn("cannot import servelab_no_such_package", err.getvalue())


class Arguments(unittest.TestCase):
    def test_hf_compare(self):
        exe = sys.executable
        a = hf_compare.parse_args(["--exe", exe])
        self.assertEqual((a.prompts, a.steps, a.engine_devices, a.hf_device),
                         (8, 64, ["cuda", "cpu"], "cuda"))
        a = hf_compare.parse_args(["--exe", exe, "--engine-devices", "cpu", "--hf-device", "cpu"])
        self.assertEqual(a.engine_devices, ["cpu"])
        for argv, says in ((["--exe", exe, "--prompts", "0"], "--prompts: expected 1..64"),
                           (["--exe", exe, "--steps", "0"], "--steps: expected >= 1"),
                           (["--exe", exe, "--engine-devices", "gpu"], "--engine-devices"),
                           (["--exe", exe, "--engine-devices", "cpu,cpu"], "--engine-devices"),
                           (["--exe", "/nonexistent/gpu_dump_logits"], "not an executable"),
                           ([], "--exe")):
            code, err = usage_error(hf_compare.parse_args, argv)
            self.assertEqual(code, 2, argv)
            self.assertIn(says, err)

    def test_hf_compare_never_reuses_a_model_folder(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(hf_compare.parse_args(["--exe", sys.executable, "--keep", d]).keep, d)
            os.mkdir(os.path.join(d, "model"))
            code, err = usage_error(hf_compare.parse_args, ["--exe", sys.executable, "--keep", d])
            self.assertEqual(code, 2)
            self.assertIn("exists", err)

    def test_benchmarks(self):
        a = sdpa_bench.parse_args([])
        self.assertEqual((a.lens, a.iters), ([512, 2048, 8192], 50))
        a = hf_generate_bench.parse_args(["--concurrency", "1", "8", "32", "128", "--rounds", "1",
                                          "--json", "x.json"])
        self.assertEqual((a.concurrency, a.prompt_len, a.output_len), ([1, 8, 32, 128], 512, 256))
        for fn, argv in ((sdpa_bench.parse_args, ["--lens", "0"]),
                         (sdpa_bench.parse_args, ["--iters", "0"]),
                         (hf_generate_bench.parse_args, ["--concurrency", "0"]),
                         (hf_generate_bench.parse_args, ["--output-len", "0"]),
                         (hf_generate_bench.parse_args, ["--prompt-len", "8000"])):
            self.assertEqual(usage_error(fn, argv)[0], 2, argv)

    def test_help_needs_no_torch(self):
        for script in ("tests/gpu/hf_compare.py", "bench/gpu/sdpa_bench.py",
                       "bench/gpu/hf_generate_bench.py"):
            p = subprocess.run([sys.executable, "-B", os.path.join(ROOT, script), "--help"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("usage:", p.stdout)

    def test_the_benchmark_model_is_llama_3_8b(self):
        # bench/gpu/e2e-*.yaml run experiments/catalog/models/Llama-3-8B.yaml: same shape.
        c = hf_generate_bench.llama3_8b_config()
        with open(os.path.join(ROOT, "experiments", "catalog", "models", "Llama-3-8B.yaml")) as f:
            cat = dict(line.split("#")[0].split(":", 1) for line in f
                       if ":" in line and not line.startswith("#"))
        cat = {k.strip(): v.strip() for k, v in cat.items()}
        for ours, theirs in (("hidden_size", "hidden_size"), ("num_hidden_layers", "num_layers"),
                             ("num_attention_heads", "num_heads"),
                             ("num_key_value_heads", "num_kv_heads"), ("head_dim", "head_dim"),
                             ("intermediate_size", "intermediate_size"),
                             ("vocab_size", "vocab_size"), ("rms_norm_eps", "rms_norm_eps"),
                             ("max_position_embeddings", "max_position_embeddings")):
            self.assertEqual(float(c[ours]), float(cat[theirs]), ours)
        self.assertEqual(c["rope_parameters"]["rope_theta"], float(cat["rope_theta"]))
        self.assertEqual(c["tie_word_embeddings"], cat["tie_word_embeddings"] == "true")

    def test_figures(self):
        lvl = hf_generate_bench.level_figures(8, 256, 0.05, 2.6)
        self.assertAlmostEqual(lvl["output_tokens_per_s"], 8 * 256 / 2.6)
        self.assertAlmostEqual(lvl["tpot_ms"], (2.6 - 0.05) / 255 * 1e3)
        self.assertEqual(sdpa_bench.causal_flops(8192), 4.0 * 32 * 8192 * 8192 * 128 / 2)
        self.assertEqual(sdpa_bench.median([3, 1, 2]), 2)


class Safetensors(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpu_scripts_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_bf16_rounds_to_nearest_even(self):
        self.assertEqual(hf_checkpoint.bf16_bits(1.0), 0x3F80)
        self.assertEqual(hf_checkpoint.bf16_bits(1.0 + 2 ** -8), 0x3F80)  # tie: down to even
        self.assertEqual(hf_checkpoint.bf16_bits(1.0 + 3 * 2 ** -8), 0x3F82)  # tie: up to even
        self.assertEqual(hf_checkpoint.bf16_bits(-2.0), 0xC000)
        self.assertTrue(math.isnan(hf_checkpoint.bf16_value(hf_checkpoint.bf16_bits(math.nan))))

    def test_round_trip_and_padding(self):
        path = os.path.join(self.dir, "t.safetensors")
        hf_checkpoint.write_safetensors(path, [("a", [2, 3], [0.5, -1, 2, 3.25, 0, 7]),
                                               ("b", [1], [1.0 + 2 ** -7])], "BF16",
                                        {"format": "pt"})
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
        self.assertEqual(n % 8, 0)
        header = hf_checkpoint.read_header(path)
        self.assertEqual(header[1], {"format": "pt"})
        self.assertEqual(header[0]["a"]["shape"], [2, 3])
        self.assertEqual(hf_checkpoint.read_tensor(path, "a", header), [0.5, -1, 2, 3.25, 0, 7])
        self.assertEqual(hf_checkpoint.read_tensor(path, "b", header), [1.0 + 2 ** -7])
        hf_checkpoint.write_safetensors(path, [("x", [3], [0.1, 0.2, 0.3])], "F32")
        got = hf_checkpoint.read_tensor(path, "x")
        self.assertEqual([round(v, 6) for v in got], [0.1, 0.2, 0.3])

    def test_malformed_files_name_file_and_tensor(self):
        path = os.path.join(self.dir, "bad.safetensors")
        with open(path, "wb") as f:
            f.write((1000).to_bytes(8, "little") + b"{}")
        with self.assertRaisesRegex(hf_checkpoint.CheckpointError, "beyond the file"):
            hf_checkpoint.read_header(path)
        head = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}).encode()
        with open(path, "wb") as f:
            f.write(len(head).to_bytes(8, "little") + head + b"\0" * 8)
        with self.assertRaisesRegex(hf_checkpoint.CheckpointError, "tensor 'w'"):
            hf_checkpoint.read_header(path)

    def test_check_checkpoint_names_what_the_engine_would_miss(self):
        config = tiny_config()
        write_checkpoint(self.dir, config, random_weights(config, 1))
        self.assertEqual(hf_checkpoint.check_checkpoint(self.dir), [])
        # A renamed tensor, a wrong shape, an unsupported activation.
        tensors = random_weights(config, 1)
        tensors[0] = ("model.embed.weight",) + tensors[0][1:]
        tensors[1] = (tensors[1][0], [tensors[1][1][1], tensors[1][1][0]], tensors[1][2])
        write_checkpoint(self.dir, dict(config, hidden_act="gelu"), tensors)
        problems = hf_checkpoint.check_checkpoint(self.dir)
        self.assertEqual(len(problems), 3, problems)
        self.assertIn("hidden_act 'gelu'", problems[0])
        self.assertIn("'model.embed_tokens.weight' is missing", problems[1])
        self.assertIn("'model.layers.0.self_attn.q_proj.weight' has shape [32, 64]", problems[2])

    def test_hf_compare_model_fits_the_cuda_engine(self):
        # The model hf_compare builds: head_dim 64 (the CUDA kernels take 64 and 128), GQA, and a
        # llama3 RoPE the engine parses.
        c = hf_compare.model_config()
        self.assertIn(c["head_dim"], (64, 128))
        self.assertEqual(c["num_attention_heads"] % c["num_key_value_heads"], 0)
        names = [n for n, _ in hf_checkpoint.expected_tensors(c)]
        self.assertEqual(len(names), 2 + 9 * c["num_hidden_layers"] + 1)
        self.assertEqual(names[-1], "lm_head.weight")
        self.assertEqual(hf_compare.init_scale("lm_head.weight", [1024, 256], 256), (0.0, 0.25))
        self.assertEqual(hf_compare.init_scale("model.norm.weight", [256], 256), (1.0, 0.1))
        mean, std = hf_compare.init_scale("model.layers.0.mlp.down_proj.weight", [256, 512], 256)
        self.assertEqual(mean, 0.0)
        self.assertAlmostEqual(std, 512 ** -0.5)


class Comparison(unittest.TestCase):
    RUN = {"tokens": [2, 0], "logits": [[0.0, 1.0, 5.0], [3.0, 2.9, 0.0]]}

    def test_identical(self):
        c = hf_compare.compare_run([[0.0, 1.0, 5.0], [3.0, 2.9, 0.0]], self.RUN, 1e-3)
        self.assertEqual((c["greedy"], c["greedy_equal_steps"], c["margin"]), ("ok", 2, None))
        self.assertEqual(c["logit_error"], 0.0)

    def test_logit_error_is_relative_to_the_largest_logit(self):
        c = hf_compare.compare_run([[0.0, 1.0, 5.1], [3.0, 2.9, 0.0]], self.RUN, 1e-3)
        self.assertAlmostEqual(c["logit_error"], 0.1 / 5.1)

    def test_near_tie_and_divergence(self):
        # Step 1: HF prefers token 1 by 0.05 of a largest logit 3 -> below 2 x 3e-2 x 3: a tie.
        tie = hf_compare.compare_run([[0.0, 1.0, 5.0], [2.95, 3.0, 0.0]], self.RUN, 3e-2)
        self.assertEqual((tie["greedy"], tie["greedy_equal_steps"]), ("tie", 1))
        self.assertAlmostEqual(tie["margin"], 0.05)
        # The same at the CPU's tolerance, and a clear preference anywhere, diverge.
        cpu = hf_compare.compare_run([[0.0, 1.0, 5.0], [2.95, 3.0, 0.0]], self.RUN, 1e-3)
        self.assertEqual(cpu["greedy"], "diverged")
        far = hf_compare.compare_run([[0.0, 6.0, 5.0], [3.0, 2.9, 0.0]], self.RUN, 3e-2)
        self.assertEqual((far["greedy"], far["greedy_equal_steps"]), ("diverged", 0))
        self.assertEqual((far["agree_steps"], far["tie_steps"]), (1, 0))

    def test_every_step_counts_after_a_near_tie(self):
        # Teacher-forced: a clear disagreement after a near-tie still fails, and each step is
        # counted (RUN's tokens are 2 then 0).
        run = {"tokens": [2, 0, 1], "logits": [[0.0, 1.0, 5.0], [3.0, 2.9, 0.0], [0, 4.0, 0]]}
        tie_then_far = hf_compare.compare_run(
            [[0.0, 5.02, 5.0], [3.0, 2.9, 0.0], [0.0, 1.0, 4.0]], run, 3e-2)
        self.assertEqual(tie_then_far["greedy"], "diverged")
        self.assertEqual(tie_then_far["greedy_equal_steps"], 0)
        self.assertEqual((tie_then_far["agree_steps"], tie_then_far["tie_steps"]), (1, 1))
        self.assertAlmostEqual(tie_then_far["margin"], 3.0)
        two_ties = hf_compare.compare_run(
            [[0.0, 5.02, 5.0], [3.0, 2.9, 0.0], [0.0, 1.0, 1.05]], run, 3e-2)
        self.assertEqual(two_ties["greedy"], "tie")
        self.assertEqual((two_ties["agree_steps"], two_ties["tie_steps"]), (1, 2))
        self.assertAlmostEqual(two_ties["margin"], 0.05)

    def test_shape_mismatch_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "reference rows"):
            hf_compare.compare_run([[0.0, 1.0, 5.0]], self.RUN, 1e-3)

    def test_summary(self):
        ok = {"logit_error": 1e-4, "greedy": "ok", "ok": True}
        tie = {"logit_error": 2e-2, "greedy": "tie", "ok": True}
        result = {"engine_devices": ["cuda", "cpu"], "steps": 64,
                  "runs": [{"ok": True, "cuda": ok, "cpu": ok},
                           {"ok": True, "cuda": tie, "cpu": ok}]}
        text, good = hf_compare.summarize(result)
        self.assertTrue(good)
        self.assertIn("cuda: 1/2 prompts x 64 tokens identical (1 near-tie), logit error 2.0e-02",
                      text)
        ok.update(agree_steps=64, tie_steps=0, margin=None)
        tie.update(agree_steps=61, tie_steps=3, margin=0.04)
        self.assertIn("cuda: 1/2 prompts x 64 tokens identical (1 near-tie), 125/128 tokens HF's "
                      "greedy choice (3 near-ties, largest margin 0.040), logit error 2.0e-02",
                      hf_compare.summarize(result)[0])
        result["runs"][1]["ok"] = False
        self.assertFalse(hf_compare.summarize(result)[1])


class Report(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="gpu_report_")

    def tearDown(self):
        shutil.rmtree(self.work)

    def write(self, name, obj):
        path = os.path.join(self.work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))

    def run_report(self, mode):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ok = getattr(report, "report_" + mode)(self.work)
        return ok, out.getvalue()

    def test_bench_targets(self):
        # As kernels_bench writes them: the copy's rate from SetBytesProcessed, decode rows
        # named batch/ctx/kernel (1 pipelined: the target; 0 tiled: reported).
        runs = [{"name": "BM_DeviceCopy/1073741824/manual_time", "bytes_per_second": 4.0e12},
                {"name": "BM_DecodeAttention/64/8192/1/manual_time", "GBps": 3400},
                {"name": "BM_DecodeAttention/64/8192/0/manual_time", "GBps": 1000},
                {"name": "BM_DecodeAttention/1/512/1/manual_time", "GBps": 900},
                {"name": "BM_PrefillAttention/8192/0/manual_time", "TFLOPs": 300},
                {"name": "BM_PrefillAttention/8192/1/manual_time", "TFLOPs": 100}]
        self.write("kernels_bench.json", {"benchmarks": runs})
        self.write("sdpa.json", {"lens": [{"len": 8192, "tflops": 400.0}]})
        ok, text = self.run_report("bench")
        self.assertTrue(ok, text)
        self.assertIn("device-to-device copy: 4000 GB/s", text)
        self.assertRegex(text, r"BM_DecodeAttention/64/8192/1 \(pipelined\)\s+3400 GB/s\s+"
                               r"0.85 of copy\s+PASS")
        self.assertRegex(text, r"BM_DecodeAttention/64/8192/0 \(tiled\) .*0.25 of copy\s+report")
        self.assertIn("0.75 of SDPA (400.0)", text)
        runs.append({"name": "BM_PrefillChunk/16/6144/1/manual_time", "real_time": 1234.0,
                     "time_unit": "ns", "splits": 8})
        runs.append({"name": "BM_DecodeGemm/32/4/1/manual_time", "GBps": 3600.0,
                     "label": "lm_head skinny", "real_time": 262000.0, "time_unit": "ns",
                     "splits": 1, "predicted_us": 250.16})
        runs.append({"name": "BM_PrefillAttention/8192/3/manual_time", "TFLOPs": 320})
        runs.append({"name": "BM_PrefillAttention/8192/4/manual_time", "TFLOPs": 360})
        self.write("kernels_bench.json", {"benchmarks": runs})
        # wgmma, the default over bf16, is held to the target; fa2 and fa2_128 are reported.
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_PrefillAttention/8192/3 \(fa2_128\)\s+320.0 TFLOP/s\s+"
                         r"0.80 of SDPA \(400.0\)\s+report")
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_PrefillAttention/8192/4 \(wgmma\)\s+360.0 TFLOP/s\s+"
                         r"0.90 of SDPA \(400.0\)\s+PASS")
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_PrefillAttention/8192/0 \(fa2\)\s+300.0 TFLOP/s\s+"
                         r"0.75 of SDPA \(400.0\)\s+report")
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_PrefillChunk/16/6144/1 \(fa2 split-KV\)\s+1.2 us\s+8 splits\s+report")
        runs.append({"name": "BM_PrefillChunk/16/6144/2/manual_time", "real_time": 456.0,
                     "time_unit": "ns", "splits": 13})
        self.write("kernels_bench.json", {"benchmarks": runs})
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_PrefillChunk/16/6144/2 \(fa2_gqa split-KV\)\s+0.5 us\s+13 splits\s+"
                         r"report")
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_DecodeGemm/32/4/1 \(lm_head skinny\)\s+3600 GB/s\s+0.90 of copy; "
                         r"262.0 us, 1 splits, model 250.2 us\s+report")
        runs.append({"name": "BM_DecodeGemm/32/1/3/manual_time", "GBps": 3400.0,
                     "label": "o auto skinny", "real_time": 10000.0, "time_unit": "ns",
                     "candidates": 16, "chosen": 2, "split_k": 1, "first_us": 16.0,
                     "lt_us": 14.5, "cublas_us": 15.25, "skinny_us": 10.5, "skinny_splits": 5})
        self.write("kernels_bench.json", {"benchmarks": runs})
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_DecodeGemm/32/1/3 \(o auto skinny\)\s+3400 GB/s\s+0.85 of copy; "
                         r"tuned: lt 14.5, cublas 15.2, skinny 10.5 us \(5 splits\)\s+report")
        runs.append({"name": "BM_SkinnySplits/32/1/4/manual_time", "GBps": 3000.0,
                     "real_time": 11250.0, "time_unit": "ns", "label": "o 4 splits",
                     "splits": 4, "predicted_us": 9.81})
        self.write("kernels_bench.json", {"benchmarks": runs})
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_SkinnySplits/32/1/4 \(o 4 splits\)\s+3000 GB/s\s+0.75 of copy; "
                         r"11.2 us, model 9.8 us\s+report")
        runs.append({"name": "BM_TokenKernels/32/0/manual_time", "real_time": 2345.0,
                     "time_unit": "ns", "label": "rms_norm", "GBps": 330.0})
        self.write("kernels_bench.json", {"benchmarks": runs})
        self.assertRegex(self.run_report("bench")[1],
                         r"BM_TokenKernels/32/0 \(rms_norm\)\s+2.3 us\s+per launch\s+report")
        runs[4]["TFLOPs"] = 200  # fa2 at 0.5x SDPA: reported only
        self.write("kernels_bench.json", {"benchmarks": runs})
        self.assertTrue(self.run_report("bench")[0])
        wgmma = next(r for r in runs if r["name"] == "BM_PrefillAttention/8192/4/manual_time")
        wgmma["TFLOPs"] = 200  # the default at 0.5x SDPA misses the 0.7x target
        self.write("kernels_bench.json", {"benchmarks": runs})
        self.assertFalse(self.run_report("bench")[0])
        # Without SDPA's figure because --skip left sdpa_bench out, nothing is held to it.
        os.remove(os.path.join(self.work, "sdpa.json"))
        self.write("sdpa_bench.log", "gpu-check: sdpa_bench skipped: in --skip (--only '', "
                   "--skip 'sdpa_bench')\n")
        ok, text = self.run_report("bench")
        self.assertTrue(ok, text)
        self.assertRegex(text, r"BM_PrefillAttention/8192/4 \(wgmma\)\s+200.0 TFLOP/s\s+"
                               r"no SDPA figure\s+report")

    def test_prefill_choice_takes_the_fastest_only_when_clearly_faster_than_fa2(self):
        # gpu-check bench: the modes after it run the fastest of fa2, fa2_128 and wgmma at the
        # largest length fa2 ran (a kernel without a row there is skipped); e2e's fp8 KV run the
        # faster of fa2 and wgmma by their rows over an fp8 cache (2 and 5).
        def choice(fa2, wide, wgmma=None, fp8=False, wgmma_error=False, length=8192):
            runs = [{"name": f"BM_PrefillAttention/{length}/0/manual_time", "TFLOPs": fa2},
                    {"name": "BM_PrefillAttention/512/0/manual_time", "TFLOPs": 1},
                    {"name": "BM_PrefillAttention/512/3/manual_time", "TFLOPs": 999},
                    {"name": "BM_PrefillAttention/512/4/manual_time", "TFLOPs": 999},
                    {"name": f"BM_PrefillAttention/{length}/1/manual_time", "TFLOPs": 999},
                    {"name": f"BM_PrefillAttention/{length}/2/manual_time", "TFLOPs": 999}]
            if wide is not None:
                runs.append({"name": f"BM_PrefillAttention/{length}/3/manual_time",
                             "TFLOPs": wide})
            if wgmma is not None:
                runs.append({"name": f"BM_PrefillAttention/{length}/4/manual_time",
                             "TFLOPs": wgmma, "error_occurred": wgmma_error})
            self.write("kernels_bench.json", {"benchmarks": runs})
            return report.prefill_choice(self.work, fp8=fp8)
        self.assertEqual(choice(200, 240), "fa2_128")
        self.assertEqual(choice(200, 203), "fa2")  # within 2 %: keep the default
        self.assertEqual(choice(240, 200), "fa2")
        self.assertEqual(choice(200, None), "fa2")
        self.assertEqual(choice(200, 240, 260), "wgmma")
        self.assertEqual(choice(200, 260, 240), "fa2_128")
        self.assertEqual(choice(200, None, 240), "wgmma")  # fa2_128 without a row: skipped
        self.assertEqual(choice(200, 203, 202), "fa2")
        self.assertEqual(choice(200, 240, 999, wgmma_error=True), "fa2_128")
        # Over fp8 the bf16 rows do not count: fa2's fp8 row is 999 here.
        self.assertEqual(choice(200, 240, 260, fp8=True), "fa2")

        def fp8_choice(fa2, wgmma):
            runs = [{"name": "BM_PrefillAttention/8192/0/manual_time", "TFLOPs": 100},
                    {"name": "BM_PrefillAttention/8192/4/manual_time", "TFLOPs": 500},
                    {"name": "BM_PrefillAttention/8192/2/manual_time", "TFLOPs": fa2}]
            if wgmma is not None:
                runs.append({"name": "BM_PrefillAttention/8192/5/manual_time", "TFLOPs": wgmma})
            self.write("kernels_bench.json", {"benchmarks": runs})
            return report.prefill_choice(self.work, fp8=True)
        self.assertEqual(fp8_choice(160, 210), "wgmma")
        self.assertEqual(fp8_choice(160, 162), "fa2")  # within 2 %
        self.assertEqual(fp8_choice(160, None), "fa2")
        self.assertEqual(fp8_choice(210, 160), "fa2")
        self.assertEqual(choice(0, 240, 260), "default")  # no fa2 figure: nothing to go by
        self.assertEqual(choice(200, 240, 260, length=16384), "wgmma")  # the largest length
        os.remove(os.path.join(self.work, "kernels_bench.json"))
        self.assertEqual(report.prefill_choice(self.work), "default")
        self.assertEqual(report.prefill_choice(self.work, fp8=True), "default")
        # A filtered bench (gpu-check --bench-filter) without the prefill rows: the same.
        self.write("kernels_bench.json", {"benchmarks": [
            {"name": "BM_DeviceCopy/1073741824/manual_time", "bytes_per_second": 4e12},
            {"name": "BM_PrefillChunk/16/6144/2/manual_time", "real_time": 30}]})
        self.assertEqual(report.prefill_choice(self.work), "default")

    def test_pack_choice_turns_packing_off_only_when_it_lost(self):
        # gpu-check bench: SERVELAB_CUDA_PREFILL_PACK=0 for the modes after it only when fa2_gqa
        # (variant 2) took more than 2 % longer on the 16-token chunks after 1,024 and 6,144
        # cached keys than the better of fa2 (1) and wgmma (3); any missing row: keep it on.
        def choice(packed, fa2, wgmma, drop=None):
            runs = []
            for variant, us in (("1", fa2), ("2", packed), ("3", wgmma)):
                for prefix in ("1024", "6144"):
                    name = f"BM_PrefillChunk/16/{prefix}/{variant}"
                    if us is not None and name != drop:
                        runs.append({"name": name + "/manual_time", "real_time": us,
                                     "time_unit": "us"})
            runs.append({"name": "BM_PrefillChunk/64/6144/2/manual_time", "real_time": 1e6})
            self.write("kernels_bench.json", {"benchmarks": runs})
            return report.pack_choice(self.work)
        self.assertEqual(choice(30, 80, 70), "1")
        self.assertEqual(choice(71, 80, 70), "1")  # within 2 %
        self.assertEqual(choice(75, 80, 70), "0")
        self.assertEqual(choice(75, 72, None), "0")  # against fa2 alone
        self.assertEqual(choice(None, 80, 70), "1")
        self.assertEqual(choice(75, 80, 70, drop="BM_PrefillChunk/16/1024/2"), "1")
        os.remove(os.path.join(self.work, "kernels_bench.json"))
        self.assertEqual(report.pack_choice(self.work), "1")
        script = os.path.join(ROOT, "bench", "gpu", "report.py")
        choice(75, 80, 70)
        p = subprocess.run([sys.executable, "-B", script, "pack-choice", self.work],
                           capture_output=True, text=True)
        self.assertEqual((p.returncode, p.stdout), (0, "0\n"), p.stderr)

    def test_prefill_choice_command_line(self):
        # What scripts/gpu-check runs: `report.py prefill-choice [--fp8] WORK`.
        runs = [{"name": "BM_PrefillAttention/8192/0/manual_time", "TFLOPs": 200},
                {"name": "BM_PrefillAttention/8192/3/manual_time", "TFLOPs": 240},
                {"name": "BM_PrefillAttention/8192/4/manual_time", "TFLOPs": 260},
                {"name": "BM_PrefillAttention/8192/2/manual_time", "TFLOPs": 150},
                {"name": "BM_PrefillAttention/8192/5/manual_time", "TFLOPs": 210}]
        self.write("kernels_bench.json", {"benchmarks": runs})
        script = os.path.join(ROOT, "bench", "gpu", "report.py")
        for args, want in ((["prefill-choice"], "wgmma"),
                           (["prefill-choice", "--fp8"], "wgmma")):
            p = subprocess.run([sys.executable, "-B", script] + args + [self.work],
                               capture_output=True, text=True)
            self.assertEqual((p.returncode, p.stdout), (0, want + "\n"), p.stderr)

    def test_gemm_choice_takes_the_fastest_only_when_a_decode_steps_gemms_are_faster(self):
        # gpu-check bench: the modes after it run the linear-layer kernel whose decode-step GEMMs
        # (qkv, o, gate_up, down with SiLU, LM head at M = 1, 8, 32) take the least time in sum:
        # skinny (1), cuBLASLt timed per shape (2) or auto (3), when more than 2 % faster than
        # cuBLAS (0).
        def choice(skinny_us, lt_us=None, drop=None, extra=(), auto_us=None):
            runs = []
            for m in ("1", "8", "32"):
                for shape in ("0", "1", "2", "3", "4", "5"):
                    for kernel, t in (("0", 100.0), ("1", skinny_us), ("2", lt_us),
                                      ("3", auto_us)):
                        if t is not None and (m, shape, kernel) != drop:
                            runs.append({"name": f"BM_DecodeGemm/{m}/{shape}/{kernel}/manual_time",
                                         "real_time": t})
            runs += list(extra)
            self.write("kernels_bench.json", {"benchmarks": runs})
            return report.gemm_choice(self.work)
        self.assertEqual(choice(90.0), "skinny")
        self.assertEqual(choice(99.0), "cublas")  # within 2 %: keep the default
        self.assertEqual(choice(120.0), "cublas")
        self.assertEqual(choice(90.0, drop=("8", "2", "1")), "cublas")  # a figure missing
        self.assertEqual(choice(90.0, drop=("8", "3", "1")), "skinny")  # plain down: not counted
        # cuBLASLt: taken when it is the fastest of the three, past the margin.
        self.assertEqual(choice(120.0, lt_us=90.0), "lt")
        self.assertEqual(choice(85.0, lt_us=90.0), "skinny")
        self.assertEqual(choice(95.0, lt_us=90.0), "lt")
        self.assertEqual(choice(120.0, lt_us=99.0), "cublas")
        # a figure missing: lt is left out, skinny still considered
        self.assertEqual(choice(95.0, lt_us=90.0, drop=("32", "4", "2")), "skinny")
        # auto: taken when its per-shape choice is the fastest in sum, past the margin.
        self.assertEqual(choice(95.0, lt_us=90.0, auto_us=85.0), "auto")
        self.assertEqual(choice(85.0, lt_us=90.0, auto_us=88.0), "skinny")
        self.assertEqual(choice(120.0, auto_us=99.0), "cublas")
        self.assertEqual(choice(120.0, auto_us=90.0, drop=("1", "0", "3")), "cublas")
        # M = 128 (cuBLAS only) does not count, however slow.
        slow = [{"name": "BM_DecodeGemm/128/2/0/manual_time", "real_time": 1e9}]
        self.assertEqual(choice(99.0, extra=slow), "cublas")
        os.remove(os.path.join(self.work, "kernels_bench.json"))
        self.assertEqual(report.gemm_choice(self.work), "cublas")

    def test_tests_skipped_for_time_say_so(self):
        # gpu-check --budget: what it did not run is a failure named as such, not a crash.
        gtest = {"testsuites": [{"testsuite": [{"name": "A", "result": "COMPLETED"}]}]}
        for name in ("gpu_kernels_test", "gpu_executor_test", "engine_run_cuda"):
            self.write(name + ".json", gtest)
        self.write("hf_compare.json", {"ok": True, "summary": "cuda: 8/8 prompts"})
        self.write("sanitizer_memcheck.log", "========= ERROR SUMMARY: 0 errors\n")
        for tool in ("racecheck", "synccheck"):
            self.write(f"sanitizer_{tool}.log",
                       f"gpu-check: sanitizer_{tool} skipped: 12 s left of the 540 s budget\n")
        self.write("steps.tsv", "".join(f"{n}\t0\t5\n" for n in (
            "gpu_kernels_test", "gpu_executor_test", "engine_run_cuda", "hf_compare",
            "sanitizer_memcheck")) + "sanitizer_racecheck\t124\t0\nsanitizer_synccheck\t124\t0\n")
        ok, text = self.run_report("tests")
        self.assertFalse(ok)
        self.assertRegex(text, r"sanitizer_memcheck\s+PASS\s+========= ERROR SUMMARY: 0 errors")
        self.assertRegex(text, r"sanitizer_racecheck\s+FAIL\s+not run: out of time \(--budget\)")
        self.assertRegex(text, r"hf_compare\s+PASS")

    def test_steps_left_out_by_only_are_reported_not_failed(self):
        # gpu-check --only: the steps it left out say so and do not fail the mode; a step
        # skipped for time still does.
        def left_out(name):
            self.write(f"{name}.log", f"gpu-check: {name} skipped: not in --only (engine_c32)\n")
        gtest = {"testsuites": [{"testsuite": [{"name": "A", "result": "COMPLETED"}]}]}
        self.write("gpu_kernels_test.json", gtest)
        for name in ("gpu_executor_test", "engine_run_cuda", "hf_compare", "sanitizer_memcheck",
                     "sanitizer_racecheck", "sanitizer_synccheck"):
            left_out(name)
        self.write("steps.tsv", "gpu_kernels_test\t0\t5\n" + "".join(f"{n}\t124\t0\n" for n in (
            "gpu_executor_test", "engine_run_cuda", "hf_compare", "sanitizer_memcheck",
            "sanitizer_racecheck", "sanitizer_synccheck")))
        ok, text = self.run_report("tests")
        self.assertTrue(ok, text)
        self.assertRegex(text, r"gpu_executor_test\s+SKIP\s+not run: not in --only")
        self.assertRegex(text, r"hf_compare\s+SKIP\s+not run: not in --only")
        self.assertRegex(text, r"sanitizer_synccheck\s+SKIP\s+not run: not in --only")
        self.write("sanitizer_synccheck.log",
                   "gpu-check: sanitizer_synccheck skipped: 12 s left of the 540 s budget\n")
        self.assertFalse(self.run_report("tests")[0])
        # e2e: only engine_c32 and copy_bw ran; no HF baseline, by choice.
        for name in ("engine_c1", "engine_c8", "engine_c128", "engine_c32_eager", "engine_c32_pdl",
                     "engine_c32_auto", "engine_c32_fp8", "hf_generate"):
            left_out(name)
        self.write("copy_bw.json", {"benchmarks": [
            {"name": "BM_DeviceCopy/1073741824/manual_time", "bytes_per_second": 4.0e12}]})
        self.write("engine-c32/summary.json", {"throughput": {"output_tokens_per_s": 4000.0},
                                               "ttft_ms": {"p50": 100.0}, "tpot_ms": {"p50": 6.0}})
        self.write("engine-c32/steps.csv", "prefill_tokens,decode_tokens,duration_ms,"
                   "kv_blocks_used\n0,32,4.5,100\n0,32,4.6,100\n")
        ok, text = self.run_report("e2e")
        self.assertTrue(ok, text)
        self.assertRegex(text, r"\n1\s+not run \(not in --only\)")
        self.assertRegex(text, r"\n32\s+4000\s+-\s+-\s.*no HF \(left out\)")
        self.assertRegex(text, r"graphs off\s+not run \(not in --only\)")
        # --skip reads the same way.
        self.write("hf_generate.log", "gpu-check: hf_generate skipped: in --skip (--only '', "
                   "--skip 'hf_generate')\n")
        self.write("engine_c1.log", "gpu-check: engine_c1 skipped: in --skip (--only '', --skip "
                   "'engine_c1')\n")
        ok, text = self.run_report("e2e")
        self.assertTrue(ok, text)
        self.assertRegex(text, r"\n1\s+not run \(in --skip\)")
        # A run that was meant to run and left nothing still fails.
        os.remove(os.path.join(self.work, "engine_c8.log"))
        self.assertFalse(self.run_report("e2e")[0])

    def test_bench_without_sdpa_figures_misses(self):
        # sdpa_bench ran (it was not left out) and left no figure: the default kernel misses.
        self.write("kernels_bench.json", {"benchmarks": [
            {"name": "BM_PrefillAttention/8192/4/manual_time", "TFLOPs": 300}]})
        ok, text = self.run_report("bench")
        self.assertFalse(ok)
        self.assertIn("no SDPA figure", text)

    def test_decode_step_rows_graphs_eager_pdl_and_auto(self):
        # The decode-only steps at batch 32 of each run against (weights + KV) / copy bandwidth;
        # only the default run ("graphs on") is held to the 1.25x target.
        self.write("copy_bw.json", {"benchmarks": [
            {"name": "BM_DeviceCopy/1073741824/manual_time", "bytes_per_second": 4.0e12}]})

        def steps(folder, ms):
            rows = ["prefill_tokens,decode_tokens,duration_ms,kv_blocks_used"]
            rows += [f"0,32,{t},1000" for t in ms] + ["512,31,40.0,1000", "0,31,1.0,1000"]
            self.write(f"{folder}/steps.csv", "\n".join(rows) + "\n")
        steps("engine-c32", [6.0, 6.2, 5.9])
        self.write("engine-c32/summary.json", {"cuda_graphs": {
            "captures": 0, "replays": 3, "padded_eager_steps": 0, "eager_steps": 2}})
        steps("engine-c32-pdl", [5.5, 5.4, 5.6])
        steps("engine-c32-auto", [5.2, 5.1])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ok = report.report_decode_step(self.work)
        text = out.getvalue()
        # bound = (15.01 GB of weights + 1000 blocks x 2 MiB) / 4000 GB/s = 4.28 ms
        self.assertRegex(text, r"graphs on\s+6.00\s+4.28\s+1.40x\s+3\s+MISS\s+0 *\n")
        self.assertRegex(text, r"graphs on, PDL\s+5.50\s+4.28\s+1.29x\s+3\s+report\s+- *\n")
        self.assertRegex(text, r"graphs on, GEMMs tuned\s+5.20\s+4.28\s+1.22x\s+2\s+report")
        self.assertRegex(text, r"graphs off\s+no result")
        self.assertFalse(ok)
        steps("engine-c32", [5.3])
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertTrue(report.report_decode_step(self.work))

    def test_e2e_speedup_against_hf(self):
        self.write("hf_generate.json", {"levels": [
            hf_generate_bench.level_figures(c, 256, 0.1, 10.0) for c in (1, 8, 32, 128)]})
        for c in (1, 8, 32, 128):
            self.write(f"engine-c{c}/summary.json", {
                "throughput": {"output_tokens_per_s": 11 * c * 25.6},
                "ttft_ms": {"p50": 20.0}, "tpot_ms": {"p50": 5.0}})
        self.write("engine-c32/requests.csv",
                   "id,queueing_ms,ttft_ms\n0,0.5,30.5\n1,100.0,145.0\n2,200.0,212.0\n")
        ok, text = self.run_report("e2e")
        self.assertIn("11.0x", text)
        # c32: TTFT from admission 30.0 (p50 of 30, 45, 12), from arrival 20.0 (the summary's).
        self.assertRegex(text, r"\n32\s+9011\s+\d+\s+11.0x\s+30.0\s+20.0\s")
        self.assertRegex(text, r"\n8\s+\d+\s+\d+\s+11.0x\s+-\s+20.0\s")
        self.assertFalse(ok)  # no steps.csv / copy_bw.json: the decode-step row fails
        self.assertIn("decode step at batch 32", text)
        self.assertIn("fp8 KV at concurrency 32: not run", text)
        self.assertNotIn("HF baseline: FAILED", text)
        self.write("engine-c32-fp8/summary.json", {
            "run": {"num_gpu_blocks": "40000"}, "throughput": {"output_tokens_per_s": 9500.0},
            "ttft_ms": {"p50": 20.0}, "tpot_ms": {"p50": 4.5}})
        self.assertIn("fp8 KV at concurrency 32: 9500 output tok/s (bf16 9011), TPOT p50 4.50 ms "
                      "(bf16 5.00), KV blocks 40000 (bf16 ?)", self.run_report("e2e")[1])
        self.assertIn("async scheduling at concurrency 32: not run", self.run_report("e2e")[1])
        self.assertIn("GEMM choices at concurrency 32: not run (engine-c32-auto)",
                      self.run_report("e2e")[1])
        shape = {"in": 4096, "out": 4096, "tuned": True, "candidates": 8}
        self.write("engine-c32-auto/summary.json", {"gemm_lt": [
            dict(shape, tokens=32, kernel="lt", chosen_us=15.0, cublas_us=20.0, skinny_us=16.0),
            dict(shape, tokens=32, kernel="skinny", chosen_us=12.0, cublas_us=10.0, skinny_us=8.0,
                 skinny_splits=5),
            dict(shape, tokens=32, kernel="cublas", chosen_us=12.0, cublas_us=10.0,
                 skinny_us=11.0),
            dict(shape, tokens=8, kernel="lt", chosen_us=4.0, cublas_us=9.0, skinny_us=5.0)]})
        self.assertIn("GEMM choices at concurrency 32: 4 shapes timed; the 3 at 32 tokens run on "
                      "1 lt, 1 cublas, 1 skinny and take 33.0 us (cuBLAS 40.0 us, 17.5 % less)",
                      self.run_report("e2e")[1])
        self.write("engine-c32-async/summary.json", {
            "throughput": {"output_tokens_per_s": 9800.0}, "tpot_ms": {"p50": 4.7}})
        self.assertIn("async scheduling at concurrency 32: 9800 output tok/s, 12.0x HF (default "
                      "9011), TPOT p50 4.70 ms (default 5.00)", self.run_report("e2e")[1])
        self.assertIn("LoRA, 4 adapters of rank 16, at concurrency 32: not run (engine-c32-lora)",
                      self.run_report("e2e")[1])
        self.write("engine-c32-lora/summary.json", {
            "throughput": {"output_tokens_per_s": 7000.0}, "tpot_ms": {"p50": 6.1}})
        self.assertIn("LoRA, 4 adapters of rank 16, at concurrency 32: 7000 output tok/s (default "
                      "9011), TPOT p50 6.10 ms (default 5.00)", self.run_report("e2e")[1])
        self.write("hf_generate.json", {"ok": False, "levels": []})
        self.assertIn("HF baseline: FAILED", self.run_report("e2e")[1])
        self.assertIn("decode step per kernel class: not run", self.run_report("e2e")[1])
        self.assertIn("serve at concurrency 32 (HTTP, sim bench): not run",
                      self.run_report("e2e")[1])

    def test_serve_beside_engine_run(self):
        self.write("engine-c32/summary.json", {"throughput": {"output_tokens_per_s": 4000.0},
                                               "ttft_ms": {"p50": 100.0},
                                               "tpot_ms": {"p50": 6.0}})
        serve = {"requests": {"completed": 128, "total": 128},
                 "throughput": {"output_tokens_per_s": 3900.0}, "ttft_ms": {"p50": 110.0},
                 "tpot_ms": {"p50": 6.1}}
        self.write("serve-c32/summary.json", serve)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertTrue(report.report_serve(self.work))
        self.assertIn("128/128 finished, 3900 output tok/s (engine run 4000), TTFT p50 110.0 ms "
                      "(engine run 100.0), TPOT p50 6.10 ms (engine run 6.00)", out.getvalue())
        serve["requests"]["completed"] = 127
        self.write("serve-c32/summary.json", serve)
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertFalse(report.report_serve(self.work))

    def test_kernel_breakdown_from_ncu_csv(self):
        # As `ncu --csv --page raw --metrics gpu__time_duration.sum` prints it, between its
        # ==PROF== notes: a header, a units row, one row per kernel. Two layers, two steps.
        rows = ['"ID","Kernel Name","gpu__time_duration.sum"', '"","","usecond"']
        step = [("sm90_xmma_gemm_bf16bf16_bf16f32", "30.0"), ("rms_norm_kernel", "2.0"),
                ("void k::pipelined_decode_kernel<128, false>(P)", "10.0"),
                ("silu_mul_kernel", "3.0"), ("cutlass::Kernel<gemv>", "25.0"),
                ("void k::skinny_gemm_kernel<1, true>(A)", "7.0")]
        for i in range(4):  # 2 steps x 2 layers
            rows += [f'"{i}","{n}","{t}"' for n, t in step]
        rows.append('"99","greedy_sample_kernel","1,000.0"')
        self.write("ncu_decode_step.log", "==PROF== Connected to process 1\n" +
                   "\n".join(rows) + "\n==PROF== Disconnected\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.report_kernel_breakdown(self.work, layers=2)
        text = out.getvalue()
        self.assertIn("25 kernels, 2.0 steps", text)
        # Per step: GEMMs 2 x (30 + 25) = 110 us, attention 20, sampling 500 (1 ms over 2 steps).
        self.assertRegex(text, r"sampling\s+500.0\s+")
        self.assertRegex(text, r"GEMM \(cuBLAS\)\s+110.0\s+")
        self.assertRegex(text, r"GEMM \(skinny\)\s+14.0\s+")
        self.assertRegex(text, r"attention\s+20.0\s+")
        self.assertRegex(text, r"all kernels\s+654.0\s+100 %\s+12")
        self.write("ncu_decode_step.log", "==PROF== No kernels were profiled.\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.report_kernel_breakdown(self.work, layers=2)
        self.assertIn("not run or no ncu figures", out.getvalue())

    def test_tests_mode_reads_hf_compare(self):
        self.write("steps.tsv", "hf_compare\t0\t40\n")
        self.write("hf_compare.json", {"ok": True, "summary": "cuda: 8/8 prompts identical"})
        ok, text = self.run_report("tests")
        self.assertFalse(ok)  # the gtest JSON files are missing
        self.assertRegex(text, r"hf_compare\s+PASS\s+cuda: 8/8 prompts identical")


def tiny_config(**over):
    """A config.json as transformers 5 writes it (rope_theta inside rope_parameters, "dtype")."""
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16",
         "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 96,
         "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "hidden_act": "silu",
         "tie_word_embeddings": False, "transformers_version": "5.17.0",
         "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64}}
    c.update(over)
    return c


def random_weights(config, seed):
    rng = random.Random(seed)
    out = []
    for name, shape in hf_checkpoint.expected_tensors(config):
        mean, std = hf_compare.init_scale(name, shape, config["hidden_size"])
        out.append((name, shape, [rng.gauss(mean, std) for _ in range(math.prod(shape))]))
    return out


def write_checkpoint(model_dir, config, tensors, dtype="BF16"):
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f)
    hf_checkpoint.write_safetensors(os.path.join(model_dir, "model.safetensors"), tensors,
                                    dtype, {"format": "pt"})


@unittest.skipUnless(DUMP and os.access(DUMP, os.X_OK),
                     "SERVELAB_GPU_DUMP_LOGITS does not name the gpu_dump_logits program")
class EngineAgainstReference(unittest.TestCase):
    """The CPU executor on Hugging Face checkpoints against llama_reference.py (float64)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpu_engine_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def engine(self, config, seed, prompts=2, steps=3, tensors=None, dtype="BF16"):
        write_checkpoint(self.dir, config, tensors or random_weights(config, seed), dtype)
        out = os.path.join(self.dir, "dump.json")
        p = subprocess.run([DUMP, self.dir, out, "--device", "cpu", "--prompt-len", "6",
                            "--steps", str(steps), "--prompts", str(prompts)],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            return json.load(f)["runs"]

    def check(self, config, seed):
        runs = self.engine(config, seed)
        path = os.path.join(self.dir, "model.safetensors")
        header = hf_checkpoint.read_header(path)
        weights = {n: hf_checkpoint.read_tensor(path, n, header) for n in header[0]}
        for k, run in enumerate(runs):
            self.assertEqual(len(run["prompt"]), 6 + 5 * k)
            ref = llama_reference.forward(config, weights, run["prompt"] + run["tokens"][:-1])
            c = hf_compare.compare_run(ref[len(run["prompt"]) - 1:], run,
                                       hf_compare.TOLERANCE["cpu"])
            self.assertLess(c["logit_error"], 1e-4, (k, c))
            self.assertEqual(c["greedy"], "ok", (k, c))

    def test_transformers_5_checkpoint_with_llama3_rope(self):
        self.check(tiny_config(), 5)

    def test_transformers_4_checkpoint_tied_with_default_rope(self):
        # 4.x spelling: top-level rope_theta, "torch_dtype", no rope dict; tied LM head.
        config = tiny_config(tie_word_embeddings=True, torch_dtype="bfloat16", rope_theta=10000.0)
        del config["rope_parameters"], config["dtype"]
        self.check(config, 6)

    def test_a_diff_saved_config_gets_llamas_defaults(self):
        # transformers saves the keys that differ from the defaults: without rms_norm_eps,
        # head_dim, num_key_value_heads and tie_word_embeddings the engine must assume
        # LlamaConfig's 1e-6, hidden/heads, heads and false.
        config = tiny_config(num_key_value_heads=4, head_dim=8, rope_parameters={
            "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
        for key in ("rms_norm_eps", "head_dim", "num_key_value_heads", "tie_word_embeddings"):
            del config[key]
        self.check(config, 7)

    def test_a_changed_convention_is_caught(self):
        # Interleaved RoPE pairs (2j, 2j+1) instead of rotate_half: the reference must disagree.
        config = tiny_config()
        runs = self.engine(config, 5, prompts=1, steps=2)
        path = os.path.join(self.dir, "model.safetensors")
        header = hf_checkpoint.read_header(path)
        weights = {n: hf_checkpoint.read_tensor(path, n, header) for n in header[0]}
        saved = llama_reference._rope

        def interleaved(vec, heads, hd, freqs, position):
            out = list(vec)
            for h in range(heads):
                for j in range(hd // 2):
                    c, s = math.cos(position * freqs[j]), math.sin(position * freqs[j])
                    a, b = vec[h * hd + 2 * j], vec[h * hd + 2 * j + 1]
                    out[h * hd + 2 * j], out[h * hd + 2 * j + 1] = a * c - b * s, b * c + a * s
            return out

        llama_reference._rope = interleaved
        try:
            run = runs[0]
            ref = llama_reference.forward(config, weights, run["prompt"] + run["tokens"][:-1])
        finally:
            llama_reference._rope = saved
        c = hf_compare.compare_run(ref[len(run["prompt"]) - 1:], run, 1e-3)
        self.assertGreater(c["logit_error"], 1e-2)

    def test_the_hf_compare_model_loads(self):
        # The shapes hf_compare saves (config as transformers 5 writes it) load in the engine.
        config = dict(hf_compare.model_config(), architectures=["LlamaForCausalLM"],
                      dtype="bfloat16")
        # 2.9M weights: a tiled pool of values, written as F32 to keep the test quick (the BF16
        # path is the other tests').
        pool = [random.Random(8).gauss(0, 0.05) for _ in range(4099)]
        tensors = [(n, shape, (pool * (math.prod(shape) // len(pool) + 1))[:math.prod(shape)])
                   for n, shape in hf_checkpoint.expected_tensors(config)]
        runs = self.engine(config, 8, prompts=1, steps=2, tensors=tensors, dtype="F32")
        self.assertEqual(len(runs[0]["logits"][0]), config["vocab_size"])


STANDIN = os.path.join(HERE, "standin")


@unittest.skipUnless(DUMP and os.access(DUMP, os.X_OK),
                     "SERVELAB_GPU_DUMP_LOGITS does not name the gpu_dump_logits program")
class HfCompareWithStandIns(unittest.TestCase):
    """hf_compare.py end to end on the CPU with tests/gpu/standin in place of torch and
    transformers: the script's own pipeline, the engine's CPU executor, llama_reference.py as
    the model transformers would run."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpu_standin_")
        self.config = os.path.join(self.dir, "tiny.json")
        c = tiny_config()
        with open(self.config, "w") as f:
            json.dump({k: v for k, v in c.items()
                       if k not in ("architectures", "model_type", "dtype",
                                    "transformers_version")}, f)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_script(self, env=None, pythonpath=STANDIN, extra=()):
        keep = os.path.join(self.dir, "keep")
        shutil.rmtree(keep, ignore_errors=True)
        out = os.path.join(self.dir, "r.json")
        if os.path.exists(out):
            os.remove(out)
        e = dict(os.environ, PYTHONPATH=pythonpath, **(env or {}))
        p = subprocess.run([sys.executable, "-B", os.path.join(HERE, "hf_compare.py"), "--exe",
                            DUMP, "--engine-devices", "cpu", "--hf-device", "cpu", "--prompts",
                            "2", "--steps", "4", "--config", self.config, "--keep", keep,
                            "--json", out, *extra], capture_output=True, text=True, env=e)
        result = None
        if os.path.exists(out):
            with open(out) as f:
                result = json.load(f)
        return p, result

    def test_the_pipeline_agrees(self):
        p, result = self.run_script()
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("torch 2.11.0+standin, transformers 5.17.0", p.stdout)
        self.assertTrue(result["ok"])
        # gpu_dump_logits: prompt k has 24 + 5 k tokens.
        self.assertEqual([r["prompt_len"] for r in result["runs"]], [24, 29])
        for r in result["runs"]:
            self.assertEqual((r["cpu"]["greedy"], r["cpu"]["greedy_equal_steps"]), ("ok", 4))
            self.assertLess(r["cpu"]["logit_error"], 1e-4)
        self.assertIn("cpu: 2/2 prompts x 4 tokens identical", result["summary"])
        # report.py's tests mode reads what the script wrote.
        work = os.path.join(self.dir, "keep")
        shutil.copy(os.path.join(self.dir, "r.json"), os.path.join(work, "hf_compare.json"))
        with open(os.path.join(work, "steps.tsv"), "w") as f:
            f.write("hf_compare\t0\t1\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.report_tests(work)
        self.assertRegex(out.getvalue(), r"hf_compare\s+PASS\s+cpu: 2/2 prompts")

    def test_a_disagreeing_reference_fails(self):
        p, result = self.run_script({"STANDIN_LOGIT_OFFSET": "100"})
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertFalse(result["ok"])
        self.assertEqual(result["runs"][0]["cpu"]["greedy"], "diverged")
        self.assertIn("FAILED", p.stdout)

    def test_a_checkpoint_the_engine_cannot_read_stops_before_running(self):
        p, result = self.run_script({"STANDIN_RENAME": "lm_head.weight:output.weight"})
        self.assertEqual(p.returncode, 1)
        self.assertIn("does not fit the engine: tensor 'lm_head.weight' is missing", p.stderr)
        self.assertIsNone(result)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "keep", "cpu.json")))

    def test_an_unsupported_transformers_exits_2(self):
        old = os.path.join(self.dir, "old", "transformers")
        os.makedirs(old)
        with open(os.path.join(old, "__init__.py"), "w") as f:
            f.write('__version__ = "4.57.1"\n')
        p, _ = self.run_script(pythonpath=os.path.dirname(old) + os.pathsep + STANDIN)
        self.assertEqual(p.returncode, 2)
        self.assertIn("transformers 4.57.1 is not supported: expected >= 5.0 and < 6.0",
                      p.stderr)

    def test_cuda_without_a_device_exits_2(self):
        e = dict(os.environ, PYTHONPATH=STANDIN)
        p = subprocess.run([sys.executable, "-B", os.path.join(HERE, "hf_compare.py"), "--exe",
                            DUMP, "--config", self.config], capture_output=True, text=True, env=e)
        self.assertEqual(p.returncode, 2)
        self.assertIn("sees no CUDA device", p.stderr)


DUMP_EMU = os.environ.get("SERVELAB_GPU_DUMP_LOGITS_EMU")


@unittest.skipUnless(DUMP and DUMP_EMU and os.access(DUMP_EMU, os.X_OK),
                     "SERVELAB_GPU_DUMP_LOGITS_EMU does not name gpu_dump_logits over the CUDA "
                     "emulator (a build without CUDA has it)")
class HfCompareOnEmulatedCuda(unittest.TestCase):
    """What `gpu-check tests` judges as HF parity, before a GPU: hf_compare.py with
    --engine-devices cuda,cpu, the CUDA side being the CUDA executor (bf16 weights, activations
    and KV; graphs, the FA2 prefill and pipelined decode kernels) over the emulated kernels, the
    reference the stand-ins' float64 Llama. A head_dim the kernels take (64)."""

    def test_the_bf16_engine_passes_the_parity_check(self):
        with tempfile.TemporaryDirectory() as d:
            config = os.path.join(d, "model.json")
            c = tiny_config(hidden_size=128, num_attention_heads=2, num_key_value_heads=1,
                            head_dim=64, intermediate_size=256, vocab_size=128)
            with open(config, "w") as f:
                json.dump({k: v for k, v in c.items()
                           if k not in ("architectures", "model_type", "dtype",
                                        "transformers_version")}, f)
            # hf_compare runs one --exe for every device: here the emulator's, whose CPU
            # executor is the normal one.
            e = dict(os.environ, PYTHONPATH=STANDIN, STANDIN_CUDA="1")
            out = os.path.join(d, "r.json")
            p = subprocess.run([sys.executable, "-B", os.path.join(HERE, "hf_compare.py"),
                                "--exe", DUMP_EMU, "--engine-devices", "cuda,cpu",
                                "--hf-device", "cpu", "--prompts", "2", "--steps", "6",
                                "--config", config, "--keep", os.path.join(d, "keep"),
                                "--json", out], capture_output=True, text=True, env=e)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(out) as f:
                result = json.load(f)
            self.assertTrue(result["ok"], json.dumps(result, indent=1))
            for r in result["runs"]:
                # bf16 against float64: within the CUDA tolerance, far outside the CPU one's.
                self.assertLess(r["cuda"]["logit_error"], hf_compare.TOLERANCE["cuda"])
                self.assertGreater(r["cuda"]["logit_error"], hf_compare.TOLERANCE["cpu"] / 100)
                self.assertLess(r["cpu"]["logit_error"], hf_compare.TOLERANCE["cpu"])
                self.assertIn(r["cuda"]["greedy"], ("ok", "tie"))


@unittest.skipUnless(DUMP and os.access(DUMP, os.X_OK) and
                     importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"),
                     "needs torch and transformers (and SERVELAB_GPU_DUMP_LOGITS): hf_compare.py "
                     "end to end on the CPU is not run here")
class HfCompareOnCpu(unittest.TestCase):
    def test_cpu_engine_matches_transformers(self):
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, "-B", os.path.join(HERE, "hf_compare.py"),
                                "--exe", DUMP, "--engine-devices", "cpu", "--hf-device", "cpu",
                                "--prompts", "2", "--steps", "4", "--keep", d,
                                "--json", os.path.join(d, "r.json")],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(os.path.join(d, "r.json")) as f:
                self.assertTrue(json.load(f)["ok"])


if __name__ == "__main__":
    unittest.main()
