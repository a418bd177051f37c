"""chunklab entry point: compose -> validate -> build -> run -> track.

    python run.py                                   # one run, defaults in conf/config.yaml
    python run.py scheduler.budget=64,512,8192 -m   # a sweep, one MLflow run each
    python run.py experiment=ch10                   # a named experiment (conf/experiment/)
    python run.py engine=simulated                  # the same run on the calibrated cost model
    python run.py --help                            # config groups and options
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from chunklab.app import run_tracked
from chunklab.config import ChunklabError, RunConfig
from chunklab.experiments.prepare import prepare
from chunklab.interrupts import Interrupted
from chunklab.paths import PROJECT_ENV
from chunklab.schema import error_line, register, to_run_config
from chunklab.tracking.naming import SWEEP_KEYS_ENV, run_name

# The project is this file's folder (Hydra reads conf/ from here): profiles, caches and relative
# paths resolve against it (chunklab.paths), whichever checkout the package was installed from.
os.environ[PROJECT_ENV] = str(Path(__file__).resolve().parent)
register()  # the typed schema conf/config.yaml names first in its defaults list


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
        run_cfg = prepare(to_run_config(cfg))  # validated, then made concrete for this machine
        hc = HydraConfig.get()
        sweep_keys = os.environ.get(SWEEP_KEYS_ENV, "").split() if hc.mode == RunMode.MULTIRUN else []
        name = run_name(run_cfg, list(hc.overrides.task), sweep_keys, hc.runtime.choices.get("experiment"))
        out = run_tracked(run_cfg, Path(hc.runtime.output_dir), run_tags(hc), name)
    except ChunklabError as err:
        print(f"chunklab: error: {err}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as err:
        print(f"chunklab: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    print(result_line(run_cfg, out.summary, hc.runtime.output_dir, out.conditions.get("cost_model", "")))
    return out.summary["goodput_req_per_s"]


def result_line(cfg: RunConfig, s: dict, run_dir: str, cost_model: str = "") -> str:
    """cost_model: what predicted the steps (a simulated run names the machine it predicts)."""
    def fmt(key: str, scale: float = 1.0, unit: str = "s", digits: int = 3) -> str:
        value = s.get(key, float("nan"))
        return "n/a" if value != value else f"{value * scale:.{digits}f}{unit}"  # NaN: no request finished

    sched = cfg.scheduler
    budget = f"budget {sched.budget:>5}" if sched.budget_policy == "fixed" else f"{sched.budget_policy} budget (<= {sched.budget})"
    line = (f"{budget}: TTFT p50 {fmt('ttft_p50_s')} p99 {fmt('ttft_p99_s')}"
            f" | ITL p50 {fmt('itl_p50_s', 1e3, 'ms', 1)} p99 {fmt('itl_p99_s', 1e3, 'ms', 1)} | "
            f"TPOT p50 {fmt('tpot_p50_s', 1e3, 'ms', 1)} | {s['output_tokens_per_s']:.1f} tok/s | "
            f"goodput {s['goodput_req_per_s']:.3f} req/s ({100 * s['slo_attainment']:.0f}% in SLO)")
    if s["num_rejected"]:
        line += f" | {s['num_rejected']:.0f} rejected"
    ratio = s.get("step_time_vs_predicted_p50")
    if cfg.workload.load is not None and ratio is not None and cfg.engine.executor != "simulated":
        # the load was set from predicted step times: steps that ran slower loaded the engine more
        line += (f" | load {cfg.workload.load:g}, effective {cfg.workload.load * ratio:.2f} "
                 f"(steps {ratio:.3f}x the profile's)")
    kind = f" | simulated: {cost_model or 'cost model'}" if cfg.engine.executor == "simulated" else ""
    return f"{line}{kind} | {run_dir}"


if __name__ == "__main__":
    # Hydra re-raises its composition errors (instead of printing them over several lines
    # and exiting 1), so they end here as one line and exit 2 like every bad input.
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        main()
    except ChunklabError as err:  # raised before a job ran: by a sweep callback
        print(f"chunklab: error: {err}", file=sys.stderr)
        sys.exit(2)
    except (HydraException, OmegaConfBaseException) as err:
        print(f"chunklab: error: {error_line(err)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # before a run started (composing, importing): nothing to save
        print("chunklab: interrupted before the run started; nothing was measured", file=sys.stderr)
        sys.exit(130)
