"""The simulated cluster (src/chunklab/topology/): replicas behind a router and prefill/decode
disaggregation on one virtual clock. Fast, exact: no timing-dependent assert."""
import dataclasses
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunklab.tracking.naming import run_name

from chunklab.app import run_experiment
from chunklab.topology.links import LinkModel, SharedLinks
from chunklab.topology.phases import PHASES, phase_seconds
from chunklab.topology.simulated import simulate_cluster
from chunklab.topology.routers import ROUTERS, make_router
from chunklab.config import ConfigError, RouterConfig
from chunklab.engine.replay import replay
from chunklab.engine.sequence import Request
from chunklab.experiments.compose import compose_run_config
from chunklab.metrics.isolation import IsolatedLatency, with_slowdown
from chunklab.metrics.records import record
from chunklab.runner import engine_for, execute, simulated_cluster
from chunklab.workload import make_requests

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "outputs/profiles/machine.json"  # the committed tables' machine: no calibration, the same numbers anywhere
BASE = ["engine=simulated", f"engine.profile={PROFILE}", "tracking=none", "tracking.progress=false",
        "workload.num_requests=40"]
DISAGG = ["topology=disaggregated", "topology.prefill=2", "topology.decode=2"]


@pytest.fixture(scope="module")
def cfgs():
    """Composed once (Hydra costs ~0.3 s a config); tests vary them with dataclasses.replace."""
    return {"single": compose_run_config(BASE), "replicas": compose_run_config([*BASE, "topology=replicas"]),
            "disaggregated": compose_run_config([*BASE, *DISAGG])}


def with_(cfg, **groups):
    """cfg with fields of its groups replaced: with_(cfg, topology={"replicas": 3}, router={"name": "x"})."""
    return dataclasses.replace(cfg, **{g: dataclasses.replace(getattr(cfg, g), **v) for g, v in groups.items()})


# -- one replica is the engine of before ---------------------------------------------------------

def test_one_instance_reproduces_the_replay_of_one_engine(cfgs, tmp_path):
    """topology=single (and replicas=1) through the cluster clock: every record and every step equal
    to replay() of one engine, the path every committed sim_* output was made by."""
    cfg = with_(cfgs["single"], workload={"num_requests": 120, "rate_per_s": 12.0})
    requests, _ = make_requests(cfg.workload, cfg.model)
    engine, _ = engine_for(cfg.serving)
    engine.warmup()
    old = replay(engine, requests)
    old_records = with_slowdown([record(s) for s in old.sequences], IsolatedLatency.measure(engine, requests))
    for topology in ({"name": "single"}, {"name": "replicas", "replicas": 1}):
        new = execute(with_(cfg, topology=topology), slowdown=True)
        assert new.records == old_records
        assert new.result.makespan_s == old.makespan_s
        old.steps.write_csv(tmp_path / "old.csv")
        new.result.steps.write_csv(tmp_path / "new.csv")
        assert (tmp_path / "old.csv").read_bytes() == (tmp_path / "new.csv").read_bytes()
    assert old.steps.arrays()["num_preempted"].sum() >= 0 and len(old.steps) > 100


# -- routers on hand-built state -----------------------------------------------------------------

class Stub:
    def __init__(self, requests, tokens):
        self.requests, self.tokens = requests, tokens

    def outstanding_requests(self):
        return self.requests

    def outstanding_tokens(self):
        return self.tokens


REQ = Request(0, 0.0, (1,) * 8, 4)


def test_every_router_is_registered_and_chosen_by_name():
    assert set(ROUTERS) == {"round_robin", "least_outstanding_requests", "least_outstanding_tokens", "power_of_two"}
    assert make_router(RouterConfig(name="round_robin", decode="least_outstanding_tokens"), decode=True).name == \
        "least_outstanding_tokens"
    with pytest.raises(ConfigError, match="router.name='fastest'"):
        make_router(RouterConfig(name="fastest"))


def test_round_robin_cycles_whatever_the_load():
    router = make_router(RouterConfig(name="round_robin"))
    loads = [Stub(9, 9000), Stub(0, 0), Stub(5, 50)]
    assert [router.choose(loads, REQ) for _ in range(5)] == [0, 1, 2, 0, 1]


def test_least_outstanding_requests_and_tokens_price_instances_differently():
    loads = [Stub(1, 3000), Stub(4, 200), Stub(1, 2500), Stub(4, 200)]
    assert make_router(RouterConfig(name="least_outstanding_requests")).choose(loads, REQ) == 0  # first of the ties
    assert make_router(RouterConfig(name="least_outstanding_tokens")).choose(loads, REQ) == 1  # first of the ties


def test_power_of_two_takes_the_less_loaded_of_two_seeded_draws():
    loads = [Stub(n, 0) for n in (5, 2, 7, 2, 9, 0)]
    router = make_router(RouterConfig(name="power_of_two", seed=7))
    rng = random.Random(7)
    for _ in range(30):
        a, b = rng.sample(range(len(loads)), 2)
        expected = b if loads[b].requests < loads[a].requests else a
        assert router.choose(loads, REQ) == expected
    pair = [Stub(3, 0), Stub(1, 0)]
    assert {make_router(RouterConfig(name="power_of_two", seed=s)).choose(pair, REQ) for s in range(10)} == {1}


def test_an_instance_reports_prefill_to_compute_plus_kv_in_use(cfgs):
    cluster = simulated_cluster(with_(cfgs["replicas"], topology={"replicas": 2}).serving)
    inst = cluster.instances[0]
    block = inst.engine.block_manager.block_size
    inst.add(Request(1, 0.0, (1,) * 100, 4))
    inst.add(Request(2, 0.0, (1,) * 50, 4))
    assert (inst.outstanding_tokens(), inst.outstanding_requests()) == (150, 2)
    inst.step(0.0)  # both prompts prefilled in one step (budget 512): their KV in use, nothing left to compute
    assert inst.outstanding_tokens() == (-(-100 // block) + -(-50 // block)) * block
    assert inst.outstanding_requests() == 2 and cluster.instances[1].outstanding_tokens() == 0


# -- determinism ---------------------------------------------------------------------------------

@pytest.mark.parametrize("topology", ["replicas", "disaggregated"])
def test_two_runs_write_byte_identical_files(cfgs, tmp_path, topology):
    cfg = with_(cfgs[topology], router={"name": "power_of_two", "seed": 3})
    for name in ("a", "b"):
        run_experiment(cfg, tmp_path / name)
    for f in ("requests.csv", "steps.csv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


# -- disaggregation ------------------------------------------------------------------------------

def test_every_request_goes_prefill_transfer_decode_at_the_links_price(cfgs, tmp_path):
    cfg = compose_run_config([*BASE, *DISAGG, "link=ethernet_100g"])
    out = run_experiment(cfg, tmp_path)
    rows = pd.read_csv(tmp_path / "requests.csv")
    assert (rows["status"] == "finished").all()
    assert rows["prefill_instance"].str.startswith("prefill").all() and rows["decode_instance"].str.startswith("decode").all()
    m = cfg.model
    per_token = 2 * m.num_layers * m.num_kv_heads * m.head_dim * 4  # float32 K and V of every layer
    expected = rows["prompt_tokens"] * per_token / 12.5e9 + 5e-5  # conf/link/ethernet_100g.yaml
    assert rows["transfer_s"].to_numpy() == pytest.approx(expected.to_numpy(), rel=1e-6)
    assert rows[list(PHASES)].sum(axis=1).to_numpy() == pytest.approx(rows["e2e_s"].to_numpy(), rel=1e-9, abs=1e-12)
    assert (rows[list(PHASES)] >= 0).all().all()
    s = out.summary
    assert s["num_transfers"] == len(rows) and s["instance_decode0_prefill_tokens"] == 0
    assert s["instance_prefill0_decode_tokens"] == 0 and s["instance_prefill0_routed"] + s["instance_prefill1_routed"] == 40
    # the first token is the prefill pool's; every other token comes from a decode instance
    assert s["instance_decode0_decode_tokens"] + s["instance_decode1_decode_tokens"] == (rows["output_tokens"] - 1).sum()


def test_phases_of_a_colocated_request_have_no_transfer(cfgs):
    run = execute(with_(cfgs["replicas"], topology={"replicas": 3}, router={"name": "least_outstanding_tokens"}))
    for seq in run.result.sequences:
        p = phase_seconds(seq, run.placements[seq.seq_id])
        assert p["transfer_s"] == p["decode_queue_s"] == 0.0
        assert sum(p.values()) == pytest.approx(seq.token_times_s[-1] - seq.request.arrival_s, abs=1e-12)
    assert {run.placements[s.seq_id].prefill_instance for s in run.result.sequences} == {"replica0", "replica1", "replica2"}


def test_a_small_decode_pool_preempts_and_loses_nothing(cfgs):
    cfg = with_(cfgs["disaggregated"], topology={"decode_num_blocks": 100}, workload={"rate_per_s": 40.0})
    run = execute(cfg)
    assert sum(run.summary[f"instance_decode{i}_preemptions"] for i in range(2)) > 0
    assert run.summary["num_finished"] == 40
    # a preempted sequence is recomputed where it was preempted, as on one engine
    assert sum(run.summary[f"instance_decode{i}_prefill_tokens"] for i in range(2)) > 0
    assert_accounted(run, cfg)


def test_transfers_share_a_port_and_a_lone_one_takes_the_links_price():
    """links.SharedLinks: 1 s of KV alone; two at once from one port take 2 s each; one on other ports
    is not slowed; a transfer joining halfway splits what is left."""
    link = LinkModel(bytes_per_token=1000, bandwidth_bytes_per_s=1e6, latency_s=0.0)  # 1000 tokens: 1 s
    links = SharedLinks(link)
    assert links.start(1, source=0, target=2, num_tokens=1000, now=0.0) == [(1, 1.0)]
    assert dict(links.start(2, source=0, target=3, num_tokens=1000, now=0.0)) == {1: 2.0, 2: 2.0}
    assert links.start(3, source=1, target=4, num_tokens=1000, now=0.0) == [(3, 1.0)]  # its own ports
    links = SharedLinks(link)
    links.start(1, source=0, target=2, num_tokens=1000, now=0.0)
    assert dict(links.start(2, source=0, target=3, num_tokens=1000, now=0.5)) == {1: 1.5, 2: 2.5}
    assert links.finish(1, now=1.5) == [(2, 2.0)]  # alone again: its last 0.5 s at the whole bandwidth
    assert links.finish(2, now=2.0) == [] and links.num_active == 0


def two_prompts(cfg, n: int, tokens: int = 200):
    """n requests of `tokens` tokens arriving at once: one prefill step (budget 512) hands them all off."""
    return [Request(i, 0.0, (1,) * tokens, 4) for i in range(n)]


def test_two_simultaneous_transfers_take_longer_than_one(cfgs):
    cfg = with_(cfgs["disaggregated"], topology={"prefill": 1, "decode": 1},
                link={"bandwidth_gb_per_s": 0.01, "latency_s": 0.0})
    price = LinkModel.of(cfg.serving.link, cfg.model).seconds(200)
    alone = simulate_cluster(simulated_cluster(cfg.serving), two_prompts(cfg, 1))
    both = simulate_cluster(simulated_cluster(cfg.serving), two_prompts(cfg, 2))
    transfer = lambda run, seq: phase_seconds(seq, run.placements[seq.seq_id])["transfer_s"]  # noqa: E731
    assert transfer(alone, alone.result.sequences[0]) == pytest.approx(price, rel=1e-9)
    assert [transfer(both, s) for s in both.result.sequences] == pytest.approx([2 * price, 2 * price], rel=1e-9)


def test_a_transfer_waits_for_blocks_on_the_decode_side_and_nothing_is_lost(cfgs):
    """A decode pool that holds one 200-token KV at a time: the second transfer starts when the first
    request has finished there and freed its blocks (kv_wait_s), the phases still sum to E2E."""
    block = cfgs["disaggregated"].engine.block_size
    cfg = with_(cfgs["disaggregated"], topology={"prefill": 1, "decode": 1, "decode_num_blocks": -(-210 // block) + 1})
    cluster = simulated_cluster(cfg.serving)
    run = simulate_cluster(cluster, two_prompts(cfg, 2))
    first, second = run.result.sequences
    assert all(s.phase.name == "FINISHED" for s in run.result.sequences)
    waits = [phase_seconds(s, run.placements[s.seq_id]) for s in (first, second)]
    assert waits[0]["kv_wait_s"] == 0.0
    assert run.placements[second.seq_id].transfer_start_s == pytest.approx(first.token_times_s[-1])
    assert waits[1]["kv_wait_s"] == pytest.approx(first.token_times_s[-1] - second.token_times_s[0])
    for s, p in zip((first, second), waits):
        assert sum(p.values()) == pytest.approx(s.token_times_s[-1] - s.request.arrival_s, abs=1e-12)
    for inst in cluster.instances:  # every block back: the prefill side's freed after each transfer
        assert inst.engine.block_manager.num_free_blocks == inst.engine.block_manager.num_blocks


def test_a_decode_instance_whose_blocks_are_reserved_for_kv_in_flight_waits_for_it(cfgs):
    """A decode pool of 20 blocks (16 tokens each) and one prefill step handing off a 64- and a 256-token
    prompt: 4 + 16 blocks reserved. The short KV lands first; its first token needs a 5th block, held
    for the long KV still on the wire: the decode instance idles (it does not fail) until that lands,
    then every request finishes and every block is back."""
    cfg = with_(cfgs["disaggregated"], topology={"prefill": 1, "decode": 1, "decode_num_blocks": 20},
                link={"bandwidth_gb_per_s": 0.01, "latency_s": 0.0})
    assert cfg.engine.block_size == 16
    cluster = simulated_cluster(cfg.serving)
    run = simulate_cluster(cluster, [Request(0, 0.0, (1,) * 64, 4), Request(1, 0.0, (1,) * 256, 4)])
    assert run.result.error is None
    assert [s.phase.name for s in run.result.sequences] == ["FINISHED", "FINISHED"]
    for inst in cluster.instances:
        assert inst.engine.block_manager.num_free_blocks == inst.engine.block_manager.num_blocks


# -- no request lost or counted twice -----------------------------------------------------------

def assert_accounted(run, cfg, stopped=False):
    offered = [r.request_id for r in make_requests(cfg.workload, cfg.model)[0]]
    ids = [r.request_id for r in run.records]
    assert ids == offered  # each offered request once, in order
    for r in run.records:
        assert r.status in ("finished", "rejected", "unfinished")
        assert r.status == "finished" or r.reason
        assert r.status != "unfinished" or stopped
    s = run.summary
    assert s["num_finished"] + s["num_rejected"] + s["num_unfinished"] == len(offered)
    if not stopped:  # every block back in its pool: prefill-side blocks freed after the transfer
        for inst in run.cluster.instances:
            bm = inst.engine.block_manager
            assert bm.num_free_blocks == bm.num_blocks and not inst.has_work, inst.name
            assert inst.engine.scheduler.num_sending_blocks == 0


class StopAfter:
    def __init__(self, n):
        self.n = n

    def __call__(self):
        self.n -= 1
        return self.n < 0


@settings(max_examples=30, deadline=None)
@given(topology=st.sampled_from(["single", "replicas", "disaggregated"]), router=st.sampled_from(sorted(ROUTERS)),
       decode_router=st.sampled_from(["", *sorted(ROUTERS)]), n=st.integers(1, 4), m=st.integers(1, 3),
       bandwidth=st.sampled_from([450.0, 12.5, 1e-4]), decode_blocks=st.sampled_from([None, 60, 110, 400]),
       rate=st.sampled_from([4.0, 40.0]), stop_after=st.sampled_from([None, 50, 400]), seed=st.integers(0, 5))
def test_every_offered_request_is_finished_rejected_or_unfinished(cfgs, topology, router, decode_router, n, m,
                                                                  bandwidth, decode_blocks, rate, stop_after, seed):
    t = {"single": {}, "replicas": {"replicas": n}, "disaggregated": {"prefill": n, "decode": m,
                                                                       "decode_num_blocks": decode_blocks}}[topology]
    cfg = with_(cfgs[topology], topology=t, router={"name": router, "decode": decode_router, "seed": seed},
                link={"bandwidth_gb_per_s": bandwidth}, workload={"rate_per_s": rate, "seed": seed, "num_requests": 25})
    stop = StopAfter(stop_after) if stop_after else None
    run = execute(cfg, warmup=False, should_stop=stop)
    assert_accounted(run, cfg, stopped=run.result.stopped)


# -- config -------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    ([*DISAGG[:1], "topology.prefill=0"], "topology.prefill=0: must be >= 1: no prefill instances"),
    ([*DISAGG[:1], "topology.decode=0"], "topology.decode=0: must be >= 1"),
    (["topology=replicas", "topology.replicas=0"], "topology.replicas=0: must be >= 1"),
    (["topology.replicas=2"], "topology.replicas=2: topology=single is one engine"),
    ([*DISAGG, "link.bandwidth_gb_per_s=0"], "link.bandwidth_gb_per_s=0.0: must be > 0 (link=nvlink4)"),
    (["link=pcie5_x16", "link.latency_s=-1"], "link.latency_s=-1.0: must be >= 0"),
    (["link.published_gb_per_s=0"], "link.published_gb_per_s=0.0: must be > 0 or null"),
    (["router.name=fastest"], "router.name='fastest': must be one of least_outstanding_requests"),
    (["router.decode=fastest"], "router.decode='fastest'"),
    (["topology.name=mesh"], "topology.name='mesh': must be one of disaggregated, replicas, single"),
])
def test_bad_cluster_values_name_key_and_value(overrides, message):
    with pytest.raises(ConfigError) as err:
        compose_run_config([*BASE, *overrides])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("overrides, message", [
    (["topology=replicas", "topology.replicas=4096"],
     "chunklab: error: topology.replicas=4096: a measured cluster runs each instance on its own core"),
    (["engine=simulated", f"engine.profile={PROFILE}", "router=fastest"], "chunklab: error: "),
    (["engine=simulated", f"engine.profile={PROFILE}", "router=least_tokens"],
     "chunklab: error: router=least_tokens was renamed: use router=least_outstanding_tokens"),
    (["engine=simulated", f"engine.profile={PROFILE}", "router=least_outstanding"],
     "chunklab: error: router=least_outstanding was renamed: use router=least_outstanding_requests"),
])
def test_cli_refuses_in_one_line(tmp_path, overrides, message):
    proc = subprocess.run([sys.executable, "run.py", "tracking=none", f"hydra.run.dir={tmp_path}/run", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert overrides[-1].split("=")[-1] in lines[0]  # names the value


# -- events at one instant -----------------------------------------------------------------------

def test_events_at_one_instant_apply_step_ends_then_transfers_then_arrivals(cfgs, monkeypatch):
    """The contract of topology/simulated.py at one virtual instant: every step end first (by instance
    index), then every KV transfer end (by start order), then every arrival (by request order); only
    then do idle instances start steps. So at that instant a router placing an arrival sees the prefill
    pool after its hand-offs and freed blocks, and a KV that lands as a decode step ends is admitted by
    the step starting then. A zero-second link lands each transfer at the instant of its step's end,
    and one request is made to arrive at that instant too: all three kinds meet."""
    from chunklab.topology import simulated
    from chunklab.topology.links import LinkModel

    cfg = with_(cfgs["disaggregated"], topology={"prefill": 1, "decode": 1}, workload={"num_requests": 6})
    requests, _ = make_requests(cfg.workload, cfg.model)

    def run(reqs, log=None):
        cluster = simulated_cluster(cfg.serving)
        cluster.link = LinkModel(cluster.link.bytes_per_token, float("inf"), 0.0)  # lands at its start
        if log is not None:
            step, transfer, arrive = (simulated._Simulation._step_ended, simulated._Simulation._transfer_ended,
                                      simulated._Simulation._arrive)
            monkeypatch.setattr(simulated._Simulation, "_step_ended", lambda self, i, fin, now: (
                log.append((now, simulated.STEP_END, i)), step(self, i, fin, now))[1])
            monkeypatch.setattr(simulated._Simulation, "_transfer_ended", lambda self, number, end: (
                log.append((end, simulated.TRANSFER_END, self.in_flight[number][0].seq_id)),
                transfer(self, number, end))[1])
            monkeypatch.setattr(simulated._Simulation, "_arrive", lambda self, r: (
                log.append((r.arrival_s, 2, r.request_id)), arrive(self, r))[1])
        return simulated.simulate_cluster(cluster, reqs)

    first = run(requests)
    instant = first.placements[requests[0].request_id].transfer_start_s  # a prefill step's end
    extra = dataclasses.replace(requests[-1], request_id=len(requests), arrival_s=instant)
    log: list[tuple] = []
    second = run([*requests, extra], log)
    at = [(kind, key) for t, kind, key in log if t == instant]
    assert {kind for kind, _ in at} == {simulated.STEP_END, simulated.TRANSFER_END, 2}  # all three meet
    for t in sorted({t for t, _, _ in log}):
        same = [(kind, key) for u, kind, key in log if u == t]
        assert [kind for kind, _ in same] == sorted(kind for kind, _ in same)  # step ends, transfers, arrivals
        ends = [key for kind, key in same if kind == simulated.STEP_END]
        assert ends == sorted(ends)  # by instance index
    where = second.placements[requests[0].request_id]
    assert where.transfer_end_s == where.transfer_start_s == instant
    assert all(s.is_done for s in second.result.sequences)


def test_an_mlflow_run_of_a_cluster_is_named_by_its_topology():
    def name(*overrides):
        return run_name(compose_run_config(["engine=simulated", "tracking=none", *overrides]), [], [], None)

    assert name() == "ch10_mixed budget=512 (simulated)"
    assert name("topology=replicas", "topology.replicas=4", "router=least_outstanding_requests") == \
        "ch10_mixed budget=512 4 replicas least_outstanding_requests (simulated)"
    assert name("topology=disaggregated", "topology.prefill=2", "topology.decode=3") .startswith(
        "ch10_mixed budget=512 2P3D ")
