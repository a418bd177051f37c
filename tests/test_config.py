"""The real conf/ composes into a valid RunConfig; bad values name their key."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from chunklab.config import ConfigError, build_run_config

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def compose_cfg(*overrides):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)


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
    build_run_config(compose_cfg(group))


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
    ("engine.num_blocks=0", "engine.num_blocks=0"),
    ("slo.ttft_s=0", "slo.ttft_s=0.0"),
    ("scheduler.budget=lots", "scheduler.budget='lots'"),
    ("workload=azure_conv workload.trace.path=/no/such/trace.csv", "workload.trace.path='/no/such/trace.csv'"),
])
def test_bad_values_name_key_and_value(override, key):
    with pytest.raises(ConfigError) as err:
        build_run_config(compose_cfg(*override.split()))
    assert str(err.value).startswith(key)
    assert "\n" not in str(err.value)


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="scheduler.budgt: unknown key"):
        build_run_config(compose_cfg("+scheduler.budgt=3"))
