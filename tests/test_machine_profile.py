"""Profiles know their machine: fingerprints, engine.profile=auto, the serving fit, paired errors,
capacity by bisection (issue 18)."""
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from chunklab.calibration.fingerprint import describe, differences, fingerprint, fingerprint_id
from chunklab.cost_models.fits.profile import STALL_RATIO, fit_linear, fit_probe_and_serving
from chunklab.calibration.machine import CACHE_ENV, machine_profile_path
from chunklab.calibration.profile import fit_on
from chunklab.config import EngineConfig
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.capacity import bisect
from chunklab.experiments.fidelity import paired_errors, paired_table
from helpers import MICRO

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["model=micro", "tracking=none", "tracking.progress=false", "workload.num_requests=6",
         "workload.classes.0.min_tokens=200", "workload.classes.0.max_tokens=200", "workload.min_output_tokens=4",
         "workload.max_output_tokens=8"]


def test_a_fingerprint_names_the_machine_threads_and_engine_build():
    fp32 = dataclasses.replace(MICRO, dtype="float32")  # the fused forward's dtype
    mkl = dict(linear_library="mkl")  # auto's probe may choose otherwise at another thread count
    two, one = fingerprint(fp32, EngineConfig(threads=2, **mkl)), fingerprint(fp32, EngineConfig(threads=1, **mkl))
    assert two["torch_threads"] == 2 and one["torch_threads"] == 1
    assert fingerprint_id(two) != fingerprint_id(one) and differences(two, one) == ["torch_threads"]
    eager = fingerprint(fp32, EngineConfig(threads=2, compile=False))
    assert eager["forward_path"] == "eager" and "forward_path" in differences(two, eager)
    onednn = fingerprint(fp32, EngineConfig(threads=2, linear_library="onednn"))  # another GEMM library: another profile
    assert two["forward_path"] == "fused (linear mkl)" and onednn["forward_path"] == "fused (linear onednn)"
    assert differences(two, onednn) == ["forward_path"]
    assert len(two["source_digest"]) == 12 and two["cpu_logical_cores"] == os.cpu_count()
    assert "2 threads" in describe(two) and two["cpu_model"] in describe(two)



# /proc/cpuinfo heads of two VMs seen on this project, both named "AMD EPYC": a Zen 5 with AVX-512
# and one on KVM's generic EPYC model without it. The same code ran 2-3x apart on them.
ZEN5 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n" \
       "stepping\t: 1\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw\n\nprocessor\t: 1\ncpu family\t: 99\n"
EPYC_KVM = "processor\t: 0\ncpu family\t: 23\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 2\n" \
           "flags\t\t: fpu sse4_2 avx avx2 fma\n"


@pytest.mark.parametrize("text, expected", [(ZEN5, "AMD EPYC (family 26 model 2 stepping 1, avx512f"),
                                            (EPYC_KVM, "AMD EPYC (family 23 model 1 stepping 2, avx2")])
def test_cpus_sold_under_one_name_get_different_fingerprints(text, expected, tmp_path, monkeypatch):
    from chunklab.metrics import conditions

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    real_path = conditions.Path
    monkeypatch.setattr(conditions, "Path", lambda p: cpuinfo if p == "/proc/cpuinfo" else real_path(p))
    conditions.cpu_model.cache_clear()
    try:
        name = conditions.cpu_model()
        fp = fingerprint(dataclasses.replace(MICRO, dtype="float32"), EngineConfig(threads=2, linear_library="mkl"))
    finally:
        conditions.cpu_model.cache_clear()
    assert name.startswith(expected)  # the first processor's fields only (the second's family is 99)
    assert fp["cpu_model"] == name and name in describe(fp)
    assert conditions.vector_isa(["avx2", "avx512f", "amx_tile"]) == ["avx512f", "amx"]
    assert conditions.vector_isa(["sse2"]) == []

def test_auto_calibrates_this_machine_once_then_reuses_it(tmp_path, monkeypatch, capfd):
    from chunklab.app import run_experiment

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    cfg = compose_run_config(SMALL)  # prepared: the one place a profile is resolved (and calibrated)
    err = capfd.readouterr().err
    assert err.count("calibrating it now") == 1 and "engine.profile=auto" in err
    path = machine_profile_path(cfg.model, cfg.engine)
    assert cfg.engine.profile == str(path)
    first = run_experiment(cfg, tmp_path / "a")
    assert "calibrating" not in capfd.readouterr().err
    assert path.parent == tmp_path / "cache" and path.is_file()
    doc = json.loads(path.read_text())
    assert doc["fingerprint"] == fingerprint(cfg.model, cfg.engine) and doc["fingerprint_id"] in path.name
    assert first.tags["profile.digest"] and first.summary["step_time_vs_predicted_p50"] > 0  # it guards the run
    second = run_experiment(compose_run_config(SMALL), tmp_path / "b")
    assert "calibrating" not in capfd.readouterr().err
    assert second.tags["profile.digest"] == first.tags["profile.digest"]
    steps = pd.read_csv(tmp_path / "b" / "steps.csv")  # a measured run's steps carry their shapes
    assert {"f_tokens", "f_decode_ctx", "f_causal_pairs"} <= set(steps.columns)
    assert (steps["f_tokens"] == steps["num_decode_tokens"] + steps["num_prefill_tokens"]).all()


def test_a_simulated_run_asking_for_this_machines_profile_calibrates_the_real_engine(tmp_path, monkeypatch):
    """workload.load resolves capacity by simulation with this machine's profile: on a machine with
    none yet, that simulated config is what asks for the calibration (a fresh clone's first run)."""
    from chunklab.calibration.machine import ensure_machine_profile

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    cfg = compose_run_config(SMALL + ["engine.executor=simulated"])
    doc = json.loads(ensure_machine_profile(cfg.model, cfg.engine).read_text())
    assert doc["conditions"]["forward_path"].startswith(("fused", "eager"))  # measured, not predicted
    assert doc["fingerprint"] == fingerprint(cfg.model, cfg.engine)


def test_a_profile_of_another_machine_is_used_with_one_line_naming_both(tmp_path, monkeypatch, capfd):
    from chunklab.app import run_experiment

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    cfg = compose_run_config(SMALL)
    run_experiment(cfg, tmp_path / "a")  # this machine's, calibrated
    doc = json.loads(machine_profile_path(cfg.model, cfg.engine).read_text())
    doc["fingerprint"] |= {"cpu_model": "Intel(R) Xeon(R) Imaginary 9999", "cpu_logical_cores": 96}
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    capfd.readouterr()
    out = run_experiment(compose_run_config(SMALL + [f"engine.profile={other}"]), tmp_path / "b")
    lines = [l for l in capfd.readouterr().err.splitlines() if "another machine" in l]
    assert len(lines) == 1
    assert "Intel(R) Xeon(R) Imaginary 9999 (96 logical cores)" in lines[0]
    assert describe(fingerprint(cfg.model, cfg.engine)) in lines[0] and "cpu_model" in lines[0]
    assert out.summary["num_finished"] == 6  # used as asked, not refused


def test_the_serving_fit_recovers_known_costs_and_leaves_stalls_out():
    rng = np.random.default_rng(0)
    true = np.array([2e-3, 5e-5, 1e-6])
    probe_x = np.column_stack([np.ones(40), rng.integers(1, 2000, 40), rng.integers(0, 10**5, 40)]).astype(float)
    serve_x = np.column_stack([np.ones(400), rng.integers(1, 600, 400), rng.integers(0, 10**4, 400)]).astype(float)
    # serving runs 10% slower than the probe; every 50th serving step is a stall of the machine
    probe_y, serve_y = probe_x @ true, 1.1 * (serve_x @ true)
    serve_y[::50] *= 3 * STALL_RATIO
    assert np.allclose(fit_linear(probe_x, probe_y), true, rtol=1e-6)
    coef, left_out = fit_probe_and_serving(probe_x, probe_y, serve_x, serve_y)
    assert left_out == 8
    ratio = np.median((serve_x @ coef) / (serve_x @ true))
    assert 1.02 < ratio < 1.1  # pulled toward serving's 1.1, the probe keeps half the weight
    weights = np.r_[np.full(40, 1.0), np.full(400, 0.0)]
    assert np.allclose(fit_linear(np.r_[probe_x, serve_x], np.r_[probe_y, serve_y], weights + 1e-12), true, rtol=1e-3)


def test_a_calibration_whose_every_serving_step_stalled_keeps_the_probe_fit_and_says_so():
    """A machine busy throughout the replays (a contended CI runner): nothing to weigh, no crash."""
    rng = np.random.default_rng(2)
    true = np.array([2e-3, 5e-5, 1e-6])
    probe_x = np.column_stack([np.ones(40), rng.integers(1, 2000, 40), rng.integers(0, 10**5, 40)]).astype(float)
    serve_x = np.column_stack([np.ones(30), rng.integers(1, 600, 30), rng.integers(0, 10**4, 30)]).astype(float)
    serve_y = 3 * STALL_RATIO * (serve_x @ true)
    coef, left_out = fit_probe_and_serving(probe_x, probe_x @ true, serve_x, serve_y, np.arange(30) % 3)
    assert left_out == 30
    assert np.allclose(coef, fit_linear(probe_x, probe_x @ true))
    assert fit_on(left_out, 30).startswith("probe shapes (every serving step stalled")
    assert fit_on(29, 30) == fit_on(0, 0) == "probe shapes + serving replays"


def test_each_serving_replay_weighs_the_same_however_many_steps_it_ran():
    """A replay of full batches runs few long steps: weighted per step it would barely move the fit."""
    rng = np.random.default_rng(1)
    true = np.array([2e-3, 5e-5, 1e-6])
    probe_x = np.column_stack([np.ones(40), rng.integers(1, 2000, 40), rng.integers(0, 10**5, 40)]).astype(float)
    light = np.column_stack([np.ones(400), rng.integers(1, 40, 400), rng.integers(0, 10**3, 400)]).astype(float)
    full = np.column_stack([np.ones(20), rng.integers(400, 600, 20), rng.integers(10**4, 10**5, 20)]).astype(float)
    serve_x = np.r_[light, full]
    serve_y = np.r_[light @ true, 1.2 * (full @ true)]  # full batches run 20% over the probe's costs
    replay = np.r_[np.zeros(400, dtype=int), np.ones(20, dtype=int)]
    equal, _ = fit_probe_and_serving(probe_x, probe_x @ true, serve_x, serve_y, replay)
    per_step, _ = fit_probe_and_serving(probe_x, probe_x @ true, serve_x, serve_y)
    on_full = {name: np.median((full @ c) / (full @ true)) for name, c in (("equal", equal), ("per step", per_step))}
    assert on_full["per step"] < 1.03 < 1.05 < on_full["equal"] < 1.2, on_full


def test_paired_errors_compare_each_request_with_itself():
    real = pd.DataFrame({"point": "p", "repeat": [0, 0, 1, 1], "request_id": [1, 2, 1, 2],
                         "ttft_s": [1.0, 2.0, 1.0, 4.0], "e2e_s": [2.0, 4.0, 2.0, 4.0], "tpot_s": [0.1, None, 0.1, None]})
    sim = pd.DataFrame({"point": "p", "request_id": [2, 1], "ttft_s": [2.2, 1.1], "e2e_s": [4.0, 2.0],
                        "tpot_s": [None, 0.09]})
    table = paired_table(paired_errors(real, sim)).set_index("metric")
    assert table.loc["ttft", "n"] == 4 and table.loc["tpot", "n"] == 2  # no TPOT with one output token
    assert table.loc["ttft", "median_rel_error"] == pytest.approx(0.1)  # 0.1, 0.1, 0.1, 0.45
    assert table.loc["ttft", "p90_rel_error"] == pytest.approx(0.1 + 0.7 * (0.45 - 0.1))  # linear quantile
    assert table.loc["e2e", "median_rel_error"] == 0 and table.loc["tpot", "median_signed_error"] == pytest.approx(-0.1)
    with pytest.raises(pd.errors.MergeError):  # one simulated record per request and point
        paired_errors(real, pd.concat([sim, sim]))


@pytest.mark.parametrize("capacity", [0.37, 3.7, 37.0])
def test_capacity_bisection_brackets_the_true_capacity(capacity):
    seen = []

    def measure(rate):
        seen.append(rate)
        return {"rate_per_s": rate, "slo_attainment": 1.0 if rate <= capacity else 0.5}

    found = bisect(measure, 0.9, (3.7 * 0.96, 3.7 * 1.04), 0.03, widen=1.1)
    assert found.lo_req_per_s <= capacity < found.hi_req_per_s
    assert found.hi_req_per_s / found.lo_req_per_s <= 1.03 and len(found.probes) == len(set(seen))


def test_a_bracket_built_to_the_tolerance_is_decided_by_its_two_probes():
    """The capacity stage's measured search starts at hi / lo = 1 + rel_tol around its prediction:
    when the capacity lies inside, the two ends decide it (rounding must not add a third probe)."""
    def measure(rate):
        return {"rate_per_s": rate, "slo_attainment": 1.0 if rate <= 11.9 else 0.5}

    for centre in (11.7, 11.94, 12.1):
        half = math.sqrt(1.04)
        found = bisect(measure, 0.9, (centre / half, centre * half), 0.04, widen=1.08)
        assert len(found.probes) == 2 and found.lo_req_per_s <= 11.9 < found.hi_req_per_s


@pytest.mark.parametrize("capacity", [0.5, 5.0, 11.0, 30.0])
def test_a_growing_search_brackets_a_far_capacity_in_few_probes(capacity):
    """grow=True (the measured search): a prediction of 9.6 req/s that misses by 2x or 20x costs a
    handful of probes (steps of 8% would take 9 and 39), and the bracket still holds the capacity."""
    seen = []

    def measure(rate):
        seen.append(rate)
        return {"rate_per_s": rate, "slo_attainment": 1.0 if rate <= capacity else 0.5}

    half = math.sqrt(1.04)
    found = bisect(measure, 0.9, (9.6 / half, 9.6 * half), 0.04, widen=1.08, grow=True)
    assert found.lo_req_per_s <= capacity < found.hi_req_per_s
    assert found.hi_req_per_s / found.lo_req_per_s <= 1.04 * (1 + 1e-9)
    assert len(found.probes) <= 14 and len(found.probes) == len(set(seen))
    steps = bisect(measure, 0.9, (9.6 / half, 9.6 * half), 0.04, widen=1.08)
    if capacity < 5:
        assert len(found.probes) < len(steps.probes) / 2  # growing steps: far fewer probes


@pytest.mark.slow  # a full 1-thread calibration of TinyGPT (~5 min) and a 300-request measured run
def test_one_thread_is_another_machine_with_its_own_profile(tmp_path):
    """engine.threads=1 has its own fingerprint: a measured run at load 0.9 calibrates a 1-thread
    profile, resolves the rate from it and runs below this configuration's capacity (with the
    2-thread profile, 0.9 of its capacity is past what one thread serves)."""
    env = {k: v for k, v in os.environ.items() if k != "CHUNKLAB_CALIBRATION"} | {
        CACHE_ENV: str(tmp_path / "cache"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    proc = subprocess.run([sys.executable, "run.py", "engine.threads=1", "workload.load=0.9",
                           "workload.num_requests=300", "tracking.progress=false", f"hydra.run.dir={tmp_path}/run"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [profile] = (tmp_path / "cache").glob("tiny_gpt-*.json")
    doc = json.loads(profile.read_text())
    assert doc["fingerprint"]["torch_threads"] == 1 and "calibrating it now" in proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["conditions"]["torch_threads"] == "1" and summary["noise_guard"] == "on"
    import hashlib

    import mlflow

    client = mlflow.MlflowClient(env["MLFLOW_TRACKING_URI"])
    tags = client.search_runs([client.get_experiment_by_name("chunklab").experiment_id])[0].data.tags
    assert tags["profile.digest"] == hashlib.sha256(profile.read_bytes()).hexdigest()[:12]  # used, not just made
    two = compose_run_config(["engine.threads=2"])
    assert doc["fingerprint_id"] != fingerprint_id(fingerprint(two.model, two.engine))
    s = summary["summary"]
    assert s["slo_attainment"] >= 0.9  # below capacity
    assert 0.9 <= s["step_time_vs_predicted_p50"] <= 1.1  # the profile is this configuration's


def test_the_noise_floor_pairs_each_measured_repeat_with_the_others():
    from chunklab.experiments.fidelity import repeat_floor

    real = pd.DataFrame({"point": "p", "repeat": [0, 0, 1, 1], "request_id": [1, 2, 1, 2],
                         "ttft_s": [1.0, 2.0, 1.1, 4.0], "e2e_s": [2.0, 4.0, 2.0, 4.0], "tpot_s": [0.1, None, 0.1, None]})
    floor = repeat_floor(real).set_index("metric")
    # ttft, both orders: 0.1, 1.0 (repeat 1 against 0), 1/11, 0.5 (0 against 1)
    assert floor.loc["ttft", "n"] == 4 and floor.loc["ttft", "median_rel_error"] == pytest.approx(0.3)
    assert floor.loc["e2e", "median_rel_error"] == 0 and floor.loc["tpot", "n"] == 2


def test_the_drift_table_sets_each_repeats_step_ratio_beside_its_signed_error():
    from chunklab.experiments.fidelity import drift_correlation, drift_table

    runs = pd.DataFrame({"point": ["q", "p", "q", "p"], "repeat": [0, 0, 1, 1], "sentinel_ratio": [1.0, 1.1, 1.2, 1.3],
                         "step_time_vs_predicted_p50": [1.05, 1.0, 1.3, 1.2]})  # in the order they ran
    errors = pd.DataFrame({"point": ["p", "p", "p", "q", "q", "q"], "repeat": [0, 0, 1, 0, 1, 1],
                           "metric": "ttft", "signed_error": [0.0, -0.02, -0.2, -0.05, -0.3, -0.4]})
    scaled = errors.assign(signed_error=errors["signed_error"] / 10)
    drift = drift_table(runs, {"": errors, "sentinel": scaled})
    assert list(zip(drift["point"], drift["repeat"])) == [("q", 0), ("p", 0), ("q", 1), ("p", 1)]  # run order kept
    drift = drift.set_index(["point", "repeat"])
    assert drift.loc[("p", 0), "median_signed_error_ttft"] == pytest.approx(-0.01)
    assert drift.loc[("q", 1), "median_signed_error_ttft"] == pytest.approx(-0.35)
    assert drift.loc[("q", 1), "median_signed_error_ttft (sentinel)"] == pytest.approx(-0.035)
    assert drift_correlation(drift.reset_index()) < -0.9  # slower steps, more optimistic simulation
    assert drift_correlation(drift.reset_index(), ratio="sentinel_ratio") < -0.5


def test_the_sentinel_weights_each_step_by_its_predicted_time():
    """Three small steps at their prediction and one long step at twice it: the plain median says
    1.0, the machine's time says 2 (the long step holds most of the predicted seconds)."""
    from chunklab.calibration.sentinel import time_weighted_median

    assert time_weighted_median([1.0, 1.0, 2.0, 1.0], [0.001, 0.001, 0.010, 0.001]) == 2.0
    assert time_weighted_median([1.0, 3.0, 2.0], [1.0, 1.0, 1.0]) == 2.0  # equal weights: the median
    assert time_weighted_median([0.9, 1.2], [3.0, 1.0]) == 0.9
    with pytest.raises(ValueError):
        time_weighted_median([], [])


def test_the_speed_sentinel_reads_the_real_engine_against_the_profile():
    """Each read replays the same requests on the real engine and returns the time-weighted median
    of its steps' measured / predicted seconds: against a profile that predicts a thousand times too
    much, far under 1; against one a million times too little, far over."""
    from chunklab.calibration.sentinel import SpeedSentinel
    from chunklab.cost_models.linear import LinearCostModel
    from chunklab.cost_models.step_shape import FEATURES

    def sentinel(seconds_per_token):
        coef = tuple(seconds_per_token if f == "tokens" else 0.0 for f in FEATURES)
        return SpeedSentinel(MICRO, EngineConfig(compile=False), LinearCostModel(coef), num_requests=6)

    slow, fast = sentinel(1.0), sentinel(1e-9)
    a, b = slow.read(), slow.read()
    assert a.num_steps > 6 and b.num_steps > 6 and a.duration_s > 0
    assert a.ratio < 1e-2 and b.ratio < 1e-2
    assert fast.read().ratio > 1e2


def test_a_sentinel_reading_is_taken_over_the_one_its_calibration_took():
    """Right after a fit the sentinel read 0.94-0.96 here, not 1: its readings are divided by that
    baseline (profile["sentinel"]), 1 for a profile from before it was recorded; none can be 0."""
    from chunklab.calibration.sentinel import SpeedSentinel, baseline_of
    from chunklab.cost_models.linear import LinearCostModel
    from chunklab.cost_models.step_shape import FEATURES

    coef = tuple(1e-6 if f == "tokens" else 0.0 for f in FEATURES)
    reading = SpeedSentinel(MICRO, EngineConfig(compile=False), LinearCostModel(coef), num_requests=6,
                            baseline_ratio=4.0).read()
    assert reading.raw_ratio > 0 and reading.ratio == pytest.approx(reading.raw_ratio / 4.0)
    assert baseline_of({"sentinel": {"baseline_ratio": 0.94}}) == 0.94 and baseline_of({}) == 1.0
    with pytest.raises(ValueError, match="baseline_ratio=0"):
        SpeedSentinel(MICRO, EngineConfig(compile=False), LinearCostModel(coef), baseline_ratio=0)


def test_every_measured_stage_reruns_when_the_machine_changes_and_no_simulated_one_does():
    """dvc.yaml: the `machine` stage runs on every repro; measured stages depend on its output."""
    import yaml

    stages = yaml.safe_load((Path(__file__).resolve().parents[1] / "dvc.yaml").read_text())["stages"]
    assert stages["machine"]["always_changed"] is True
    assert [next(iter(o)) if isinstance(o, dict) else o for o in stages["machine"]["outs"]] == ["outputs/machine.json"]
    on_machine = {name for name, st in stages.items() if "outputs/machine.json" in st.get("deps", [])}
    # the measured stages, and the report stages that name the machine in captions and warnings
    assert on_machine == {"calibrate", "prefill_split", "token_budget", "fidelity", "budget_policy", "perf", "capacity", "topologies",
                          "clocks", "tables", "plots", "report"}
    assert not any(name.startswith("sim_") for name in on_machine)


def test_the_machine_identity_is_stable_here_and_differs_on_another_cpu(monkeypatch):
    from chunklab.calibration import fingerprint as fp

    here = fp.machine_identity()
    assert here == fp.machine_identity() and set(here) == {"cpu_model", "cpu_arch", "cpu_logical_cores",
                                                          "torch_version", "torch_threads"}
    assert "source_digest" not in here  # code changes reach stages through their own deps
    monkeypatch.setattr(fp, "cpu_model", lambda: "AMD EPYC (family 26 model 2 stepping 0, avx512f)")
    assert fp.machine_identity() != here


def test_a_profile_differing_only_in_engine_settings_is_not_called_another_machine():
    from chunklab.calibration.machine import what_differs

    assert what_differs(["cpu_model", "forward_path"]) == "another machine"
    assert what_differs(["forward_path"]) == "another engine setting"  # the perf stage's 'before' config
    assert what_differs(["torch_threads", "source_digest"]) == "another engine setting"
    assert what_differs(["source_digest"]) == "another engine build"
