"""Every step of a run, stored by column: a simulated replay of a real trace runs ~10^6
steps, and one Python object per step would cost ~150 MB where these arrays cost ~60 MB."""
from __future__ import annotations

import dataclasses
import math
from array import array

from chunklab.engine.engine import StepRecord

FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord))
FLOAT_FIELDS = ("start_s", "duration_s", "predicted_s")


class StepLog:
    def __init__(self):
        self.columns = {name: array("d" if name in FLOAT_FIELDS else "q") for name in FIELDS}
        self._appenders = [(name, column.append) for name, column in self.columns.items()]

    @classmethod
    def of(cls, steps) -> "StepLog":
        log = cls()
        for step in steps:
            log.append(step)
        return log

    def append(self, step: StepRecord) -> None:
        for name, column in self._appenders:
            value = getattr(step, name)
            column(math.nan if value is None else value)

    def __len__(self) -> int:
        return len(self.columns["start_s"])

    def __getitem__(self, i: int) -> StepRecord:
        values = {name: column[i] for name, column in self.columns.items()}
        if math.isnan(values["predicted_s"]):
            values["predicted_s"] = None
        return StepRecord(**values)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def arrays(self) -> dict:
        """The columns as numpy arrays (views, no copy)."""
        import numpy as np

        return {name: np.frombuffer(c, dtype=float if c.typecode == "d" else np.int64) for name, c in self.columns.items()}

    def to_frame(self, start: int = 0, end: int | None = None):
        import pandas as pd

        end = len(self) if end is None else min(end, len(self))
        return pd.DataFrame({name: a[start:end] for name, a in self.arrays().items()}, index=pd.RangeIndex(start, end))

    def write_csv(self, path, chunk_rows: int = 100_000) -> None:
        """steps.csv, a chunk of rows at a time: one frame of a replayed trace's ~10^6 steps
        and its formatted text would cost ~150 MB more than the columns themselves."""
        with open(path, "w", newline="") as f:
            for start in range(0, max(len(self), 1), chunk_rows):
                self.to_frame(start, start + chunk_rows).to_csv(f, index_label="step", header=start == 0)
