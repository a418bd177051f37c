"""The spec-sheet (roofline) cost model, hardware and model presets, the KV pool sized from memory,
and the fits that set the efficiencies (issue 20). No GPU and no torch needed."""
import dataclasses
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from chunklab.config import ConfigError, RooflineEfficiency
from chunklab.cost_models import cost_model_for
from chunklab.engine.kv_pool import kv_bytes_per_block, pool_blocks, weight_bytes
from chunklab.cost_models.roofline import RooflineCostModel, elementwise_s, gemm_s, layer_elementwise, layer_gemms
from chunklab.cost_models.step_shape import FEATURES, Segment, StepShape
from chunklab.experiments.compose import compose_run_config
from chunklab.model.sizes import DTYPE_BYTES, num_parameters

ROOT = Path(__file__).resolve().parents[1]
H100_8B = ["engine=simulated", "tracking=none", "model=llama3_8b", "hardware=h100"]


def h100_8b(*extra):
    return compose_run_config([*H100_8B, *extra])


def _cost_inputs(cfg):
    """What a cost model is built from: the model, the engine and the hardware, never the whole run."""
    return cfg.model, cfg.engine, cfg.hardware


@pytest.mark.parametrize("model, params", [("llama3_8b", 8_030_261_248), ("llama2_7b", 6_738_415_616),
                                           ("mistral_7b", 7_241_732_096), ("mistral_nemo_12b", 12_247_782_400)])
def test_model_presets_have_their_published_parameter_counts(model, params):
    cfg = compose_run_config(["engine=simulated", "tracking=none", f"model={model}", "hardware=h100"])
    assert num_parameters(cfg.model) == params


@pytest.mark.parametrize("hardware, bf16_tflops, bandwidth_gb_s, memory_gb", [
    ("h100", 989.4, 3350, 80), ("h200", 989.4, 4800, 141), ("a100_80g", 312.0, 2039, 80)])
def test_hardware_presets_carry_their_spec_sheets(hardware, bf16_tflops, bandwidth_gb_s, memory_gb):
    h = compose_run_config(["engine=simulated", "tracking=none", "model=llama3_8b", f"hardware={hardware}"]).hardware
    assert (h.peak_dense_tflops["bfloat16"], h.memory_bandwidth_gb_per_s, h.memory_gb) == \
        (bf16_tflops, bandwidth_gb_s, memory_gb)
    assert h.cost_model == "roofline" and "datasheet" in h.spec_source and h.efficiency.source


def reference_pass_s(cm: RooflineCostModel, rows, sampled, pairs, kv_tokens) -> float:
    """The module's formulas term by term, per layer: what the folded constants must equal."""
    m, h, e = cm.model, cm.hardware, cm.hardware.efficiency
    peak, bw, b = h.peak_dense_tflops[m.dtype] * 1e12, h.memory_bandwidth_gb_per_s * 1e9, DTYPE_BYTES[m.dtype]
    layer = sum(gemm_s(rows, g.k, g.n, peak, bw, e, b) for g in layer_gemms(m))
    layer += sum(elementwise_s(rows, n, bw, e, b) for _, n in layer_elementwise(m))
    layer += 4 * m.num_heads * m.head_dim * pairs / (peak * e.attention_prefill)
    layer += 2 * m.num_kv_heads * m.head_dim * b * kv_tokens / (bw * e.attention_decode_bandwidth)
    return m.num_layers * layer + gemm_s(sampled, m.d_model, m.vocab_size, peak, bw, e, b) + e.step_overhead_s


def test_folded_prediction_equals_the_formulas_term_by_term():
    cm, _ = cost_model_for(*_cost_inputs(h100_8b()), required=True)
    rng = random.Random(0)
    for _ in range(200):
        decodes = tuple(rng.randint(2, 8000) for _ in range(rng.randint(0, 256)))
        segs = tuple(Segment(rng.randint(1, 4096), rng.choice([0, rng.randint(1, 4000)]), rng.random() < 0.5)
                     for _ in range(rng.randint(0 if decodes else 1, 2)))
        f = StepShape(decodes, segs, True).features()
        i = {n: k for k, n in enumerate(FEATURES)}
        want = reference_pass_s(cm, f[i["tokens"]], f[i["sampled_rows"]], f[i["causal_pairs"]] + f[i["cached_pairs"]],
                                f[i["decode_ctx"]] + f[i["cached_ctx"]])
        assert cm.predict_features(f) == pytest.approx(want, rel=1e-12)


def test_roofline_shapes_decode_by_bandwidth_and_prefill_by_flops():
    cfg = h100_8b()
    cm, _ = cost_model_for(*_cost_inputs(cfg), required=True)
    e = cfg.hardware.efficiency
    one = cm.predict_features(StepShape((100,), (), True).features())
    weights_s = weight_bytes(cfg.model) / (cfg.hardware.memory_bandwidth_gb_per_s * 1e9 * e.weight_bandwidth)
    assert weights_s < one < 1.3 * weights_s + e.step_overhead_s  # batch-1 decode: the weights read once
    # a longer context reads more K/V; more decode rows cost less than proportionally (weights shared)
    assert cm.predict_features(StepShape((8000,), (), True).features()) > one
    batch = cm.predict_features(StepShape((100,) * 64, (), True).features())
    assert one < batch < 2 * one
    # a 4096-token prefill is compute bound: within 2x of its FLOPs at the fitted peak share
    prefill = cm.predict_features(StepShape((), (Segment(4096, 0, True),), True).features())
    flops = 2 * 4096 * (num_parameters(cfg.model) - cfg.model.vocab_size * cfg.model.d_model)
    assert flops / (989.4e12 * e.gemm_max) < prefill < 2 * flops / (989.4e12 * e.gemm_max)


def test_a_profile_run_and_a_roofline_run_share_one_interface(tmp_path):
    """The engine, metrics and tracking do not know which cost model ran: only its tags say."""
    from chunklab.app import run_experiment

    profile_out = run_experiment(compose_run_config(["engine=simulated", "tracking=none", "workload.num_requests=20"]),
                                 tmp_path / "a")
    roof_out = run_experiment(h100_8b("workload.num_requests=20"), tmp_path / "b")
    assert profile_out.tags["cost_model"] == "profile" and roof_out.tags["cost_model"] == "roofline"
    assert roof_out.summary["num_finished"] == 20 and "roofline cost model" in roof_out.conditions["cost_model"]
    assert roof_out.conditions["device"] == "simulated (NVIDIA H100 SXM5 80 GB (spec sheet))"


def test_the_kv_pool_is_sized_from_memory_as_vllm_does():
    cfg = h100_8b()
    usable = 80e9 * 0.9 - 1e9
    assert cfg.scheduler.max_num_seqs == 256
    assert cfg.engine.num_blocks == pool_blocks(cfg.model, cfg.engine, cfg.scheduler, cfg.hardware) > 0
    kv = cfg.engine.num_blocks * kv_bytes_per_block(cfg.model, cfg.engine)
    assert 0.7 * (usable - weight_bytes(cfg.model)) < kv <= usable - weight_bytes(cfg.model)
    assert kv_bytes_per_block(cfg.model, cfg.engine) == 2 * 32 * 8 * 128 * 2 * 16  # K and V, 32 layers, 8 KV heads, bf16
    bigger = h100_8b("hardware.memory_gb=141")
    assert bigger.engine.num_blocks > cfg.engine.num_blocks
    assert h100_8b("engine.num_blocks=1000").engine.num_blocks == 1000  # an explicit pool is kept


def test_a_model_too_big_for_the_device_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="mistral_nemo_12b.*tensor parallelism"):
        compose_run_config(["engine=simulated", "tracking=none", "model=mistral_nemo_12b", "hardware=h100",
                            "hardware.memory_gb=24"])
    proc = subprocess.run([sys.executable, "run.py", "engine=simulated", "model=mistral_nemo_12b", "hardware=a100_80g",
                           "hardware.memory_gb=24", "tracking=none"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "hardware=a100_80g" in proc.stderr


def test_a_spec_sheet_is_refused_for_a_measured_run():
    with pytest.raises(ConfigError, match="hardware='h100'.*engine=simulated"):
        compose_run_config(["tracking=none", "model=llama3_8b", "hardware=h100"])


def test_trace_lengths_fit_the_model_when_length_scale_is_null():
    from chunklab.workload import make_requests

    tiny = compose_run_config(["engine=simulated", "tracking=none", "workload=azure_conv", "workload.num_requests=50"])
    big = h100_8b("workload=azure_conv", "workload.num_requests=50")
    tiny_prompts = [len(r.prompt_token_ids) for r in make_requests(tiny.workload, tiny.model)[0]]
    big_prompts = [len(r.prompt_token_ids) for r in make_requests(big.workload, big.model)[0]]
    assert big_prompts[0] == 374 and tiny_prompts[0] == round(374 * 0.5)  # the trace's first row: 374 tokens


def test_the_whole_trace_at_production_scale_accounts_for_every_request_small():
    """The issue's command on the trace's first 2,000 rows (the whole trace: the slow test below)."""
    from chunklab.experiments.simulate import simulate

    s = simulate(h100_8b("workload=azure_conv", "workload.num_requests=2000"))
    assert s["num_finished"] + s["num_rejected"] == 2000 and s["num_unfinished"] == 0
    assert s["running_mean"] > 8  # the pool serves more than TinyGPT's 8 sequences at once


@pytest.mark.slow
def test_the_whole_conversation_trace_on_h100_through_run_py(tmp_path):
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    proc = subprocess.run([sys.executable, "run.py", *H100_8B[:1], "model=llama3_8b", "hardware=h100",
                           "workload=azure_conv", "workload.num_requests=null", "tracking.progress=false",
                           f"hydra.run.dir={tmp_path}/run"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    s = json.loads((tmp_path / "run" / "summary.json").read_text())["summary"]
    assert s["num_requests"] == 19_366 and s["num_finished"] + s["num_rejected"] == 19_366


def vidur_devices():
    """params.yaml's cost_models.devices: (name, preset, operator times) of each device fit on its own data."""
    from chunklab.stages.cost_models import CostModelsParams
    from chunklab.stages.typed_yaml import load_section

    devices = load_section(ROOT / "params.yaml", "cost_models", CostModelsParams).devices
    return [(d.name, d.hardware, ROOT / d.data) for d in devices]


@pytest.fixture(scope="module")
def vidur_fits():
    from chunklab.cost_models.fits.vidur import fit_vidur

    fits = {}
    for _, hardware, data in vidur_devices():
        cfg = compose_run_config(["engine=simulated", "tracking=none", "model=llama2_7b", f"hardware={hardware}"])
        fits[hardware] = fit_vidur(cfg.model, cfg.hardware, data)
    return fits


def test_each_gpu_preset_is_fit_on_its_own_device():
    assert {(n, h) for n, h, _ in vidur_devices()} >= {("h100", "h100"), ("a100", "a100_80g")}
    for name, hardware, data in vidur_devices():
        assert data.name.startswith(f"{name}_") and data.is_file(), (name, data)


@pytest.mark.parametrize("hardware, fit_on", [("h100", "h100"), ("a100_80g", "a100_80g"), ("h200", "h100")])
def test_hardware_efficiencies_are_the_vidur_fit(vidur_fits, hardware, fit_on):
    """conf/hardware/*.yaml state their fit's numbers (4 significant digits): H100 and A100 their own
    device's, H200 the H100 fit's (borrowed); refitting the vendored data must give them back."""
    fit = vidur_fits[fit_on]
    e = compose_run_config(["engine=simulated", "tracking=none", "model=llama2_7b",
                            f"hardware={hardware}"]).hardware.efficiency
    for key, value in fit.efficiency.items():
        assert getattr(e, key) == float(f"{value:.4g}"), (hardware, key)
    assert e.attention_decode_bandwidth == e.weight_bandwidth
    held = fit.errors[fit.errors["split"] == "held out"].set_index("op")
    assert held.loc["layer (sum)", "median_rel_error"] < 0.10  # the fit predicts unseen token counts
    assert set(held.index) >= {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}


def test_two_devices_fit_two_sets_of_efficiencies(vidur_fits):
    """Same model, two devices: the fits differ (A100 reaches its GEMM plateau at fewer rows)."""
    h100, a100 = vidur_fits["h100"].efficiency, vidur_fits["a100_80g"].efficiency
    assert a100["gemm_half_rows"] < 0.6 * h100["gemm_half_rows"]


def test_a100_decode_steps_need_the_a100_fit(vidur_fits):
    """Issue 52: priced with the H100 fit's efficiencies, A100's decode-sized steps (<= 256 tokens) come
    out ~50-70% too slow; its own fit brings a whole layer's median within 10%."""
    from chunklab.cost_models.fits.vidur import read_operator_times, step_error, with_efficiency

    data = dict((h, d) for _, h, d in vidur_devices())["a100_80g"]
    cfg = compose_run_config(["engine=simulated", "tracking=none", "model=llama2_7b", "hardware=a100_80g"])
    times = read_operator_times(data)
    borrowed = step_error(times, cfg.model, with_efficiency(cfg.hardware, vidur_fits["h100"].efficiency))
    own = step_error(times, cfg.model, cfg.hardware)
    assert own["n"] == borrowed["n"] > 30
    assert borrowed["median_rel_error"] > 0.4, borrowed
    assert abs(own["median_rel_error"]) < 0.10, own


def test_presets_say_whose_fit_they_carry(vidur_fits):
    """outputs/cost_models/presets.csv (the REPORT's production section reads it): own fit or borrowed,
    decided by the presets' numbers."""
    from chunklab.stages.cost_models import presets

    fits = {h: {"hardware": h, "efficiency": {k: float(f"{v:.4g}") for k, v in f.efficiency.items()}}
            for h, f in vidur_fits.items()}
    table = presets(fits).set_index("hardware")["efficiencies_fit_on"].to_dict()
    assert table == {"a100_80g": "a100_80g", "h100": "h100", "h200": "h100"}
    assert presets({"h100": fits["h100"]}).set_index("hardware")["efficiencies_fit_on"].to_dict() == \
        {"a100_80g": "", "h100": "h100", "h200": "h100"}


def test_a_wrong_efficiency_misses_the_vidur_data():
    """The fit is what makes the model right: halve the GEMM share and the layer error explodes."""
    from chunklab.cost_models.fits.vidur import read_operator_times, with_predictions

    for name, hardware, path in vidur_devices():
        cfg = compose_run_config(["engine=simulated", "tracking=none", "model=llama2_7b", f"hardware={hardware}"])
        wrong = dataclasses.replace(cfg.hardware, efficiency=dataclasses.replace(cfg.hardware.efficiency,
                                                                                 gemm_max=cfg.hardware.efficiency.gemm_max / 2))
        data = read_operator_times(path)
        for hw, ok in ((cfg.hardware, True), (wrong, False)):
            layer = with_predictions(data, cfg.model, hw).query("op == 'layer (sum)' and num_tokens >= 1024")
            error = ((layer["predicted_ms"] - layer["measured_ms"]).abs() / layer["measured_ms"]).median()
            assert bool(error < 0.1) == ok, (name, hw.efficiency.gemm_max, error)


def test_cpu_roofline_fit_scores_held_out_probe_shapes():
    from chunklab.cost_models.fits.cpu import fit_cpu

    eff, forms = fit_cpu(compose_run_config(["engine=simulated", "engine.profile=outputs/profiles/machine.json",
                                             "tracking=none"]).model, Path("outputs/profiles/machine_shapes.csv"))
    held = forms[forms["split"] == "held out"].set_index("form")["median_rel_error"]
    assert len(held) == 2 and held.max() < 0.2
    assert 0.01 < eff["gemm_max"] < 5  # TFLOP/s a 2018-2026 CPU core pair can reach
    assert isinstance(RooflineEfficiency(**{k: v for k, v in eff.items()}), RooflineEfficiency)


def test_roofline_needs_one_forward_a_step():
    with pytest.raises(ConfigError, match="mixed_batch"):
        cost_model_for(*_cost_inputs(h100_8b("engine.mixed_batch=false")), required=True)


def test_vidur_data_is_vendored_unchanged_with_its_licence():
    import hashlib

    folder = ROOT / "data" / "profiles" / "vidur"
    sums = dict(reversed(line.split()) for line in (folder / "SHA256SUMS").read_text().splitlines())
    for name, digest in sums.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    assert "MIT License" in (folder / "LICENSE").read_text()
    readme = (folder / "README.md").read_text()
    assert "microsoft/vidur" in readme
    for _, _, data in vidur_devices():
        assert data.parent == folder and data.name in sums and data.name in readme, data.name
