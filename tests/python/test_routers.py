"""Routers written in Python (servelab.register_router) on a cluster of tiny-model replicas."""

import pytest

import servelab
from conftest import BURST_TINY

def cluster(router):
    """Overrides putting burst-tiny behind `router`: three replicas of its tiny model."""
    return {"cluster": {"router": router, "pools": [{"name": "tiny", "count": 3}]}}


class RoundRobin:
    def __init__(self):
        self.next = 0

    def __call__(self, request, replicas):
        choice = self.next % len(replicas)
        self.next = choice + 1
        return choice


def test_python_round_robin_reproduces_the_builtin_byte_for_byte():
    servelab.register_router("py-rr", RoundRobin, description="round-robin in Python")
    builtin = servelab.run(BURST_TINY, overrides=cluster("round_robin"), record_schedule=True)
    assert builtin.summary["cluster"]["replicas"] == 3
    # Twice: each run gets a fresh instance, so the second starts at replica 0 again.
    for _ in range(2):
        python = servelab.run(BURST_TINY, overrides=cluster("py-rr"), record_schedule=True)
        assert sorted(python.files) == sorted(builtin.files)
        for name, data in builtin.files.items():
            assert python.files[name].replace(b"py-rr", b"round_robin") == data, name
    listed = [p for p in servelab.policies() if p["name"] == "py-rr"][0]
    assert listed["kind"] == "router" and listed["python"]
    assert "py-rr" in servelab.policies_text()


def test_python_router_with_parameters_sees_loads_and_prefixes(tmp_path):
    seen = []

    def least_outstanding(request, replicas, params):
        assert [r.replica for r in replicas] == [0, 1, 2]
        assert all(0 <= r.kv_usage <= 1 and 0 < r.kv_blocks_usable <= 64 for r in replicas)
        assert len(request.block_hashes) == request.prompt_tokens // request.block_size
        seen.append((params["scale"], request.block_hashes[:2]))
        return min(range(len(replicas)),
                   key=lambda i: (replicas[i].outstanding, replicas[i].waiting, i))

    servelab.register_router("py-lo", least_outstanding,
                             params={"scale": (1.0, "unused, for the test")})
    exp = tmp_path / "exp.yaml"
    exp.write_text(BURST_TINY.read_text() + "cluster:\n  router: {name: py-lo, scale: 2.5}\n"
                   "  pools: [{name: tiny, count: 3}]\n")
    python = servelab.run(exp)
    builtin = servelab.run(BURST_TINY, overrides=cluster("least_outstanding"))
    assert python.requests.equals(builtin.requests)
    assert {s for s, _ in seen} == {2.5} and len(seen) == 200
    # burst-tiny: half the prompts start with one of 4 shared 40-token prefixes (2 full
    # blocks), so some requests' first two block hashes repeat.
    firsts = [h for _, h in seen if len(h) == 2]
    assert len(set(firsts)) < len(firsts)
    with pytest.raises(servelab.ConfigError, match="scale"):
        servelab.run(BURST_TINY, overrides=cluster({"name": "py-lo", "scale": "far"}))


def test_bad_routers_stop_the_run_naming_the_router():
    servelab.register_router("py-far", lambda request, replicas: len(replicas))
    with pytest.raises(servelab.PolicyError,
                       match=r"router 'py-far': returned 3, expected an index into the 3 "
                             r"candidate replicas \(0 to 2\)"):
        servelab.run(BURST_TINY, overrides=cluster("py-far"))
    servelab.register_router("py-text", lambda request, replicas: "0")
    with pytest.raises(servelab.PolicyError, match=r"router 'py-text'.*an int.*'0'"):
        servelab.run(BURST_TINY, overrides=cluster("py-text"))
    servelab.register_router("py-bool", lambda request, replicas: True)
    with pytest.raises(servelab.PolicyError, match=r"router 'py-bool'"):
        servelab.run(BURST_TINY, overrides=cluster("py-bool"))
    servelab.register_router("py-raise", lambda request, replicas: 1 // 0)
    with pytest.raises(servelab.PolicyError,
                       match=r"(?s)router 'py-raise': raised ZeroDivisionError.*Traceback"):
        servelab.run(BURST_TINY, overrides=cluster("py-raise"))

    class Broken:
        def __init__(self):
            raise ValueError("no state")

        def __call__(self, request, replicas):
            return 0

    servelab.register_router("py-ctor", Broken)
    with pytest.raises(servelab.PolicyError, match=r"router 'py-ctor': raised ValueError: no state"):
        servelab.run(BURST_TINY, overrides=cluster("py-ctor"))
    with pytest.raises(servelab.ConfigError, match="built-in"):
        servelab.register_router("round_robin", RoundRobin)


def test_python_router_in_a_compare():
    servelab.register_router("py-rr2", RoundRobin)
    g = servelab.compare(BURST_TINY, overrides=cluster("round_robin"),
                         variants={"builtin": {}, "python": {"cluster.router": "py-rr2"}})
    assert g.runs["python"].requests.equals(g.runs["builtin"].requests)
    assert g.table["ttft_p99_ms"][0] == g.table["ttft_p99_ms"][1]


def test_python_router_routes_both_stages_of_a_pd_cluster():
    calls = []

    class Counting(RoundRobin):
        def __call__(self, request, replicas):
            calls.append((id(self), len(replicas)))
            return super().__call__(request, replicas)

    servelab.register_router("py-rr-pd", Counting)
    pd = {"pools": [{"name": "p", "count": 2, "role": "prefill"},
                    {"name": "d", "count": 3, "role": "decode"}]}
    builtin = servelab.run(BURST_TINY, overrides={"cluster": dict(pd, router="round_robin")})
    python = servelab.run(BURST_TINY, overrides={
        "cluster": dict(pd, router="py-rr-pd", decode_router="py-rr-pd")})
    assert python.requests.equals(builtin.requests)
    # One instance per stage: arrivals over the two prefill replicas, prefilled requests over
    # the three decode replicas.
    by_instance = {}
    for instance, n in calls:
        by_instance.setdefault(instance, set()).add(n)
    assert sorted(map(sorted, by_instance.values())) == [[2], [3]]
