"""The simulated engine: the real scheduler and serving loop, step times from the profile."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chunklab.app import run_experiment
from chunklab.cost_models.fits.profile import compare, fit_linear
from chunklab.calibration.shapes import calibration_shapes
from chunklab.config import ConfigError, EngineConfig, ModelConfig, SchedulerConfig
from chunklab.cost_models.linear import load_cost_model
from chunklab.engine.scheduler import ScheduledChunk, StepPlan
from chunklab.engine.sequence import Request, Sequence
from chunklab.cost_models.step_shape import FEATURES, Segment, StepShape
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.simulate import requests_of, simulate, simulate_many
from chunklab.metrics.summary import noise_guard
from helpers import MICRO, cpu_flags

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "outputs/profiles/machine.json"  # the committed tables' machine: no calibration, the same numbers anywhere


def seq(num_prompt: int, num_computed: int) -> Sequence:
    s = Sequence(Request(num_prompt * 1000 + num_computed, 0.0, (1,) * num_prompt, 4))
    s.num_computed_tokens = num_computed
    return s


def test_step_shape_features_count_the_work():
    plan = StepPlan(decodes=[seq(11, 10), seq(21, 20)],
                    prefills=[ScheduledChunk(seq(5, 0), 5, True), ScheduledChunk(seq(20, 6), 4, False)])
    mixed = dict(zip(FEATURES, StepShape.of(plan, True).features()))
    assert mixed == {"forwards": 1, "tokens": 11, "sampled_rows": 3, "decode_rows": 2, "decode_ctx_padded": 2 * 21,
                     "decode_ctx": 11 + 21, "segments": 2, "causal_pairs": 15, "cached_pairs": 4 * 10, "cached_ctx": 10}
    separate = dict(zip(FEATURES, StepShape.of(plan, False).features()))
    assert separate == mixed | {"forwards": 3}  # decodes, then one pass per chunk


def test_linear_fit_recovers_known_costs():
    shapes = calibration_shapes(1, 80, 8, 2048)
    true = np.array([2e-3, 5e-5, 1e-5, 1e-6, 4e-7, 2e-7, 2e-4, 3e-8, 3e-8, 1e-6])
    times = [float(np.dot(true, s.features())) for s in shapes]
    x = np.array([s.features() for s in shapes])
    assert np.allclose(fit_linear(x, np.array(times)), true, rtol=1e-4, atol=1e-12)
    assert compare(shapes, times, 0.25, 0)["linear"].median_rel_error < 1e-6


class ShapeSpy:
    """Stands in for the cost model: the engine hands it the shape of every plan it runs, and it keeps them."""
    def __init__(self, mixed_batch):
        self.mixed_batch, self.shapes = mixed_batch, []

    def predict(self, shape):
        self.shapes.append(shape)
        return 1e-3


@pytest.mark.parametrize("mixed_batch", [True, False])
def test_probe_runs_exactly_the_wanted_shapes(mixed_batch):
    from chunklab.calibration.probe import ShapeProbe

    probe = ShapeProbe(MICRO, EngineConfig(num_blocks=256))
    spy = probe.engine.cost_model = ShapeSpy(mixed_batch)
    wanted = [StepShape((40,), (), mixed_batch), StepShape((), (Segment(64, 0, True),), mixed_batch),
              StepShape((100, 17, 300), (Segment(30, 200, False),), mixed_batch),
              StepShape((50,), (Segment(16, 0, True), Segment(20, 0, True), Segment(64, 32, False)), mixed_batch)]
    timed, lead_ins = [], []
    for shape in wanted:
        spy.shapes.clear()
        assert probe.time_step(shape) > 0
        timed.append(spy.shapes[-1])
        lead_ins.append(spy.shapes[:-1])
    assert timed == wanted
    # the decode rows decoded just before, at the preceding positions, on the same sequences
    assert lead_ins[2] == [StepShape((100 - k, 17 - k, 300 - k), (), mixed_batch) for k in (2, 1)]
    assert lead_ins[1] == [wanted[1]]  # no decode rows: the shape itself, on other sequences
    assert probe.engine.block_manager.num_used_blocks == 0


def sim_config(*overrides):
    return compose_run_config(["engine=simulated", f"engine.profile={PROFILE}", "tracking=none", "tracking.progress=false", *overrides])


def test_simulated_runs_are_byte_identical(tmp_path):
    cfg = sim_config("workload.num_requests=120")
    a, b = run_experiment(cfg, tmp_path / "a"), run_experiment(cfg, tmp_path / "b")
    assert (tmp_path / "a/requests.csv").read_bytes() == (tmp_path / "b/requests.csv").read_bytes()
    assert (tmp_path / "a/steps.csv").read_bytes() == (tmp_path / "b/steps.csv").read_bytes()
    assert json.dumps(a.summary) == json.dumps(b.summary)
    doc = json.loads((tmp_path / "a/summary.json").read_text())
    assert doc["executor"] == "simulated" and "placeholder" in doc["note"]
    assert doc["conditions_line"].startswith("SIMULATED")
    assert a.summary["num_finished"] == 120 and a.summary["makespan_s"] > 0
    assert a.tags["executor"] == "simulated" and len(a.tags["profile.digest"]) == 12


def test_simulated_step_time_is_the_profiles_prediction(tmp_path):
    out = run_experiment(sim_config("workload.num_requests=30"), tmp_path)
    steps = list(out.result.steps)
    assert all(s.duration_s == pytest.approx(s.predicted_s, rel=1e-9) for s in steps)
    # the clock only moves by predictions and idle jumps: steps never overlap
    assert all(b.start_s >= a.start_s + a.duration_s - 1e-12 for a, b in zip(steps, steps[1:]))


def test_a_scaled_cost_model_is_the_same_run_on_a_slower_clock():
    """hardware.step_time_scale k at arrival rate r/k is the unscaled run at rate r, every time
    k times longer: the scheduler meets the same decisions. A scale left out, or applied twice,
    breaks the equality."""
    k = 1.3
    base, scaled = (sim_config("workload.num_requests=80", "workload.rate_per_s=6.0"),
                    sim_config("workload.num_requests=80", f"workload.rate_per_s={6.0 / k}",
                               f"hardware.step_time_scale={k}"))
    (s1, r1), (s2, r2) = simulate(base, requests_of), simulate(scaled, requests_of)
    assert [r["status"] for r in r1] == [r["status"] for r in r2]
    for a, b in zip(r1, r2):
        for key in ("ttft_s", "e2e_s", "tpot_s"):
            assert b[key] == pytest.approx(k * a[key], rel=1e-9) if a[key] is not None else b[key] is None
    assert s2["makespan_s"] == pytest.approx(k * s1["makespan_s"], rel=1e-9)
    from chunklab.cost_models import cost_model_for

    plain, _ = cost_model_for(base.model, base.engine, base.hardware, required=True)
    slower, _ = cost_model_for(scaled.model, scaled.engine, scaled.hardware, required=True)
    assert slower.provenance.digest != plain.provenance.digest
    assert slower.provenance.conditions["step_time_scale"] == "1.3" and "x1.3" in slower.provenance.phrase


def test_a_simulated_run_never_imports_torch(tmp_path):
    code = ("import sys; from pathlib import Path; from chunklab.experiments.compose import compose_run_config;"
            "from chunklab.app import run_experiment;"
            "cfg = compose_run_config(['engine=simulated', 'engine.profile=outputs/profiles/machine.json', 'tracking=none', 'workload.num_requests=20']);"
            f"run_experiment(cfg, Path({str(tmp_path)!r})); print(sorted(m for m in sys.modules if m == 'torch'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


WORKLOADS = ["ch10_mixed", "short_prompts", "azure_conv"]  # the trace as vendored (data/traces/)


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("scheduler", ["decode_first", "prefill_first", "sarathi"])
@pytest.mark.parametrize("slo", ["ch10", "itl_p99"])
def test_every_workload_scheduler_and_slo_simulates(tmp_path, workload, scheduler, slo):
    out = run_experiment(sim_config(f"workload={workload}", f"scheduler={scheduler}", f"slo={slo}",
                                    "workload.num_requests=40", "slowdown=true"), tmp_path)
    assert out.summary["num_finished"] + out.summary["num_rejected"] == 40
    assert 0 <= out.summary["slo_attainment"] <= 1


def test_profile_for_another_model_is_a_config_error():
    cfg = sim_config("model=micro")
    with pytest.raises(ConfigError, match=r"calibrated for num_layers=6, this run has num_layers=2"):
        load_cost_model(cfg.model, cfg.engine, required=True)
    model, why = load_cost_model(cfg.model, dataclasses.replace(cfg.engine, executor="torch"), required=False)
    assert model is None and "num_layers" in why  # a real run goes on, unguarded


def test_missing_profile_is_a_config_error():
    cfg = sim_config("engine.profile=/no/such/profile.json")
    with pytest.raises(ConfigError, match="engine.profile='/no/such/profile.json': no such file"):
        load_cost_model(cfg.model, cfg.engine, required=True)


def test_noise_guard_flags_steps_slower_than_twice_their_prediction():
    from chunklab.engine.engine import StepRecord
    from chunklab.engine.step_log import StepLog

    def log(*pairs):
        steps = StepLog()
        for duration, predicted in pairs:
            steps.append(StepRecord(0.0, duration, 1, 0, 0, 1, 0, 10, 0, predicted))
        return steps

    guard = noise_guard(log((0.010, 0.010), (0.030, 0.010), (0.019, 0.010), (0.005, 0.010)))
    assert guard["noisy_steps_share"] == 0.25 and guard["worst_step_excess"] == pytest.approx(3.0)
    assert noise_guard(log((0.01, None))) == {}
    assert log((0.01, None))[0].predicted_s is None


def test_a_calibrated_profile_guards_real_runs_and_drives_simulated_ones(tmp_path):
    from chunklab.calibration.profile import CalibrationSettings, calibrate

    base = ["model=micro", "tracking=none", "tracking.progress=false", "workload.num_requests=12",
            "workload.classes.0.min_tokens=300", "workload.classes.0.max_tokens=300",
            "workload.min_output_tokens=4", "workload.max_output_tokens=8", "scheduler.budget=64"]
    cfg = compose_run_config(base)
    cal = calibrate(cfg.model, cfg.engine, CalibrationSettings(num_random_shapes=20, rounds=1, burst=2,
                                                               replay_requests=4))
    profile = tmp_path / "micro.json"
    profile.write_text(json.dumps(cal.profile))
    real = run_experiment(compose_run_config(base + [f"engine.profile={profile}"]), tmp_path / "real")
    # the speed sentinel's reading right after the fit: later readings are taken over it
    readings = cal.profile["sentinel"]["readings"]
    assert len(readings) == 3 and cal.profile["sentinel"]["baseline_ratio"] == sorted(readings)[1] > 0
    from chunklab.calibration.sentinel import SpeedSentinel

    cfg = compose_run_config(base + [f"engine.profile={profile}"])
    sentinel = SpeedSentinel.for_run(cfg.model, cfg.engine)
    assert sentinel.baseline_ratio == cal.profile["sentinel"]["baseline_ratio"]
    assert 0 <= real.summary["noisy_steps_share"] <= 1 and real.summary["worst_step_excess"] > 0
    assert all(s.predicted_s > 0 for s in real.result.steps)
    assert json.loads((tmp_path / "real/summary.json").read_text())["noise_guard"] == "on"
    sim = run_experiment(compose_run_config(base + [f"engine.profile={profile}", "engine.executor=simulated"]),
                         tmp_path / "sim")
    assert sim.summary["num_finished"] == real.summary["num_finished"] == 12
    assert "noisy_steps_share" not in sim.summary  # a simulated step is its own prediction
    assert sim.summary["steps"] > 0


def test_a_real_run_without_a_matching_profile_says_so(tmp_path):
    out = run_experiment(compose_run_config(["model=micro", "tracking=none", "workload.num_requests=3",
                                             "engine.profile=outputs/profiles/machine.json"]), tmp_path)  # TinyGPT's
    assert "noisy_steps_share" not in out.summary
    assert json.loads((tmp_path / "summary.json").read_text())["noise_guard"].startswith("off: engine.profile=")


@pytest.mark.slow  # two 15-trial Optuna sweeps of 2,000 simulated requests a trial (~25 s each on 2 cores)
def test_the_tuning_sweep_reproduces_the_committed_trials_whichever_blas_kernels_this_cpu_picks(tmp_path):
    """Optuna's TPE goes through numpy and OpenBLAS, whose vector paths depend on the CPU; on an
    Intel Xeon its own (SkylakeX) kernels turned ch10_mixed's 15th trial into another setting
    than the AMD EPYCs that made the committed trials. The sim_* stages run under
    scripts/exact.sh, so whatever this CPU's libraries would pick, the trials are the committed ones."""
    import pandas as pd

    flags = cpu_flags()
    if not {"avx2", "fma"} <= flags:
        pytest.skip("scripts/exact.sh pins OpenBLAS's Haswell kernels, which need AVX2 and FMA")
    committed = pd.read_csv(ROOT / "outputs" / "simulated" / "tuning" / "trials.csv")
    expected = committed[committed["workload"] == "ch10_mixed"].head(15).reset_index(drop=True)
    sweep = ("import dataclasses, sys; from pathlib import Path; from chunklab.stages import sim_tuning; "
             "from chunklab.stages.shared_params import SimParams; from chunklab.stages.typed_yaml import load_section; "
             "p = load_section('params.yaml', 'sim_tuning', sim_tuning.SimTuningParams); "
             "sim = load_section('params.yaml', 'sim', SimParams); "
             "_, t = sim_tuning.sweep('ch10_mixed', dataclasses.replace(p, n_trials=15), sim, "
             f"Path('outputs/profiles/machine.json'), Path({str(tmp_path)!r})); t.to_csv(sys.argv[1], index=False, float_format='%.6g')")  # as the stage writes
    for kernels in ("SkylakeX" if "avx512f" in flags else "Prescott", "Haswell"):  # what a CPU's OpenBLAS might pick
        out = tmp_path / f"trials_{kernels}.csv"
        env = os.environ | {"OPENBLAS_CORETYPE": kernels, "NPY_DISABLE_CPU_FEATURES": ""}
        subprocess.run(["scripts/exact.sh", sys.executable, "-c", sweep, str(out)], cwd=ROOT, env=env, check=True)
        pd.testing.assert_frame_equal(pd.read_csv(out), expected, obj=f"trials ({kernels})")


def test_exact_sh_holds_numpy_and_openblas_to_one_vector_path_whatever_the_caller_asks():
    """The exact stages' wrapper (dvc.yaml): numpy's AVX-512 loops off, OpenBLAS on one thread with
    its Haswell kernels, even when the caller's environment asks for others."""
    probe = ("import json, numpy; from threadpoolctl import threadpool_info; "
             "from numpy._core._multiarray_umath import __cpu_features__ as f; "
             "print(json.dumps({'blas': [(i['internal_api'], i['architecture'], i['num_threads']) "
             "for i in threadpool_info() if i['user_api'] == 'blas'], 'v4': f.get('X86_V4', False)}))")
    env = os.environ | {"OPENBLAS_CORETYPE": "SkylakeX", "OPENBLAS_NUM_THREADS": "2", "NPY_DISABLE_CPU_FEATURES": ""}
    run = subprocess.run(["scripts/exact.sh", sys.executable, "-c", probe], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    seen = json.loads(run.stdout.splitlines()[-1])
    assert seen["v4"] is False  # numpy's AVX-512 (x86-64-v4) loops are off, or this CPU has none
    assert seen["blas"] and all(threads == 1 for _, _, threads in seen["blas"])
    if {"avx2", "fma"} <= cpu_flags():
        assert all(arch == "Haswell" for api, arch, _ in seen["blas"] if api == "openblas"), seen
    else:
        assert "lacks AVX2/FMA" in run.stderr


def _square(x: int) -> int:  # a pool task: top level, so it pickles
    return x * x


@pytest.mark.parametrize("processes", [1, 2])
def test_simulate_many_keeps_order_and_reports_a_labelled_grid_on_stderr(capsys, processes):

    assert simulate_many(list(range(20)), processes, fn=_square) == [x * x for x in range(20)]
    assert capsys.readouterr().err == ""  # unlabelled (a search's probes): silent
    assert simulate_many(list(range(20)), processes, fn=_square, label="grid") == [x * x for x in range(20)]
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"[grid] run {k}/20" for k in range(2, 21, 2)]
