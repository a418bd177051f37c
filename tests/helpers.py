"""Small builders shared by the tests (configs are the real dataclasses)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from chunklab.config import EngineConfig, LengthClass, ModelConfig, SchedulerConfig, WorkloadConfig
from chunklab.engine.build import build_engine
from chunklab.engine.replay import replay
from chunklab.workload.synthetic import synthetic_requests

# A two-layer model: same code paths as TinyGPT, a fraction of the time.
MICRO = ModelConfig(name="micro", num_layers=2, d_model=64, num_heads=4, num_kv_heads=2, head_dim=16,
                    mlp_hidden=128, max_seq_len=512, dtype="float64")

MIXED = WorkloadConfig(
    num_requests=12, seed=5, rate_per_s=40.0,
    classes=(LengthClass("long", 0.35, 150, 300), LengthClass("short", 0.65, 3, 20)),
    min_output_tokens=4, max_output_tokens=12,
)


def run_engine(requests, model=MICRO, engine=EngineConfig(), **sched):
    eng = build_engine(model, engine, SchedulerConfig(**sched))
    return eng, replay(eng, requests)


def outputs(result) -> list[tuple[int, ...]]:
    return [tuple(s.output_token_ids) for s in result.sequences]


def workload(**overrides) -> WorkloadConfig:
    return dataclasses.replace(MIXED, **overrides)


def requests(vocab=260, **overrides):
    return synthetic_requests(workload(**overrides), vocab)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(home: Path):
    """A real `mlflow server` on 127.0.0.1 with its store under home; yields its URL, stops it after."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{home}/server.db", "--artifacts-destination",
         str(home / "art")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        # Waits as long as the server is alive (its start took ~27 s alone, longer beside other
        # tests, on a slow 2-core VM): a fixed short deadline failed slow machines. The cap only
        # stops a server that hangs.
        deadline = time.time() + 600
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None, f"mlflow server exited with {server.returncode} before it served"
                assert time.time() < deadline, "mlflow server did not start in 10 minutes"
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def cpu_flags() -> set[str]:
    """This CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        line = next(l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags"))
    except (OSError, StopIteration):
        return set()
    return set(line.split(":", 1)[1].split())
