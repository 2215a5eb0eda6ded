#!/usr/bin/env python3
"""Replays published end-to-end vLLM runs through `sim run` and reports the simulator's error.

    experiments/validation/e2e/replay.py [--sim PATH] [--source NAME] [--fit] [--check]
    experiments/validation/e2e/replay.py --write-blis-traces

Two sources (docs/e2e-sources.md, docs/validation.md section 7), each an experiment file here and
a folder with the published numbers:
  lambda  Lambda Labs' vllm-benchmark: Llama-3-8B-Instruct, 1x H100 SXM, vLLM 0.5.4 (V0),
          ShareGPT with every request's lengths recorded, all N requests at t = 0,
          N = 10 ... 640 (lambda-h100-vllm054.yaml, lambda-h100-vllm054/).
  blis    BLIS's ground truth: Llama-2-7B, 1x H100 SXM, vLLM 0.15.1 (V1), inference-perf at a
          constant rate, shared-prefix prompts repeating per session, fixed output lengths,
          five stages at 5-20 req/s (blis-h100-vllm0151.yaml, blis-h100-vllm0151/).
Metrics follow each source's client:
  lambda (vLLM benchmark_serving): throughput = output tokens / duration (the last finish; all
    arrive at 0); TTFT p50 = median over all requests, a request whose published output length
    is 0 (an empty generation, recorded with TTFT 0) counting 0 as the client counted it;
    TPOT p50 = median over requests with more than one output token of (E2E - TTFT) / (out - 1).
  blis (inference-perf): throughput = completed requests / s (below saturation it follows the
    arrival rate; reported for completeness); TTFT p50 = median TTFT; TPOT = (E2E mean - TTFT
    mean) / (output tokens - 1), derived from the published means because inference-perf's own
    TPOT and ITL count tokens that arrive in pairs (docs/e2e-sources.md #2, caveats).
Host time (a step's fixed part and its part per sequence) and the API server's time per request
and per prompt token belong to the vLLM version and its host CPU, not to the GPU, so they are
fitted per source, on the TRAIN runs only (even positions of the runs sorted by load, as the
Vidur fit splits token counts); the errors that matter are those of the HELD_OUT runs. --fit
refits (Nelder-Mead on the mean squared log error of the three metrics over the TRAIN runs) and
writes FOLDER/host-fit.json and FOLDER/errors.json; --check recomputes the table with the stored
fit and compares it with FOLDER/errors.json (exit 1 on a difference), as ctest runs it.
Only the Python standard library is used.
"""
import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
METRICS = ["throughput", "ttft_p50", "tpot_p50"]


def sim_run(sim, experiment, sets, host, workdir):
    """One `sim run` with `--set` overrides and host-time settings; returns requests.csv rows."""
    out = os.path.join(workdir, "run")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sim, "run", experiment, "--quiet", "--out", out]
    for s in sets:
        cmd += ["--set", s]
    if host:
        cmd += ["--set", "cost_model.step_overhead_us=%.6g" % host["step_us"],
                "--set", "cost_model.sequence_overhead_us=%.6g" % host["sequence_us"],
                "--set", "serving.frontend.per_request_us=%.6g" % host["frontend_us"],
                "--set", "serving.frontend.per_prompt_token_us=%.6g" % host["frontend_token_us"]]
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "requests.csv"), newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["id"]))
    shutil.rmtree(out)
    for r in rows:
        if r["status"] != "finished":
            raise SystemExit("request %s did not finish: %s" % (r["id"], r["status"]))
    return rows


class Lambda:
    name = "lambda"
    folder = os.path.join(HERE, "lambda-h100-vllm054")
    experiment = os.path.join(HERE, "lambda-h100-vllm054.yaml")
    train = ["10", "40", "160", "640"]
    held_out = ["20", "80", "320"]

    def sets(self, run):
        return ["workload.path=lambda-h100-vllm054/np%s.csv" % run]

    def metrics(self, run, rows):
        with open(os.path.join(self.folder, "np%s.csv" % run), newline="") as f:
            lengths = [int(r["published_output_tokens"]) for r in csv.DictReader(f)]
        assert len(rows) == len(lengths), "the replay lost requests"
        duration = max(float(r["finish_s"]) for r in rows)
        ttfts, tpots = [], []
        for r, published in zip(rows, lengths):
            ttft_ms = float(r["ttft_ms"])
            ttfts.append(0.0 if published == 0 else ttft_ms)
            if published > 1:
                tpots.append((float(r["e2e_ms"]) - ttft_ms) / (published - 1))
        return {"throughput": sum(lengths) / duration, "ttft_p50": statistics.median(ttfts),
                "tpot_p50": statistics.median(tpots)}

    def measured(self, run):
        with open(os.path.join(self.folder, "measured.json")) as f:
            m = json.load(f)[run]
        return {"throughput": m["output_throughput"], "ttft_p50": m["median_ttft_ms"],
                "tpot_p50": m["median_tpot_ms"]}


class Blis:
    name = "blis"
    folder = os.path.join(HERE, "blis-h100-vllm0151")
    experiment = os.path.join(HERE, "blis-h100-vllm0151.yaml")
    # Rates 5, 8 (even positions of 5, 6, 8, 10, 20, less the 20 req/s stage: the roofline
    # saturates there at any host time, docs/validation.md section 7, so it cannot inform a
    # host-time fit and is reported held out).
    train = ["codegen-s0", "general-s0"]
    held_out = ["roleplay-s0", "codegen-s1", "general-s1"]  # rates 6, 10, 20

    def stages(self):
        with open(os.path.join(self.folder, "stages.json")) as f:
            return json.load(f)

    def sets(self, run):
        return ["workload.path=blis-h100-vllm0151/%s.csv" % run]

    def metrics(self, run, rows):
        st = self.stages()[run]
        last_arrival = max(float(r["arrival_s"]) for r in rows)
        ttft = [float(r["ttft_ms"]) for r in rows]
        e2e = [float(r["e2e_ms"]) for r in rows]
        return {"throughput": len(rows) / last_arrival if last_arrival > 0 else 0.0,
                "ttft_p50": statistics.median(ttft),
                "tpot_p50": (statistics.mean(e2e) - statistics.mean(ttft)) /
                            (st["output_tokens"] - 1)}

    def measured(self, run):
        st = self.stages()[run]
        return {"throughput": st["published"]["achieved_rps"],
                "ttft_p50": st["published"]["ttft_median_ms"],
                "tpot_p50": (st["published"]["e2e_mean_ms"] - st["published"]["ttft_mean_ms"]) /
                            (st["output_tokens"] - 1)}

    def write_traces(self):
        """Each stage's trace in ServeLab's format: request i belongs to session i mod S, whose
        prompt is its group's system prompt (content id = group) followed by the session's own
        question (content id 1000 + session), arriving every 1/rate s."""
        for run, st in self.stages().items():
            sessions = st["groups"] * st["users_per_group"]
            n = int(round(st["rate"] * st["duration_s"]))
            step_ns = round(1e9 / st["rate"])
            question = st["prompt_tokens"] - st["system_prompt_tokens"]
            with open(os.path.join(self.folder, run + ".csv"), "w", newline="") as f:
                f.write("arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n")
                for i in range(n):
                    s = i % sessions
                    g = s // st["users_per_group"]
                    f.write("%d,%d,%d,0,0,%d:0:%d;%d:0:%d\n" % (
                        i * step_ns, st["prompt_tokens"], st["output_tokens"], g,
                        st["system_prompt_tokens"], 1000 + s, question))


SOURCES = {"lambda": Lambda(), "blis": Blis()}


def errors(sim, src, host, runs, workdir):
    table = {}
    for run in runs:
        got = src.metrics(run, sim_run(sim, src.experiment, src.sets(run), host, workdir))
        want = src.measured(run)
        table[run] = {k: {"sim": got[k], "measured": want[k], "error": got[k] / want[k] - 1}
                      for k in METRICS}
    return table


def nelder_mead(f, x0, step, iterations):
    """Minimises f from x0 (a list) with initial simplex steps `step`; deterministic."""
    pts = [list(x0)] + [[x + (step[i] if i == j else 0) for j, x in enumerate(x0)]
                        for i in range(len(x0))]
    vals = [f(p) for p in pts]
    for _ in range(iterations):
        order = sorted(range(len(pts)), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centre = [sum(p[j] for p in pts[:-1]) / (len(pts) - 1) for j in range(len(x0))]
        worst = pts[-1]
        refl = [c + (c - w) for c, w in zip(centre, worst)]
        fr = f(refl)
        if fr < vals[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centre, worst)]
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centre, worst)]
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                for i in range(1, len(pts)):
                    pts[i] = [b + 0.5 * (p - b) for b, p in zip(pts[0], pts[i])]
                    vals[i] = f(pts[i])
    best = min(range(len(pts)), key=lambda i: vals[i])
    return pts[best], vals[best]


def fit(sim, src, workdir):
    # Parameters in log space: step (us), per sequence (us), front end per request and per
    # prompt token (us).
    def host_of(x):
        return {"step_us": math.exp(x[0]), "sequence_us": math.exp(x[1]),
                "frontend_us": math.exp(x[2]), "frontend_token_us": math.exp(x[3])}

    def loss(x):
        t = errors(sim, src, host_of(x), src.train, workdir)
        return statistics.mean(math.log1p(t[r][k]["error"]) ** 2 for r in src.train
                               for k in METRICS)

    x, v = nelder_mead(loss, [math.log(2000), math.log(40), math.log(2000), math.log(5)],
                       [0.7, 0.7, 0.7, 0.7], iterations=120)
    return {k: float("%.3g" % v) for k, v in host_of(x).items()}, v


def markdown(src, before, after, host):
    lines = ["%s: host time fitted on %s: step %.3g us, per sequence %.3g us; front end %.3g us "
             "per request + %.3g us per prompt token" % (
                 src.name, ", ".join(src.train), host["step_us"], host["sequence_us"],
                 host["frontend_us"], host["frontend_token_us"]), "",
             "| run | set | measured throughput | sim (error) | measured TTFT p50 ms | sim (error) "
             "| measured TPOT ms | sim (error) | catalogue host time: errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for run in src.train + src.held_out:
        a, b = after[run], before[run]

        def cell(k):
            return "%.4g (%+.1f %%)" % (a[k]["sim"], 100 * a[k]["error"])
        lines.append("| %s | %s | %.4g | %s | %.4g | %s | %.4g | %s | %+.1f / %+.1f / %+.1f %% |" % (
            run, "train" if run in src.train else "held out", a["throughput"]["measured"],
            cell("throughput"), a["ttft_p50"]["measured"], cell("ttft_p50"),
            a["tpot_p50"]["measured"], cell("tpot_p50"), 100 * b["throughput"]["error"],
            100 * b["ttft_p50"]["error"], 100 * b["tpot_p50"]["error"]))
    lines.append("")
    for k in METRICS:
        e = [abs(after[r][k]["error"]) for r in src.held_out]
        lines.append("held out, %s: mean |error| %.1f %%, max %.1f %%" % (
            k, 100 * statistics.mean(e), 100 * max(e)))
    return "\n".join(lines)


def replay(sim, src, do_fit, check, workdir):
    fit_file = os.path.join(src.folder, "host-fit.json")
    errors_file = os.path.join(src.folder, "errors.json")
    if do_fit:
        host, loss = fit(sim, src, workdir)
        with open(fit_file, "w") as f:
            json.dump({"host": host, "train": src.train, "train_loss": loss}, f, indent=1)
            f.write("\n")
    with open(fit_file) as f:
        host = json.load(f)["host"]
    runs = src.train + src.held_out
    before = errors(sim, src, {}, runs, workdir)
    after = errors(sim, src, host, runs, workdir)
    table = {"host": host, "before": before, "fitted": after}
    print(markdown(src, before, after, host))
    if check:
        with open(errors_file) as f:
            want = json.load(f)
        bad = []
        for part in ("before", "fitted"):
            for run, row in want[part].items():
                for k, v in row.items():
                    got = table[part][run][k]["error"]
                    if abs(got - v["error"]) > 5e-4:
                        bad.append("%s %s %s: %.4f, recorded %.4f" % (part, run, k, got,
                                                                     v["error"]))
        if bad:
            print("\n".join(["errors differ from " + errors_file + ":"] + bad), file=sys.stderr)
            return 1
        print("matches " + errors_file)
    elif do_fit:
        with open(errors_file, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sim", default=os.path.join(HERE, "..", "..", "..", "build", "release",
                                                 "sim", "sim"))
    p.add_argument("--source", choices=sorted(SOURCES), action="append",
                   help="which source (default: all)")
    p.add_argument("--fit", action="store_true", help="refit the host time on the TRAIN runs")
    p.add_argument("--check", action="store_true",
                   help="compare the recomputed errors with FOLDER/errors.json")
    p.add_argument("--write-blis-traces", action="store_true",
                   help="regenerate blis-h100-vllm0151/*.csv from stages.json and exit")
    a = p.parse_args()
    if a.write_blis_traces:
        Blis().write_traces()
        return 0
    workdir = tempfile.mkdtemp(prefix="servelab-e2e-")
    try:
        rc = 0
        for name in a.source or sorted(SOURCES):
            rc |= replay(a.sim, SOURCES[name], a.fit, a.check, workdir)
            print()
        return rc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
