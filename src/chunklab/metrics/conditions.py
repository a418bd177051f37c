"""The hardware and software a run measured on, and the chapter-style line."""
from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil
import torch

from chunklab.config import RunConfig

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def git_state(root: Path = PROJECT_ROOT) -> tuple[str, bool]:
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
        return (f"{w.name}: trace {Path(t.path).name}, {w.num_requests} requests from row {t.start_offset}, "
                f"time x{t.time_scale:g}, lengths x{t.length_scale:g}, overlong={t.overlong}")
    total = sum(c.weight for c in w.classes)
    parts = []
    for c in w.classes:
        length = f"{c.min_tokens}" if c.min_tokens == c.max_tokens else f"{c.min_tokens}-{c.max_tokens}"
        parts.append(f"{100 * c.weight / total:.0f}% {length} tokens ({c.label})")
    arrival = "all at once" if w.arrival == "all_at_once" else f"{w.arrival} {w.rate_per_s:g}/s"
    if w.arrival == "gamma":
        arrival += f" burstiness {w.burstiness:g}"
    return (f"{w.name}: prompts {', '.join(parts)}, output {w.min_output_tokens}-{w.max_output_tokens}, "
            f"{w.num_requests} requests, {arrival}, seed {w.seed}")


def conditions(cfg: RunConfig, num_params: int) -> dict[str, str]:
    commit, dirty = git_state()
    device = cfg.engine.device
    if device == "cuda" and torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    return {
        "cpu_model": cpu_model(),
        "cpu_arch": platform.machine(),
        "cpu_logical_cores": str(os.cpu_count()),
        "cpu_physical_cores": str(psutil.cpu_count(logical=False)),
        "memory_gb": f"{psutil.virtual_memory().total / 2**30:.1f}",
        "device": device,
        "torch_version": torch.__version__,
        "torch_build": f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu",
        "torch_threads": str(torch.get_num_threads()),
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


def conditions_line(c: dict[str, str]) -> str:
    return (f"{c['model']} ({int(c['model_params']):,} params, {c['dtype']}), {c['cpu_logical_cores']}x "
            f"{c['cpu_arch']} CPU ({c['cpu_model']}), device {c['device']}, torch {c['torch_version']}, "
            f"{c['torch_threads']} threads, {c['workload']}, measured {c['measured_at']}")
