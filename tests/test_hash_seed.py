"""A simulated run does not depend on Python's string hashing (issue 51: simulated numbers do not move).

Two processes with different PYTHONHASHSEED run the same simulated experiment through run.py; their
requests.csv and steps.csv must be byte-identical, and so must summary.json apart from the time it
was written. A set or dict ordered by hash anywhere between the workload and the files (class
labels, request ids kept in a set, per-class metrics) would show here as a reordered or different
byte. Simulated runs read the committed profile (conf/engine/simulated.yaml), so no calibration
runs and no time is measured.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ["engine=simulated", "engine.profile=outputs/profiles/machine.json", "tracking=none", "tracking.progress=false", "workload.num_requests=60"]
STAMPS = ("measured_at",)  # conditions: when the run was written


def start(seed: int, run_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    return subprocess.Popen([sys.executable, "run.py", *OVERRIDES, f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def summary_without_stamps(path: Path) -> str:
    doc = json.loads(path.read_text())
    for key in STAMPS:
        stamp = doc["conditions"].pop(key)
        doc["conditions_line"] = doc["conditions_line"].replace(stamp, "<stamp>")
    return json.dumps(doc, indent=2)  # in the file's own key order: a reordering is a difference


def test_simulated_run_is_byte_identical_across_hash_seeds(tmp_path):
    dirs = {seed: tmp_path / f"hashseed{seed}" for seed in (1, 2)}
    procs = {seed: start(seed, d) for seed, d in dirs.items()}  # side by side: simulated, nothing is timed
    for seed, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"PYTHONHASHSEED={seed}: run.py exited {proc.returncode}\n{err[-3000:]}"
        assert "simulated" in out, out
    a, b = dirs[1], dirs[2]
    doc = json.loads((a / "summary.json").read_text())
    assert doc["config"]["engine"]["executor"] == "simulated"
    assert doc["config"]["engine"]["profile"] == "outputs/profiles/machine.json"  # the committed one: no calibration
    assert doc["summary"]["num_requests"] == 60
    for name in ("requests.csv", "steps.csv"):
        first, second = (a / name).read_bytes(), (b / name).read_bytes()
        assert first.count(b"\n") > 60, f"{name} is nearly empty"
        if first != second:
            lines1, lines2 = first.splitlines(), second.splitlines()
            n = next((i for i, (x, y) in enumerate(zip(lines1, lines2)) if x != y), min(len(lines1), len(lines2)))
            show = lambda lines: lines[n][:200] if n < len(lines) else b"<end of file>"
            raise AssertionError(f"{name} differs between PYTHONHASHSEED=1 and 2 from line {n + 1} "
                                 f"({len(lines1)} and {len(lines2)} lines):\n  1: {show(lines1)!r}\n  2: {show(lines2)!r}")
    first, second = summary_without_stamps(a / "summary.json"), summary_without_stamps(b / "summary.json")
    assert first == second, "summary.json differs between PYTHONHASHSEED=1 and 2:\n" + "\n".join(
        f"  1: {x}\n  2: {y}" for x, y in zip(first.splitlines(), second.splitlines()) if x != y)
