#!/usr/bin/env python3
"""Replays published end-to-end vLLM runs through `sim run` and reports the simulator's error.

    experiments/validation/e2e/replay.py [--sim PATH] [--fit] [--check]

Source: Lambda Labs' vllm-benchmark, Llama-3-8B-Instruct on one H100 SXM, vLLM 0.5.4, ShareGPT,
all N requests at t = 0, N = 10 ... 640 (docs/e2e-sources.md #1; the experiment file
lambda-h100-vllm054.yaml; the per-request lengths and the published summaries in
lambda-h100-vllm054/). Metrics are computed from the simulated requests.csv the way vLLM
0.5.4's benchmark_serving.py computed the published ones:
  - throughput: output tokens / duration, duration = the last request's finish (all arrive at 0);
  - TTFT p50: median over all requests, where a request whose published output length is 0 (an
    empty generation: the client recorded TTFT 0) counts 0, as the client counted it;
  - TPOT p50: median over requests with more than one output token of
    (E2E - TTFT) / (output tokens - 1).
The host time of a step (fixed and per sequence) and the API server's per-request time belong to
vLLM 0.5.4 and its host CPU, not to the GPU, so they are fitted here, on the TRAIN runs only; the
errors that matter are those of the HELD_OUT runs. The fitted values live in
lambda-h100-vllm054/host-fit.json; --fit refits them (Nelder-Mead on the mean squared log error
of the three metrics, about two minutes), --check recomputes the table and compares it with
lambda-h100-vllm054/errors.json (exit 1 on a difference), as tests/CMakeLists.txt runs it.
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
DATA = os.path.join(HERE, "lambda-h100-vllm054")
EXPERIMENT = os.path.join(HERE, "lambda-h100-vllm054.yaml")
TRAIN = [10, 40, 160, 640]  # even positions of the sorted N, as the Vidur fit splits tokens
HELD_OUT = [20, 80, 320]
METRICS = ["throughput", "ttft_p50", "tpot_p50"]


def run_sim(sim, n, host, workdir):
    """Runs the N-prompt replay with host-time settings `host` (a dict, possibly empty)."""
    out = os.path.join(workdir, "run-%d" % n)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sim, "run", EXPERIMENT, "--quiet", "--out", out,
           "--set", "workload.path=lambda-h100-vllm054/np%d.csv" % n]
    if "step_us" in host:
        cmd += ["--set", "cost_model.step_overhead_us=%.6g" % host["step_us"],
                "--set", "cost_model.sequence_overhead_us=%.6g" % host["sequence_us"]]
    if host.get("frontend_us", 0) > 0:
        cmd += ["--set", "serving.frontend.per_request_us=%.6g" % host["frontend_us"],
                "--set", "serving.frontend.per_prompt_token_us=%.6g" % host["frontend_token_us"]]
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "requests.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    shutil.rmtree(out)
    return rows


def published_lengths(n):
    with open(os.path.join(DATA, "np%d.csv" % n), newline="") as f:
        return [int(r["published_output_tokens"]) for r in csv.DictReader(f)]


def metrics(rows, lengths):
    """The published metrics' definitions applied to simulated requests (see the docstring)."""
    assert len(rows) == len(lengths), "the replay lost requests"
    rows = sorted(rows, key=lambda r: int(r["id"]))
    duration = max(float(r["finish_s"]) for r in rows)
    ttfts, tpots = [], []
    for r, published in zip(rows, lengths):
        if r["status"] != "finished":
            raise SystemExit("request %s did not finish: %s" % (r["id"], r["status"]))
        ttft_ms = float(r["ttft_ms"])
        ttfts.append(0.0 if published == 0 else ttft_ms)
        if published > 1:
            tpots.append((float(r["e2e_ms"]) - ttft_ms) / (published - 1))
    return {"throughput": sum(lengths) / duration, "ttft_p50": statistics.median(ttfts),
            "tpot_p50": statistics.median(tpots)}


def measured(n):
    with open(os.path.join(DATA, "measured.json")) as f:
        m = json.load(f)[str(n)]
    return {"throughput": m["output_throughput"], "ttft_p50": m["median_ttft_ms"],
            "tpot_p50": m["median_tpot_ms"]}


def errors(sim, host, ns, workdir):
    table = {}
    for n in ns:
        got = metrics(run_sim(sim, n, host, workdir), published_lengths(n))
        want = measured(n)
        table[n] = {k: {"sim": got[k], "measured": want[k], "error": got[k] / want[k] - 1}
                    for k in METRICS}
    return table


def nelder_mead(f, x0, step, iterations=80):
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


def fit(sim, workdir):
    # Parameters in log space: step (us), per sequence (us), front end per request and per
    # prompt token (us).
    def host_of(x):
        return {"step_us": math.exp(x[0]), "sequence_us": math.exp(x[1]),
                "frontend_us": math.exp(x[2]), "frontend_token_us": math.exp(x[3])}

    def loss(x):
        t = errors(sim, host_of(x), TRAIN, workdir)
        return statistics.mean(math.log1p(t[n][k]["error"]) ** 2 for n in TRAIN for k in METRICS)

    x, v = nelder_mead(loss, [math.log(2000), math.log(40), math.log(2000), math.log(5)],
                       [0.7, 0.7, 0.7, 0.7], iterations=120)
    h = host_of(x)
    return {k: float("%.3g" % v) for k, v in h.items()}, v


def markdown(before, after, host):
    lines = ["host time fitted on N = %s: step %.3g us, per sequence %.3g us; front end %.3g us "
             "per request + %.3g us per prompt token" % (
                 ", ".join(map(str, TRAIN)), host["step_us"], host["sequence_us"],
                 host["frontend_us"], host["frontend_token_us"]), "",
             "| N | set | measured tok/s | sim tok/s (error) | measured TTFT p50 ms | sim (error) "
             "| measured TPOT p50 ms | sim (error) | before: tok/s, TTFT, TPOT errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n in sorted(after):
        a, b = after[n], before[n]
        cell = lambda m, k: "%.1f (%+.1f %%)" % (m[k]["sim"], 100 * m[k]["error"])
        lines.append("| %d | %s | %.1f | %s | %.1f | %s | %.2f | %s | %+.1f / %+.1f / %+.1f %% |" % (
            n, "train" if n in TRAIN else "held out", a["throughput"]["measured"],
            cell(a, "throughput"), a["ttft_p50"]["measured"], cell(a, "ttft_p50"),
            a["tpot_p50"]["measured"], cell(a, "tpot_p50"),
            100 * b["throughput"]["error"], 100 * b["ttft_p50"]["error"],
            100 * b["tpot_p50"]["error"]))
    held = [after[n][k]["error"] for n in HELD_OUT for k in METRICS]
    lines.append("")
    for k in METRICS:
        e = [abs(after[n][k]["error"]) for n in HELD_OUT]
        lines.append("held out, %s: mean |error| %.1f %%, max %.1f %%" % (
            k, 100 * statistics.mean(e), 100 * max(e)))
    del held
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sim", default=os.path.join(HERE, "..", "..", "..", "build", "release",
                                                 "sim", "sim"))
    p.add_argument("--fit", action="store_true", help="refit the host time on the TRAIN runs")
    p.add_argument("--check", action="store_true",
                   help="compare the recomputed errors with lambda-h100-vllm054/errors.json")
    a = p.parse_args()
    fit_file = os.path.join(DATA, "host-fit.json")
    errors_file = os.path.join(DATA, "errors.json")
    workdir = tempfile.mkdtemp(prefix="servelab-e2e-")
    try:
        if a.fit:
            host, loss = fit(a.sim, workdir)
            with open(fit_file, "w") as f:
                json.dump({"host": host, "train": TRAIN, "train_loss": loss}, f, indent=1)
                f.write("\n")
        with open(fit_file) as f:
            host = json.load(f)["host"]
        ns = sorted(TRAIN + HELD_OUT)
        before = errors(a.sim, {}, ns, workdir)
        after = errors(a.sim, host, ns, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    table = {"host": host, "before": {str(n): v for n, v in before.items()},
             "fitted": {str(n): v for n, v in after.items()}}
    print(markdown(before, after, host))
    if a.check:
        with open(errors_file) as f:
            want = json.load(f)
        bad = []
        for part in ("before", "fitted"):
            for n, row in want[part].items():
                for k, v in row.items():
                    got = table[part][n][k]["error"]
                    if abs(got - v["error"]) > 5e-4:
                        bad.append("%s N=%s %s: %.4f, recorded %.4f" % (part, n, k, got,
                                                                       v["error"]))
        if bad:
            print("\n".join(["errors differ from " + errors_file + ":"] + bad), file=sys.stderr)
            return 1
        print("matches " + errors_file)
    elif a.fit:
        with open(errors_file, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
