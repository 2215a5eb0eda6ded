"""servelab.run: the result's summary and DataFrames, overrides and seed."""

import pandas

import servelab
from conftest import ALL_AT_ZERO, BURST_TINY

REQUEST_COLUMNS = ["id", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s",
                   "prompt_tokens", "output_tokens", "cached_tokens", "preemptions",
                   "recomputed_tokens", "queueing_ms", "ttft_ms", "tpot_ms", "e2e_ms", "status",
                   "reason"]
STEP_COLUMNS = ["step", "start_s", "duration_ms", "num_seqs", "prefill_tokens", "decode_tokens",
                "kv_blocks_used", "kv_blocks_free", "kv_blocks_cached", "kv_usage", "waiting",
                "running", "preempted", "swap_out_blocks", "swap_in_blocks", "kv_blocks_allocated",
                "kv_blocks_freed", "kv_blocks_evicted", "kv_blocks_offloaded"]


def test_run_gives_summary_and_dataframes_with_the_documented_columns():
    r = servelab.run(BURST_TINY)
    assert r.summary["run"]["experiment"] == "burst-tiny"
    assert r.summary["requests"]["total"] == 200
    assert r.summary["preemption"]["preemptions"] > 0  # the small pool preempts
    assert isinstance(r.requests, pandas.DataFrame) and isinstance(r.steps, pandas.DataFrame)
    assert list(r.requests.columns) == REQUEST_COLUMNS
    assert list(r.steps.columns) == STEP_COLUMNS
    assert len(r.requests) == 200
    assert len(r.steps) == r.summary["num_steps"]
    assert r.steps["preempted"].sum() == r.summary["preemption"]["preemptions"]
    assert r.schedule is None and r.events is None and r.blocks is None
    assert list(r.files) == ["summary.json", "requests.csv", "steps.csv", "config.yaml"]
    assert "num_gpu_blocks: 64" in r.config


def test_recordings_on_request():
    r = servelab.run(BURST_TINY, record_schedule=True, record_events=True)
    assert list(r.schedule.columns) == ["step", "request", "first_token", "num_tokens", "kind"]
    assert r.schedule["step"].nunique() == r.summary["num_steps"]
    assert list(r.events.columns) == ["time_s", "request", "event", "detail"]
    assert (r.events["event"] == "finish").sum() == 200


def test_overrides_and_seed_act_as_set_and_seed():
    base = servelab.run(BURST_TINY)
    fewer = servelab.run(BURST_TINY, overrides={"workload.num_requests": 50,
                                                "serving.max_num_seqs": 4})
    assert fewer.summary["requests"]["total"] == 50
    assert "max_num_seqs: 4" in fewer.config
    reseeded = servelab.run(BURST_TINY, seed=7)
    assert reseeded.summary["run"]["seed"] == "7"
    assert not reseeded.requests.equals(base.requests)


def test_dict_experiment_runs_like_the_same_yaml(tmp_path):
    r = servelab.run(ALL_AT_ZERO)
    assert r.summary["run"]["experiment"] == "agnostic"
    assert r.summary["requests"]["completed"] == 40
    unnamed = dict(ALL_AT_ZERO)
    del unnamed["name"]
    assert servelab.run(unnamed).summary["run"]["experiment"] == "experiment"


def test_speculative_decoding_summary_carries_the_acceptance_counters():
    # servelab.run of an experiment with speculative_config: vLLM's spec-decode counters in the
    # summary (docs/metrics.md, "Speculative decoding"); absent without speculation.
    spec = dict(ALL_AT_ZERO, serving=dict(ALL_AT_ZERO["serving"], speculative_config={
        "method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": [0.9, 0.6]}))
    on = servelab.run(spec)
    d = on.summary["spec_decode"]
    assert d["num_drafts"] > 0
    assert 0 < d["num_accepted_tokens"] <= d["num_draft_tokens"] <= 3 * d["num_drafts"]
    assert len(d["num_accepted_tokens_per_pos"]) == 3
    assert sum(d["num_accepted_tokens_per_pos"]) == d["num_accepted_tokens"]
    assert d["acceptance_rate"] == d["num_accepted_tokens"] / d["num_draft_tokens"]
    assert d["mean_acceptance_length"] == 1 + d["num_accepted_tokens"] / d["num_drafts"]
    # Position 0 accepts with 0.9, later ones with 0.6 each (after every earlier one).
    first = d["num_accepted_tokens_per_pos"][0] / d["num_drafts"]
    assert 0.8 < first < 0.97
    assert on.summary["requests"]["completed"] == 40
    assert "spec_decode" not in servelab.run(ALL_AT_ZERO).summary
    assert servelab.run(spec).summary["spec_decode"] == d  # deterministic


def test_energy_and_utilization_come_with_the_summary():
    # docs/metrics.md "Energy and utilization": the H100 entry's power model prices every step.
    r = servelab.run(BURST_TINY)
    e, u = r.summary["energy"], r.summary["utilization"]
    assert abs(e["joules"] - (e["busy_joules"] + e["idle_joules"])) < 1e-6
    assert abs(e["average_power_w"] - e["joules"] / r.summary["duration_s"]) < 1e-6
    assert 0 < u["mfu"] < 1 and 0 < u["mbu"] < 1 and 0 < u["busy_fraction"] <= 1
    # One sequence a step: more joules per output token than the 64 seats of the file.
    single = servelab.run(BURST_TINY, overrides={"serving.max_num_seqs": 1})
    assert single.summary["energy"]["joules_per_output_token"] > e["joules_per_output_token"]
