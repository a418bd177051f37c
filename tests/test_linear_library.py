"""The fused forward's GEMM library per batch size: the plan, the probe's choice and its cache."""
import dataclasses
import json

import pytest

from chunklab.config import EngineConfig
from chunklab.engine.executors.model_runner import ModelRunner
from chunklab.model import linear_library as ll
from chunklab.model.linear_library import LinearPlan, plan_from_ratios
from helpers import MICRO

F32 = dataclasses.replace(MICRO, dtype="float32")


def ratios(panels=None, **by_rows):
    """A probe result: rows -> oneDNN time over MKL time (and panel_linear's, rows -> ratio, where given)."""
    out = {int(r[1:]): {"onednn_over_mkl": v, "mkl_s": 1.0, "onednn_s": v} for r, v in by_rows.items()}
    for r, v in (panels or {}).items():
        out[r] |= {"panels_over_mkl": v, "panels_s": v}
    return out


def test_a_plan_sends_each_batch_size_to_its_rung():
    plan = LinearPlan(((1, "mkl"), (4, "onednn"), (256, "mkl")))
    assert [plan.library_for(r) for r in (1, 3, 4, 255, 256, 9999)] == ["mkl", "mkl", "onednn", "onednn", "mkl", "mkl"]
    assert plan.describe() == "mkl<4, onednn 4-255, mkl>=256"
    assert LinearPlan(((1, "onednn"), (8, "onednn"))).describe() == "onednn"
    assert plan.uses == {"mkl", "onednn"} and LinearPlan.single("mkl").uses == {"mkl"}


@pytest.mark.parametrize("machine, probe, plan", [
    # where MKL is the faster library (as on the Intel VM of issue 19): MKL everywhere
    ("mkl faster", ratios(r1=1.8, r8=1.05, r64=1.1, r1024=1.02), "mkl"),
    # where oneDNN is (the AMD VMs): oneDNN from the first size where it wins
    ("onednn faster", ratios(r1=1.6, r8=0.7, r64=0.8, r1024=0.5), "mkl<8, onednn>=8"),
    ("onednn everywhere", ratios(r1=0.9, r8=0.7, r64=0.8, r1024=0.5), "onednn"),
    # a tie inside the margin stays with MKL, the incumbent: noise cannot flip it
    ("tie", ratios(r1=0.99, r8=0.98, r64=1.0, r1024=0.985), "mkl"),
    # the streaming kernel where it beats both at decode sizes (the AMD VM), the faster challenger per rung
    ("panels at decode sizes", ratios(panels={1: 0.4, 8: 0.5, 64: 0.9}, r1=1.6, r8=0.7, r64=0.8, r1024=0.5),
     "panels<64, onednn>=64"),
    ("panels, not past a tie", ratios(panels={1: 0.98, 8: 1.5}, r1=1.2, r8=1.1, r1024=1.0), "mkl"),
    # a rung's incumbent is the rung below's library: a near tie at 512 rows (panels 0.98 of MKL, as on the
    # Intel Xeon VM, where the old MKL-incumbent rule flipped between probes) keeps panels on
    ("a tie keeps the rung below's library", ratios(panels={1: 0.7, 256: 0.9, 512: 0.98, 1024: 1.01},
                                                    r1=1.8, r256=0.96, r512=1.0, r1024=0.99), "panels"),
    # ... and a challenger that beats that incumbent by the margin still takes the rung, MKL included
    ("onednn past panels", ratios(panels={1: 0.7, 512: 0.95, 1024: 1.1}, r1=1.8, r512=1.0, r1024=0.8),
     "panels<1024, onednn>=1024"),
    ("mkl back past panels", ratios(panels={1: 0.7, 512: 0.9, 1024: 1.2}, r1=1.8, r512=1.0, r1024=1.1),
     "panels<1024, mkl>=1024"),
])
def test_the_probe_picks_the_faster_library(machine, probe, plan):
    assert plan_from_ratios(probe).describe() == plan, machine


def test_the_probe_measures_both_libraries_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKLAB_LINEAR_CACHE", str(tmp_path))
    ll.probed_plan.cache_clear()
    plan = ll.probed_plan(F32, 1)
    (written,) = tmp_path.glob("*-t1-*.json")
    record = json.loads(written.read_text())
    assert record["plan"] == plan.describe() and record["threads"] == 1
    for r in ll.PROBE_ROWS:  # every candidate really timed at every rung; the plan follows what was measured
        t = record["probe"][str(r)]
        libs = ll.candidates(r)
        assert all(t[f"{lib}_s"] > 0 for lib in libs) and set(libs) == set(ll.LIBRARIES)
        assert t["mkl_s"] > 0 and all(t[f"{lib}_over_mkl"] > 0 for lib in libs[1:])
    assert plan == plan_from_ratios({int(r): t for r, t in record["probe"].items()})  # the plan follows the timings
    ll.probed_plan.cache_clear()
    monkeypatch.setattr(ll, "probe_ratios", lambda *a, **k: pytest.fail("probed again despite the cache"))
    assert ll.probed_plan(F32, 1) == plan  # a later process reads the machine's choice
    ll.probed_plan.cache_clear()


def test_auto_runs_the_probed_plan_and_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKLAB_LINEAR_CACHE", str(tmp_path))
    ll.probed_plan.cache_clear()
    forced = LinearPlan(((1, "mkl"), (4, "onednn")))
    monkeypatch.setattr(ll, "probed_plan", lambda m, threads: forced)
    runner = ModelRunner(F32, EngineConfig(num_blocks=8, threads=1))
    assert runner.fused.linear_plan == forced and runner.forward_path == "fused (linear mkl<4, onednn>=4)"
    assert len(runner.fused.packed) == 4 * F32.num_layers  # prepacked once, at build
    assert runner.fused.panels == []  # a library the plan does not use is not packed for
    assert ModelRunner(F32, EngineConfig(num_blocks=8, linear_library="mkl")).fused.packed == []
    panels = ModelRunner(F32, EngineConfig(num_blocks=8, linear_library="panels")).fused
    assert len(panels.panels) == 4 * F32.num_layers and panels.packed == []


def test_a_plan_probed_on_another_ladder_is_probed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKLAB_LINEAR_CACHE", str(tmp_path))
    before = ll._cache_path(F32, 1)
    monkeypatch.setattr(ll, "PROBE_ROWS", ll.PROBE_ROWS[:-1])
    assert ll._cache_path(F32, 1) != before  # a cached plan without the new rung is not read


def test_a_cached_probe_is_planned_by_the_current_rule(tmp_path, monkeypatch):
    # the cache holds timings, not a verdict: a changed rule or margin applies without probing again
    monkeypatch.setenv("CHUNKLAB_LINEAR_CACHE", str(tmp_path))
    probe = ratios(panels={1: 0.7, 512: 0.95, 1024: 0.99}, r1=1.8, r512=1.0, r1024=1.0)
    path = ll._cache_path(F32, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rungs": [[1, "mkl"]], "plan": "mkl", "probe": {str(r): t for r, t in probe.items()}}))
    monkeypatch.setattr(ll, "probe_ratios", lambda *a, **k: pytest.fail("probed again despite the cache"))
    ll.probed_plan.cache_clear()
    assert ll.probed_plan(F32, 1).describe() == "panels"
    ll.probed_plan.cache_clear()
    monkeypatch.setattr(ll, "MARGIN", 0.4)  # panels' 0.7 at one row no longer clears it
    assert ll.probed_plan(F32, 1).describe() == "mkl"
    ll.probed_plan.cache_clear()
