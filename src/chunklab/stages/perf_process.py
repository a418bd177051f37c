"""The perf stage's fresh processes: peak memory and wall time of one `run.py` run."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chunklab.paths import project_dir


def peak_rss_mb(overrides: list[str]) -> float:
    return run_process(overrides)[0]


def run_process(overrides: list[str]) -> tuple[float, float]:
    """Peak resident memory (VmHWM, MiB) and wall seconds of one `run.py` run in a fresh process, MLflow off.

    Polled from /proc while it runs; ru_maxrss would also count the pages of this
    large parent that the child inherits between fork and exec."""
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "stderr", "w+") as err:
        proc = subprocess.Popen([sys.executable, "run.py", *overrides, "tracking=none", "tracking.progress=false",
                                 f"hydra.run.dir={tmp}"], cwd=project_dir(), stdout=subprocess.DEVNULL, stderr=err)
        peak_kb, t0 = 0, time.perf_counter()
        while proc.poll() is None:
            peak_kb = max(peak_kb, _hwm_kb(proc.pid))
            time.sleep(0.02)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"run.py {' '.join(overrides)} failed: {err.read()[-500:]}")
    return peak_kb / 1024, time.perf_counter() - t0


def _hwm_kb(pid: int) -> int:
    try:
        if b"run.py" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return 0  # not exec'd yet: still a copy of this process
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
