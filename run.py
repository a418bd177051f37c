"""chunklab entry point: compose -> validate -> build -> run -> track.

    python run.py                                   # one run, defaults in conf/config.yaml
    python run.py scheduler.budget=64,512,8192 -m   # a sweep, one MLflow run each
    python run.py experiment=ch10                   # a named experiment (conf/experiment/)
    python run.py --help                            # config groups and options
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from chunklab.config import ChunklabError, RunConfig, build_run_config


def typed_config(cfg: DictConfig) -> RunConfig:
    data = OmegaConf.to_container(cfg, resolve=True)
    trace = data.get("workload", {}).get("trace", {})
    if trace.get("path"):  # relative to where the user ran the command, not the run folder
        trace["path"] = to_absolute_path(trace["path"])
    return build_run_config(data)


def run_tags(hc) -> dict[str, str]:
    tags = {"experiment": hc.runtime.choices.get("experiment") or "none", "run_dir": hc.runtime.output_dir}
    if hc.mode == RunMode.MULTIRUN:
        tags["multirun"] = hc.sweep.dir  # groups the runs of one sweep
        tags["multirun_job"] = str(hc.job.num)
    return tags


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Returns the run's goodput (req/s), which a Hydra sweeper (Optuna) can maximise."""
    try:
        run_cfg = typed_config(cfg)  # validated before torch and mlflow are even imported
        from chunklab.app import run_tracked

        hc = HydraConfig.get()
        out = run_tracked(run_cfg, Path(hc.runtime.output_dir), run_tags(hc))
    except ChunklabError as err:
        print(f"chunklab: error: {err}", file=sys.stderr)
        sys.exit(2)
    s = out.summary
    print(f"budget {run_cfg.scheduler.budget:>5}: TTFT p50 {s['ttft_p50_s']:.3f}s p99 {s['ttft_p99_s']:.3f}s | "
          f"ITL p50 {s['itl_p50_s'] * 1e3:.1f}ms p99 {s['itl_p99_s'] * 1e3:.1f}ms | "
          f"TPOT p50 {s['tpot_p50_s'] * 1e3:.1f}ms | {s['output_tokens_per_s']:.1f} tok/s | "
          f"goodput {s['goodput_req_per_s']:.3f} req/s ({100 * s['slo_attainment']:.0f}% in SLO) | "
          f"{hc.runtime.output_dir}")
    return s["goodput_req_per_s"]


if __name__ == "__main__":
    main()
