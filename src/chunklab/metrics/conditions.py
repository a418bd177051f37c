"""The hardware and software a run measured on, and the chapter-style line."""
from __future__ import annotations

import datetime as dt
import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil

from chunklab.config import RunConfig, trace_length_scale
from chunklab.paths import project_dir


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def git_state() -> tuple[str, bool]:
    """The project's commit and whether tracked files differ from it."""
    return _git_state(project_dir())


@functools.lru_cache(maxsize=None)  # two git calls (~50 ms) once per process and project, not once per run
def _git_state(root: Path) -> tuple[str, bool]:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", False
    if commit.returncode != 0:
        return "unknown", False
    return commit.stdout.strip(), bool(status.stdout.strip())


def describe_workload(cfg: RunConfig) -> str:
    w = cfg.workload
    if w.kind == "trace":
        t = w.trace
        count = "every row" if w.num_requests is None else f"{w.num_requests} requests"
        return (f"{w.name}: trace {Path(t.path).name}, {count} from row {t.start_offset}, "
                f"time x{t.time_scale:g}, lengths x{trace_length_scale(t, cfg.model.max_seq_len):g}, "
                f"overlong={t.overlong}")
    total = sum(c.weight for c in w.classes)
    parts = []
    for c in w.classes:
        length = f"{c.min_tokens}" if c.min_tokens == c.max_tokens else f"{c.min_tokens}-{c.max_tokens}"
        parts.append(f"{100 * c.weight / total:.0f}% {length} tokens ({c.label})")
    arrival = "all at once" if w.arrival == "all_at_once" else f"{w.arrival} {w.rate_per_s:.4g}/s"
    if w.load is not None:
        arrival += f" (load {w.load:g} x simulated capacity {w.rate_per_s / w.load:.4g}/s)"
    if w.arrival == "gamma":
        arrival += f" burstiness {w.burstiness:g}"
    return (f"{w.name}: prompts {', '.join(parts)}, output {w.min_output_tokens}-{w.max_output_tokens}, "
            f"{w.num_requests} requests, {arrival}, seed {w.seed}")


def conditions(cfg: RunConfig, num_params: int, cost_model=None, forward_path: str = "") -> dict[str, str]:
    """This machine and software, the run's model and workload; for a simulated run
    also the profile whose predictions stand in for the measurements. forward_path:
    the real executor's (fused, or eager and why)."""
    commit, dirty = git_state()
    out = {
        "executor": cfg.engine.executor,
        "cpu_model": cpu_model(),
        "cpu_arch": platform.machine(),
        "cpu_logical_cores": str(os.cpu_count()),
        "cpu_physical_cores": str(psutil.cpu_count(logical=False)),
        "memory_gb": f"{psutil.virtual_memory().total / 2**30:.1f}",
        "python": sys.version.split()[0],
        "os": platform.platform(),
        "model": cfg.model.name,
        "model_params": str(num_params),
        "dtype": cfg.model.dtype,
        "workload": describe_workload(cfg),
        "git_commit": commit,
        "git_dirty": str(dirty).lower(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if cfg.engine.executor == "simulated":
        return out | cost_model.run_conditions()
    from chunklab.engine.heap import heap_policy

    return out | _torch_conditions(cfg.engine.device) | {"forward_path": forward_path, "heap": heap_policy()}


def _torch_conditions(device: str) -> dict[str, str]:
    import torch  # only a measured run has torch loaded

    if device == "cuda" and torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    return {"device": device, "torch_version": torch.__version__,
            "torch_build": f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu",
            "torch_threads": str(torch.get_num_threads())}


def sim_conditions_line(cfg: RunConfig) -> str:
    """The conditions of a simulated table: the cost model's, never this machine's or this moment's,
    so the table reproduces byte for byte wherever it is regenerated."""
    from chunklab.engine.cost_model import cost_model_for
    from chunklab.model.sizes import num_parameters

    cm, _ = cost_model_for(cfg, required=True)
    return (f"SIMULATED: {cfg.model.name} ({num_parameters(cfg.model):,} params, {cfg.model.dtype}), step times "
            f"predicted by {cm.provenance()}")


def conditions_line(c: dict[str, str]) -> str:
    if c.get("executor") == "simulated":
        return (f"SIMULATED: {c['model']} ({int(c['model_params']):,} params, {c['dtype']}), step times predicted by "
                f"{c['cost_model']}, {c['workload']}, simulated {c['measured_at']}")
    return (f"{c['model']} ({int(c['model_params']):,} params, {c['dtype']}), {c['cpu_logical_cores']}x "
            f"{c['cpu_arch']} CPU ({c['cpu_model']}), device {c['device']}, torch {c['torch_version']}, "
            f"{c['torch_threads']} threads, {c.get('forward_path') or 'eager'} forward, {c['workload']}, "
            f"measured {c['measured_at']}")
