"""Shared by the stage modules: their command line and params, result files, the scratch folder."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from chunklab.paths import project_dir
from chunklab.stages.typed_yaml import ParamsError, load_section, load_view


class Progress:
    """A long stage's progress on stderr: `[stage] part k/n: what (elapsed s)`, one line as each part
    starts, so a user sees where a repro spends its minutes."""

    def __init__(self, stage: str, num_parts: int):
        self.stage, self.num_parts, self.done = stage, num_parts, 0
        self.start_s = time.monotonic()

    def part(self, what: str) -> None:
        self.done += 1
        print(f"[{self.stage}] part {self.done}/{self.num_parts}: {what} ({time.monotonic() - self.start_s:.0f} s)",
              file=sys.stderr, flush=True)


def arguments(doc: str, *paths: str, argv: list[str] | None = None) -> argparse.Namespace:
    """A stage module's command line (`python -m chunklab.stages.<stage>`): each name in paths a
    required `--name PATH` (underscores written as dashes), parsed from argv (default: sys.argv)."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    for name in paths:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=Path, required=True, metavar="PATH")
    return parser.parse_args(argv)


def read_section(path: Path, name: str, cls, view: bool = False):
    """Section `name` of params.yaml typed as cls (typed_yaml.load_section; view: load_view, only the
    keys cls names); a mismatch ends the stage with its one-line message, no traceback."""
    try:
        return (load_view if view else load_section)(path, name, cls)
    except ParamsError as exc:
        raise SystemExit(f"error: {exc}") from None


def runs_dir() -> Path:
    """Per-run folders of pipeline runs (ignored by git): scratch, never a stage's output."""
    return project_dir() / "runs" / "dvc"


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def measured_capacity(capacity_csv: Path, budget: int | None = None, slo: str | None = None) -> float:
    """This machine's measured capacity (req/s) from the capacity stage's table: the reference cell (its
    first row), or the cell of this budget and SLO."""
    table = pd.read_csv(capacity_csv)
    if budget is None and slo is None:
        row = table.iloc[:1]
    else:
        row = table[(table["budget"] == budget) & (table["slo"] == slo)]
    if row.empty:
        raise SystemExit(f"{capacity_csv}: no capacity measured at budget {budget} under slo={slo} "
                         "(params.yaml capacity.extra_cells)")
    rate = float(row["measured_req_per_s"].iloc[0])
    if not rate > 0:
        raise SystemExit(f"{capacity_csv}: the capacity at budget {row['budget'].iloc[0]} under slo="
                         f"{row['slo'].iloc[0] if 'slo' in row else '?'} is {rate:g} req/s: no rate meets that SLO "
                         "on this machine, so no load can be a fraction of it (choose another reference cell)")
    return rate


def profile_machine(profile: Path) -> str:
    """The CPU a profile was calibrated on, as the report names it (its fingerprint's cpu_model)."""
    return json.loads(Path(profile).read_text())["fingerprint"]["cpu_model"]
