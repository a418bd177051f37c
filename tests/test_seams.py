"""The seams of issue 51: calibration owns its engine, a policy is one file, a cost model only predicts."""
import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chunklab.calibration.profile import calibration_engine
from chunklab.calibration.shapes import calibration_shapes
from chunklab.config import ConfigError, EngineConfig, SchedulerConfig
from chunklab.engine.block_manager import BlockManager
from chunklab.cost_models import LinearCostModel, ScaledCostModel
from chunklab.engine.policies import OrderingPolicy, Part
from chunklab.engine.scheduler import Scheduler
from chunklab.engine.sequence import Request, Sequence
from chunklab.cost_models.step_shape import FEATURES, Segment, StepShape
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.simulate import requests_of, simulate
from helpers import MICRO

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("num_blocks", [1, 8])
def test_a_first_run_with_a_tiny_pool_calibrates_and_gives_its_one_line(tmp_path, num_blocks):
    """No profile of this machine yet, and a KV pool of one block (every request rejected) or of eight
    (too small for the probe's largest shapes, 32 blocks of 16 tokens): calibration measures on its
    own pool, never the run's, then the run prints its one result line."""
    env = dict(os.environ, CHUNKLAB_PROFILE_CACHE=str(tmp_path / "profiles"), CHUNKLAB_CALIBRATION="smoke")
    out = subprocess.run([sys.executable, "run.py", "model=micro", f"engine.num_blocks={num_blocks}",
                          "workload.num_requests=4", "tracking=none", f"hydra.run.dir={tmp_path}/run"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "calibrating it now" in out.stderr
    [line] = out.stdout.strip().splitlines()
    assert line.startswith("budget") and "nan" not in line
    if num_blocks == 1:
        assert "4 rejected" in line and "TTFT p50 n/a" in line
    assert list((tmp_path / "profiles").glob("micro-*.json"))  # it did calibrate


@pytest.mark.parametrize("run_blocks", [1, 2, 1024, 100_000])
def test_the_calibration_engine_does_not_depend_on_the_run_pool(run_blocks):
    """However small (or large) the run's pool, calibration's holds its largest probe shape and a
    full batch of its replays, and keeps the run's compute path."""
    shapes = calibration_shapes(0, 40, 8, MICRO.max_seq_len)
    run = EngineConfig(num_blocks=run_blocks, block_size=8, threads=1, clock="wall", mixed_batch=False)
    cal = calibration_engine(MICRO, run, shapes)
    assert cal == calibration_engine(MICRO, EngineConfig(block_size=8, threads=1), shapes)
    assert (cal.block_size, cal.threads, cal.executor, cal.clock, cal.mixed_batch) == (8, 1, "torch", "replay", True)
    blocks = BlockManager(cal.num_blocks, cal.block_size).blocks_for_tokens
    assert all(sum(blocks(c) for c in s.decode_ctx_lens) + sum(blocks(g.num_cached + g.num_tokens) for g in s.segments)
               <= cal.num_blocks for s in shapes)


class AdmissionsFirst(OrderingPolicy):
    """A toy ordering: new requests first, then in-flight prefills, then decodes (this class is the
    whole policy; defining it registers it)."""
    name = "admissions_first"
    parts = (Part.ADMISSIONS, Part.PREFILLS, Part.DECODES)


def test_a_new_ordering_policy_is_one_class_and_one_yaml_file(tmp_path, monkeypatch):
    project = tmp_path / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    (project / "conf" / "scheduler" / "admissions_first.yaml").write_text(
        "defaults:\n  - decode_first\n  - _self_\nordering: admissions_first\n")
    (project / "outputs" / "profiles").mkdir(parents=True)
    shutil.copy(ROOT / "outputs" / "profiles" / "machine.json", project / "outputs" / "profiles" / "machine.json")
    monkeypatch.setenv("CHUNKLAB_PROJECT_DIR", str(project))
    small = ["engine=simulated", "engine.profile=outputs/profiles/machine.json", "tracking=none", "workload.num_requests=40", "workload.rate_per_s=20"]
    toy = compose_run_config([*small, "scheduler=admissions_first", "scheduler.budget=64"])
    assert toy.scheduler.ordering == "admissions_first"
    chapter = compose_run_config([*small, "scheduler.budget=64"])
    (s_toy, r_toy), (s_ch, r_ch) = simulate(toy, requests_of), simulate(chapter, requests_of)
    assert s_toy["num_finished"] == s_ch["num_finished"] == 40
    assert [r["ttft_s"] for r in r_toy] != [r["ttft_s"] for r in r_ch]  # it really scheduled otherwise
    with pytest.raises(ConfigError, match="scheduler.ordering='lifo': must be one of .*admissions_first"):
        compose_run_config([*small, "scheduler.ordering=lifo"])


def test_the_toy_policy_orders_the_step():
    sched = Scheduler(SchedulerConfig(budget=8, ordering="admissions_first"), BlockManager(64, 4))
    decoding = Sequence(Request(0, 0.0, (1, 2), 4))
    sched.add(decoding)
    sched.postprocess(sched.schedule(), {0: 5}, 0.0, 1.0)  # prefilled: decoding next
    sched.add(Sequence(Request(1, 0.0, tuple(range(8)), 2)))
    plan = sched.schedule()
    assert [c.seq.seq_id for c in plan.prefills] == [1] and plan.prefills[0].num_tokens == 8
    assert plan.decodes == []  # the admission took the whole budget first


def test_a_cost_model_predicts_from_a_named_shape_and_carries_its_provenance_beside_it():
    coef = tuple(float(i + 1) for i in range(len(FEATURES)))
    model = LinearCostModel(coef)
    shape = StepShape((10, 20), (Segment(5, 0, True),), True)
    assert model.predict(shape) == sum(c * f for c, f in zip(coef, shape.features()))
    scaled = ScaledCostModel(model, 2.0)
    assert scaled.predict(shape) == 2.0 * model.predict(shape)
    assert scaled.provenance.conditions["step_time_scale"] == "2" and scaled.provenance.digest
    assert not hasattr(model, "tags") and not hasattr(model, "run_conditions")  # data beside it, not methods


def test_the_probe_stages_sequences_through_the_scheduler_and_releases_them():
    sched = Scheduler(SchedulerConfig(budget=64, max_num_seqs=4, max_partial_prefills=4), BlockManager(16, 4))
    sched.stage(Request(1, 0.0, (7,) * 9, 100), 9, decoding=True, token_id=7)
    sched.stage(Request(2, 0.0, (7,) * 20, 2), 12)
    plan = sched.schedule()
    assert [s.seq_id for s in plan.decodes] == [1] and [(c.seq.seq_id, c.num_tokens) for c in plan.prefills] == [(2, 8)]
    with pytest.raises(ValueError, match="more KV blocks than the pool has free"):
        sched.stage(Request(3, 0.0, (7,) * 64, 2), 64)
    sched.release_all()
    assert sched.num_running == 0 and sched.block_manager.num_free_blocks == 16


def test_a_policy_name_no_registry_holds_is_one_line():
    with pytest.raises(ConfigError, match="scheduler.admission='random'"):
        Scheduler(SchedulerConfig(admission="random"), BlockManager(4, 4))
    cfg = dataclasses.replace(compose_run_config(["engine=simulated", "tracking=none"]))
    assert cfg.scheduler.ordering == "decode_first"
