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

from chunklab.compiled_core import core_kind
from chunklab.config import EngineConfig, HardwareConfig, ModelConfig, RunConfig, WorkloadConfig, trace_length_scale
from chunklab.cost_models import cost_model_for
from chunklab.engine.malloc_policy import heap_policy
from chunklab.model.sizes import num_parameters
from chunklab.paths import project_dir


@functools.cache
def cpu_model() -> str:
    """The CPU's name and what tells CPUs sold under one name apart, e.g. 'AMD EPYC (family 23 model 1
    stepping 2, avx2, L2 512 KiB, L3 8 MiB)'. Cloud VMs report a bare 'AMD EPYC' for Zen 1 to Zen 5
    hosts alike (seen here: family 26 with AVX-512 and family 23 without), whose GEMM rates differ 2-3x,
    so the name alone would let one machine's profile stand in for another's. It is part of every
    run's conditions and every profile's fingerprint."""
    try:
        fields = dict(_cpuinfo_fields(Path("/proc/cpuinfo").read_text()))
    except OSError:
        fields = {}
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    details = []
    if "cpu family" in fields:
        details.append(f"family {fields['cpu family']} model {fields.get('model', '?')} stepping "
                       f"{fields.get('stepping', '?')}")
    details += [*vector_isa(fields.get("flags", "").split()), *cache_sizes()]
    return f"{name} ({', '.join(details)})" if details else name


def _cpuinfo_fields(text: str):
    """(key, value) of /proc/cpuinfo's first processor."""
    for line in text.splitlines():
        if not line.strip():
            return
        key, sep, value = line.partition(":")
        if sep:
            yield key.strip(), value.strip()


def vector_isa(flags: list[str]) -> list[str]:
    """The widest x86 vector extension (the fused kernels' compiled path follows it) and AMX, if any."""
    widest = next((f for f in ("avx512f", "avx2", "avx", "sse4_2") if f in flags), None)
    return [f for f in (widest, "amx" if "amx_tile" in flags else None) if f]


def cache_sizes() -> list[str]:
    """'L2 512 KiB', 'L3 8 MiB': cpu0's unified caches, as sysfs gives them (absent where it does not)."""
    out = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Unified" and size.endswith("K") and size[:-1].isdigit():
            kib = int(size[:-1])
            out.append(f"L{level} {kib // 1024} MiB" if kib % 1024 == 0 else f"L{level} {kib} KiB")
    return out


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


def describe_workload(w: WorkloadConfig, model: ModelConfig) -> str:
    if w.kind == "trace":
        t = w.trace
        count = "every row" if w.num_requests is None else f"{w.num_requests} requests"
        return (f"{w.name}: trace {Path(t.path).name}, {count} from row {t.start_offset}, "
                f"time x{t.time_scale:g}, lengths x{trace_length_scale(t, model.max_seq_len):g}, "
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
        "workload": describe_workload(cfg.workload, cfg.model),
        "git_commit": commit,
        "git_dirty": str(dirty).lower(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if cfg.engine.executor == "simulated":
        given = cost_model.provenance.conditions  # what a cost model does not say, its phrase and "simulated" say
        return out | given | {k: v for k, v in (("device", "simulated"), ("cost_model", cost_model.provenance.phrase))
                              if k not in given}
    return out | _torch_conditions(cfg.engine.device) | {"forward_path": forward_path, "heap": heap_policy(),
                                                          "core": core_kind()}


def _torch_conditions(device: str) -> dict[str, str]:
    import torch  # only a measured run has torch loaded

    if device == "cuda" and torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    return {"device": device, "torch_version": torch.__version__,
            "torch_build": f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu",
            "torch_threads": str(torch.get_num_threads())}


def sim_conditions_line(model: ModelConfig, engine: EngineConfig, hardware: HardwareConfig) -> str:
    """The conditions of a simulated table: the cost model's, never this machine's or this moment's,
    so the table reproduces byte for byte wherever it is regenerated."""
    cm, _ = cost_model_for(model, engine, hardware, required=True)
    return (f"SIMULATED: {model.name} ({num_parameters(model):,} params, {model.dtype}), step times "
            f"predicted by {cm.provenance.phrase}")


def conditions_line(c: dict[str, str]) -> str:
    if c.get("executor") == "simulated":
        return (f"SIMULATED: {c['model']} ({int(c['model_params']):,} params, {c['dtype']}), step times predicted by "
                f"{c['cost_model']}, {c['workload']}, simulated {c['measured_at']}")
    return (f"{c['model']} ({int(c['model_params']):,} params, {c['dtype']}), {c['cpu_logical_cores']}x "
            f"{c['cpu_arch']} CPU ({c['cpu_model']}), device {c['device']}, torch {c['torch_version']}, "
            f"{c['torch_threads']} threads, {c.get('forward_path') or 'eager'} forward, {c.get('core', 'interpreted')} "
            f"scheduling core, {c['workload']}, "
            f"measured {c['measured_at']}")
