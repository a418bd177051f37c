"""The real conf/ composes into a valid RunConfig; bad values name their key."""
import dataclasses
from pathlib import Path

import pytest

from chunklab.config import ConfigError
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.prepare import prepare
from chunklab.hydra_compose import compose_config


def build_run_config(overrides):
    return compose_run_config(list(overrides))


def compose_cfg(*overrides):
    return overrides


def test_defaults_build_the_reference_setup():
    cfg = build_run_config(compose_cfg())
    assert cfg.model.num_layers == 6 and cfg.model.num_kv_heads == 2
    assert cfg.scheduler.budget == 512 and cfg.scheduler.ordering == "decode_first"
    assert cfg.engine.num_blocks == 1024 and cfg.engine.block_size == 16
    assert [c.label for c in cfg.workload.classes] == ["long", "short"]


def test_chapter_experiment():
    cfg = build_run_config(compose_cfg("experiment=ch10"))
    w = cfg.workload
    assert (w.num_requests, w.seed, w.rate_per_s) == (24, 3, 8.0)
    assert (cfg.slo.ttft_s, cfg.slo.tpot_s) == (1.0, 0.05)


@pytest.mark.parametrize("group", ["scheduler=prefill_first", "scheduler=sarathi", "workload=short_prompts",
                                   "slo=itl_p99", "tracking=none", "model=micro", "engine=cuda"])
def test_every_option_composes(group):
    """Composed and validated everywhere; prepared (made concrete for this machine) where its device is here:
    engine=cuda on a machine without one is the one line of test_cli's device test."""
    cfg = compose_config([group])
    if cfg.engine.device == "cpu":
        prepare(cfg)


@pytest.mark.parametrize("override, key", [
    ("scheduler.budget=0", "scheduler.budget=0"),
    ("scheduler.budget=7", "scheduler.budget=7"),
    ("scheduler.ordering=lifo", "scheduler.ordering='lifo'"),
    ("scheduler.admission=random", "scheduler.admission='random'"),
    ("workload.rate_per_s=-2", "workload.rate_per_s=-2.0"),
    ("workload.num_requests=0", "workload.num_requests=0"),
    ("workload.arrival=uniform", "workload.arrival='uniform'"),
    ("model.dtype=float16", "model.dtype='float16'"),
    ("engine.clock=sundial", "engine.clock='sundial'"),
    ("engine.linear_library=openblas", "engine.linear_library='openblas'"),
    ("engine.prefill_attention=flash", "engine.prefill_attention='flash'"),
    ("engine.num_blocks=0", "engine.num_blocks=0"),
    ("slo.ttft_s=0", "slo.ttft_s=0.0"),
    ("hardware.step_time_scale=0", "hardware.step_time_scale=0.0"),
    ("scheduler.budget=lots", "scheduler.budget=lots: Value 'lots' of type 'str' could not be converted to Integer"),
    ("engine.mixed_batch=maybe", "engine.mixed_batch=maybe: Value 'maybe' is not a valid bool"),
    ("workload.num_requests=null", "workload.num_requests=None: null (every row) is only for traces"),
    ("workload=azure_conv workload.trace.path=/no/such/trace.csv", "workload.trace.path='/no/such/trace.csv'"),
])
def test_bad_values_name_key_and_value(override, key):
    with pytest.raises(ConfigError) as err:
        build_run_config(compose_cfg(*override.split()))
    assert str(err.value).startswith(key)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("override", ["scheduler.budgt=3", "+scheduler.budgt=3"])
def test_hydra_schema_rejects_unknown_keys(override):
    with pytest.raises(ConfigError, match="^scheduler.budgt: unknown key"):
        build_run_config(compose_cfg(override))


def test_every_config_file_matches_the_schema():
    """Every option file of every group composes into the typed RunConfig (no stray or mistyped keys)."""
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "conf").glob("*/*.yaml")):
        group = path.parent.name
        if group in ("hparams_search",):
            continue
        override = f"{group}={path.stem}"
        # a GPU preset is simulated only; a Llama-family model too big for this machine's CPU is priced on H100
        extra = {"hardware": ["engine=simulated"], "model": ["engine=simulated", "hardware=h100"],
                 "topology": ["engine=simulated", "engine.profile=outputs/profiles/machine.json"]}.get(group, [])
        if group == "model" and path.stem in ("tiny_gpt", "micro"):
            extra = []
        cfg = compose_config([override, *extra])  # azure_conv reads the vendored trace
        assert cfg.model.num_layers >= 1, override
        if cfg.engine.device == "cpu":  # prepared where its device is here
            prepare(cfg)


@pytest.mark.parametrize("overrides, message", [
    (["workload.load=0.5", "workload.rate_per_s=3"], "workload.load=0.5: give workload.load or workload.rate_per_s"),
    (["workload.rate_per_s=null"], "workload.rate_per_s=None: needs a rate, or workload.load"),
    (["workload=azure_conv", "workload.load=0.5", "workload.trace.path=pyproject.toml"],
     "workload.load=0.5: is for synthetic workloads"),
    (["workload.load=-1"], "workload.load=-1.0: must be > 0"),
])
def test_load_and_rate_are_either_or(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_run_config(compose_cfg(*overrides))
    assert str(err.value).startswith(message)


def test_load_resolves_to_a_fraction_of_the_simulated_capacity(tmp_path, monkeypatch):
    from chunklab.experiments import load

    monkeypatch.setattr(load, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(load, "CAPACITY_REQUESTS", 150)
    cfg = build_run_config(compose_cfg("engine=simulated", "workload.load=0.5"))
    capacity = load.workload_capacity(cfg)
    assert cfg.workload.load == 0.5 and cfg.workload.rate_per_s == pytest.approx(0.5 * capacity)
    [cached] = tmp_path.glob("*.json")  # computed once, then read back
    assert build_run_config(compose_cfg("engine=simulated", "workload.load=0.9")).workload.rate_per_s == \
        pytest.approx(0.9 * capacity)
    assert list(tmp_path.glob("*.json")) == [cached]
    from chunklab.experiments.capacity import probe

    ref = load.reference_config(cfg)
    ref = dataclasses.replace(ref, workload=dataclasses.replace(ref.workload, num_requests=150))
    assert probe(ref, capacity, load.CAPACITY_SEEDS, 1)["slo_attainment"] >= 0.9
    assert probe(ref, capacity * 1.03, load.CAPACITY_SEEDS, 1)["slo_attainment"] < 0.9
