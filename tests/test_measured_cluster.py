"""The measured cluster (topology/measured.py): real instance processes on their own cores, the KV of a
disaggregated request through shared memory, an instance killed mid-run. Every assert is on counts,
tokens and states, never on how fast anything ran."""
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import dataclasses
from dataclasses import replace
from pathlib import Path

import mlflow
import pandas as pd
import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunklab import app
from chunklab.app import run_tracked
from chunklab.experiments.shm_link import LinkFit, fit_link, link_preset
from chunklab.topology.ledger import FINISHED, LOST, PENDING, REJECTED, Ledger, LedgerError
from chunklab.topology.measured import MeasuredCluster, available_cores
from chunklab.topology.remote import SEGMENT_PREFIX, InstanceDied, segment_name, unlink_segment
from chunklab.topology.phases import PHASES, phase_seconds
from chunklab.topology.worker import worker_main
from chunklab.config import ChunklabError
from chunklab.engine.build import build_engine
from chunklab.engine.replay import replay
from chunklab.experiments.compose import compose_run_config
from chunklab.report.topologies import cluster_findings
from chunklab.runner import execute
from chunklab.stages.topologies import arm_ranges, coordinator_line
from chunklab.workload import make_requests

ROOT = Path(__file__).resolve().parents[1]
MICRO = ["model=micro", "tracking=none", "tracking.progress=false", "workload.num_requests=10"]
TWO_CORES = pytest.mark.skipif(len(available_cores()) < 2, reason="a measured 2-instance cluster needs 2 cores")
DEV_SHM = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="reads the shared-memory segments in /dev/shm")


# -- the books: no request lost or counted twice -----------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["assign", "reject", "move", "finish", "lose"]), st.integers(0, 7),
                         st.sampled_from(["prefill0", "decode0", "decode1"])), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_every_offered_request_is_in_exactly_one_state_whatever_happens(ops):
    """Random moves, legal or not: the illegal ones raise and change nothing; at every point each of
    the 8 requests is pending, held by one instance, finished, rejected or lost, once."""
    ledger, model = Ledger(range(8)), {rid: PENDING for rid in range(8)}  # model: the expected states
    for op, rid, inst in ops:
        legal = {"assign": model[rid] == PENDING, "reject": model[rid] == PENDING,
                 "move": model[rid] == "@prefill0", "finish": model[rid] == "@" + inst, "lose": True}[op]
        call = {"assign": lambda: ledger.assign(rid, inst), "reject": lambda: ledger.reject(rid),
                "move": lambda: ledger.move(rid, "prefill0", inst), "finish": lambda: ledger.finish(rid, inst),
                "lose": lambda: ledger.lose(inst)}[op]
        if not legal:
            with pytest.raises(LedgerError):
                call()
        elif op == "lose":
            lost = call()
            assert sorted(lost) == sorted(r for r, s in model.items() if s == "@" + inst)
            model |= {r: LOST for r in lost}
        else:
            call()
            model[rid] = {"assign": "@" + inst, "reject": REJECTED, "move": "@" + inst, "finish": FINISHED}[op]
        counts = ledger.counts()
        assert sum(counts.values()) == 8
        for state in (PENDING, FINISHED, REJECTED, LOST):
            assert counts[state] == sum(s == state for s in model.values())
        assert ledger.num_open == sum(s == PENDING or s.startswith("@") for s in model.values())
        assert all(ledger.holder(r) == (s[1:] if s.startswith("@") else "") for r, s in model.items())


def test_a_request_offered_twice_is_refused():
    with pytest.raises(LedgerError, match="offered twice"):
        Ledger([1, 2, 1])


# -- real processes ---------------------------------------------------------------------------------

def single_engine_digests(cfg):
    """Greedy outputs of one engine on one thread: what every topology must reproduce token for token."""
    engine = build_engine(cfg.model, replace(cfg.engine, threads=1), cfg.scheduler)
    result = replay(engine, make_requests(cfg.workload, cfg.model)[0])
    return [tuple(s.output_token_ids) for s in result.sequences]


@TWO_CORES
@pytest.mark.parametrize("topology", [["topology=disaggregated", "topology.prefill=1", "topology.decode=1"],
                                      ["topology=replicas", "topology.replicas=2", "router=round_robin"]])
def test_a_measured_cluster_finishes_every_request_with_one_engines_tokens(topology):
    cfg = compose_run_config([*MICRO, *topology])
    run = execute(cfg)
    assert run.result.error is None and not run.result.stopped
    assert [r.status for r in run.records] == ["finished"] * 10
    # the KV copied through shared memory is the KV the prefill computed: the same tokens as one engine
    assert [tuple(s.output_token_ids) for s in run.result.sequences] == single_engine_digests(cfg)
    names = {i.name for i in run.cluster.instances}
    for seq in run.result.sequences:
        where = run.placements[seq.seq_id]
        assert where.prefill_instance in names
        assert (where.decode_instance in names) == (topology[0] == "topology=disaggregated")
    s = run.summary
    assert sum(s[f"instance_{n}_routed"] for n in names) == (20 if "disaggregated" in topology[0] else 10)
    assert s.get("num_transfers", 0) == (10 if "disaggregated" in topology[0] else 0)
    assert s["coordinator_cpu_s"] > 0 and s["coordinator_cpu_share"] > 0  # measured while serving
    for seq in run.result.sequences:
        where, phases = run.placements[seq.seq_id], phase_seconds(seq, run.placements[seq.seq_id])
        assert sum(phases.values()) == pytest.approx(seq.token_times_s[-1] - seq.request.arrival_s)
        if topology[0] == "topology=disaggregated":  # transfer_s: the read, and the write at admission
            assert where.kv_write_s > 0 and phases["decode_queue_s"] >= 0
            assert phases["transfer_s"] == pytest.approx(where.transfer_end_s + where.kv_write_s
                                                         - seq.token_times_s[0])


@TWO_CORES
@DEV_SHM
@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_a_run_ended_before_every_instance_is_ready_leaves_no_shared_memory_segment(how):
    """The prefill's pool segment exists once it has built its pool, before it reports "ready": the run
    ends right then (stopped; or the prefill SIGKILLed, so only the coordinator can unlink it)."""
    cfg = compose_run_config([*MICRO, "topology=disaggregated", "topology.prefill=1", "topology.decode=1"])
    cluster = MeasuredCluster(cfg.serving)
    path = "/dev/shm/" + cluster.specs[0].shm_name
    assert cluster.specs[0].shm_name.startswith(SEGMENT_PREFIX)
    ended = []

    def should_stop():  # the coordinator asks first as it starts waiting for "ready"
        if not ended:
            deadline = time.monotonic() + 120  # a bound on a broken run, not a timing the test depends on
            while not os.path.exists(path):
                assert time.monotonic() < deadline
                time.sleep(0.001)
            if how == "killed":
                os.kill(next(p.pid for p in multiprocessing.active_children() if p.name == "chunklab-prefill0"),
                        signal.SIGKILL)
            ended.append(time.monotonic())
        return how == "stopped"

    run = cluster.run(make_requests(cfg.workload, cfg.model)[0], should_stop=should_stop)
    assert ended and run.result.stopped
    if how == "killed":
        assert str(run.result.error).startswith("instance prefill0 (pid ") and "exit code -9" in str(run.result.error)
    assert not os.path.exists(path)  # (other runs' segments may be live: tests run in parallel)


@DEV_SHM
@pytest.mark.parametrize("size_bytes", [0, 4096])
def test_a_segment_is_unlinked_sized_or_empty(size_bytes):
    """Empty is what an instance killed between creating its segment and sizing it leaves behind."""
    name = segment_name()
    fd = os.open("/dev/shm/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, size_bytes)
    os.close(fd)
    assert unlink_segment(name) and not os.path.exists("/dev/shm/" + name)
    assert not unlink_segment(name)


@DEV_SHM
def test_a_worker_given_no_start_exits_non_zero_with_one_line_and_unlinks_its_pool(capfd):
    spec = dataclasses.replace(MeasuredCluster(compose_run_config([*MICRO, "topology=disaggregated"]).serving).specs[0],
                               start_timeout_s=1.0)
    ctx = multiprocessing.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker_main, args=(spec, inbox, outbox), daemon=True)
    proc.start()
    try:
        assert outbox.get(timeout=120)[0] == "ready" and os.path.exists("/dev/shm/" + spec.shm_name)
        proc.join(60)  # a bound on a broken worker: it exits a second after "ready"
        assert proc.exitcode == 1
    finally:
        if proc.is_alive():
            proc.kill()
    line = 'NoStart: no "start" from the coordinator 1 s after "ready"; exiting'
    assert outbox.get(timeout=10) == ("error", spec.index, line)
    assert capfd.readouterr().err.strip().splitlines()[-1] == f"chunklab: instance {spec.name}: {line}"
    assert not os.path.exists("/dev/shm/" + spec.shm_name)


class KillOnFirstFinish:
    """on_done: SIGKILLs the named instance's process when the first request finishes."""

    def __init__(self, name, then):
        self.name, self.then, self.killed_at = name, then, None

    def __call__(self, n):
        self.then(n)
        if self.killed_at is None:
            pid = next(p.pid for p in multiprocessing.active_children() if p.name == f"chunklab-{self.name}")
            os.kill(pid, signal.SIGKILL)
            self.killed_at = time.monotonic()


@TWO_CORES
def test_an_instance_killed_mid_run_ends_it_failed_in_bounded_time_with_every_request_accounted(tmp_path,
                                                                                                 monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = compose_run_config(["model=micro", "tracking.progress=false", f"tracking.tracking_uri={uri}",
                              "tracking.system_metrics_interval_s=0", "workload.num_requests=40",
                              "workload.arrival=all_at_once", "workload.min_output_tokens=300",
                              "workload.max_output_tokens=400", "topology=disaggregated"])
    killer = []
    real_execute = app.execute

    def execute_with_killer(cfg, **kw):
        killer.append(KillOnFirstFinish("decode0", kw["on_done"]))
        return real_execute(cfg, **(kw | {"on_done": killer[0]}))

    monkeypatch.setattr(app, "execute", execute_with_killer)
    with pytest.raises(InstanceDied) as err:
        run_tracked(cfg, tmp_path / "run", {})
    ended = time.monotonic()
    assert killer[0].killed_at is not None and ended - killer[0].killed_at < 30
    line = str(err.value)
    assert isinstance(err.value, ChunklabError) and "\n" not in line
    assert line.startswith("instance decode0 (pid ") and "died with exit code -9, holding " in line
    held = int(line.split("holding ")[1].split()[0])
    assert held >= 1
    # every offered request once: finished, or unfinished with a reason; the dead instance's among them
    rows = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert list(rows.request_id) == list(range(40))
    assert set(rows.status) <= {"finished", "unfinished"}
    assert (rows.status == "unfinished").sum() >= held and rows[rows.status == "unfinished"].reason.notna().all()
    assert rows.reason.str.startswith("instance decode0 died; run stopped while ").sum() == held
    assert (rows.status == "finished").sum() >= 1
    done = rows[rows.status == "finished"]
    assert ((done[list(PHASES)].sum(axis=1) - done.e2e_s).abs() < 1e-6).all()
    # MLflow: FAILED, nothing left RUNNING, what was measured kept
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[cfg.tracking.experiment_name])
    assert list(runs.status) == ["FAILED"]
    assert runs["metrics.num_finished"][0] == (rows.status == "finished").sum()
    assert runs["metrics.num_unfinished"][0] == (rows.status == "unfinished").sum()
    assert "metrics.instance_decode0_steps" in runs


# -- the shm link and the stage's verdict ------------------------------------------------------------

def test_the_link_fit_recovers_bandwidth_and_latency_and_its_preset_composes(tmp_path):
    rows = [{"tokens": n, "bytes": n * 3072, "seconds": n * 3072 / 4e9 + 1e-4} for n in (1, 16, 256, 2048)]
    fit = fit_link(rows)
    assert fit.bandwidth_gb_per_s == pytest.approx(4.0, rel=1e-6) and fit.latency_s == pytest.approx(1e-4, rel=1e-6)
    text = link_preset(LinkFit(4.0, 1e-4, 1.0, 4), "here")
    assert "bandwidth_gb_per_s: 4\n" in text and "latency_s: 0.0001\n" in text and "here" in text
    link = compose_run_config(["tracking=none", "link=shm"]).link  # the committed preset: measured, with conditions
    assert link.name == "shm" and link.bandwidth_gb_per_s > 0 and link.spec_source.startswith("measured: ")


def test_each_arms_range_over_repeats_is_kept_for_the_report():
    runs = pd.DataFrame({"executor": "measured", "load": [0.5] * 4, "arm": ["single", "single", "pd", "pd"],
                         "slo_attainment": [0.9, 1.0, 0.5, 0.7], "ttft_p50_s": [1, 3, 2, 2], "tpot_p50_s": 0.002})
    a = arm_ranges(runs).set_index("arm")
    assert a.loc["single", ["slo_attainment_min", "slo_attainment", "slo_attainment_max"]].tolist() == [0.9, 0.95, 1.0]
    assert a.loc["pd", ["ttft_p50_s_min", "ttft_p50_s", "ttft_p50_s_max"]].tolist() == [2, 2, 2]
    assert "coordinator_cpu_share" not in a  # runs without a measured cluster have none


def test_the_coordinators_cpu_is_kept_per_arm_and_said_in_the_conditions():
    runs = pd.DataFrame({"executor": ["measured"] * 4 + ["simulated"], "load": 0.5,
                         "arm": ["single", "pd", "pd", "replicas", "pd"], "slo_attainment": 1.0, "ttft_p50_s": 0.1,
                         "tpot_p50_s": 0.002, "coordinator_cpu_s": [None, 0.2, 0.4, 0.3, None],
                         "coordinator_cpu_share": [None, 0.01, 0.03, 0.02, None]})
    a = arm_ranges(runs).set_index(["executor", "arm"])
    assert a.loc[("measured", "pd"), ["coordinator_cpu_share_min", "coordinator_cpu_share",
                                      "coordinator_cpu_share_max"]].tolist() == pytest.approx([0.01, 0.02, 0.03])
    assert a.loc[("measured", "pd"), "coordinator_cpu_s_max"] == 0.4
    assert coordinator_line(runs) == ("this process, unpinned, on the instances' cores: pd 2.0% [1.0-3.0%] of the "
                                      "serving wall time, at most 0.40 s CPU a run; replicas 2.0% [2.0-2.0%] of the "
                                      "serving wall time, at most 0.30 s CPU a run (median [min-max] over the loads "
                                      "and repeats)")
    assert coordinator_line(runs.drop(columns=["coordinator_cpu_s", "coordinator_cpu_share"])) == "not measured"


def test_the_report_names_each_loads_winner_from_the_data_and_says_when_the_stage_has_not_run(tmp_path):
    assert cluster_findings(tmp_path) == [
        "The topologies stage has not run in this repro (`dvc repro topologies`): no measured cluster to report."]
    (tmp_path / "topologies").mkdir()
    runs = pd.DataFrame({"executor": ["measured"] * 6 + ["simulated"] * 3, "load": 0.9,
                         "arm": ["single", "replicas", "pd"] * 3,
                         "slo_attainment": [0.8, 0.95, 0.5, 0.82, 0.97, 0.52, 0.9, 0.8, 0.7],
                         "ttft_p50_s": 0.1, "tpot_p50_s": 0.002})
    runs.to_csv(tmp_path / "topologies" / "runs.csv", index=False)
    pd.DataFrame({"point": ["pd load 0.9"], "metric": ["ttft"], "median_rel_error": [0.2],
                  "median_rel_error_floor": [0.05]}).to_csv(tmp_path / "topologies" / "paired.csv", index=False)
    lines = cluster_findings(tmp_path)
    assert lines[0].startswith("- Load 0.9 of the measured capacity (MEASURED, median [min-max] over repeats): "
                               "share in SLO single 81 [80-82], replicas 96 [95-97], pd 51 [50-52] %: "
                               "**2 replicas (a core each)** wins; the simulated twins put single first")
    assert lines[1] == ("- Paired TTFT error of the simulated twins: median 20%-20% over the points, against a "
                        "repeat-vs-repeat floor of 5%-5%; 1 of 1 points above their floor.")


def test_more_instances_than_cores_is_one_line_naming_the_value():
    with pytest.raises(ChunklabError) as err:
        compose_run_config([*MICRO, "topology=disaggregated", "topology.prefill=4096"])
    assert str(err.value).startswith("topology.prefill=4096: a measured cluster runs each instance on its own core: "
                                     "4097 instances") and "\n" not in str(err.value)


@TWO_CORES
def test_an_instance_that_fails_to_start_ends_the_run_with_its_error_and_every_request_unfinished():
    cfg = compose_run_config([*MICRO, "topology=replicas"])  # prepare refuses a device that is not here:
    run = execute(replace(cfg, engine=replace(cfg.engine, device="cuda")))  # so the instances meet it
    assert isinstance(run.result.error, InstanceDied)
    line = str(run.result.error)
    assert line.startswith("instance replica") and " failed: ConfigError: engine.device='cuda'" in line
    assert [r.status for r in run.records] == ["unfinished"] * 10


def test_slowdown_of_a_measured_cluster_is_refused_in_one_line():
    with pytest.raises(ChunklabError, match=r"^slowdown=True: is not measured for a measured cluster"):
        compose_run_config([*MICRO, "topology=replicas", "slowdown=true"])


@pytest.mark.slow  # ~18 s: run.py and its instances start in fresh interpreters
@TWO_CORES
def test_ctrl_c_to_the_process_group_ends_a_measured_cluster_killed_with_every_request_accounted(tmp_path):
    """SIGINT to every process of the run, as a terminal's Ctrl-C sends it: the instances ignore it, the
    coordinator stops the run, writes what it measured and ends the MLflow run KILLED."""
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    proc = subprocess.Popen([sys.executable, "run.py", "model=micro", "tracking.progress=false",
                             "tracking.system_metrics_interval_s=0", "topology=replicas", "workload.num_requests=400",
                             "workload.arrival=all_at_once", "workload.min_output_tokens=300",
                             "workload.max_output_tokens=400", f"hydra.run.dir={tmp_path}/run"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 300  # a bound on a broken run, not a timing the test depends on
    while len([c for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())]) < 2:
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.2)
    time.sleep(1.0)  # into the run (any moment works: the asserts hold before, during and after the steps)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("chunklab: interrupted by SIGINT")
    rows = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert list(rows.request_id) == list(range(400)) and set(rows.status) <= {"finished", "unfinished"}
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    assert list(mlflow.search_runs(experiment_names=["chunklab"]).status) == ["KILLED"]
