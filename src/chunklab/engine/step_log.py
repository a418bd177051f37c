"""Every step of a run, stored by column: a simulated replay of a real trace runs ~10^6
steps, and one Python object per step would cost ~150 MB where these arrays cost ~60 MB."""
from __future__ import annotations

import dataclasses
import math
from array import array
from operator import attrgetter

from chunklab.engine.engine import StepRecord
from chunklab.cost_models.step_shape import FEATURES

FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord) if f.name != "features")
FLOAT_FIELDS = ("start_s", "duration_s", "predicted_s")
FEATURE_PREFIX = "f_"  # steps.csv columns of a step's shape features: f_tokens, f_decode_ctx, ...


class StepLog:
    def __init__(self, with_features: bool = False):
        """with_features: also keep each step's FEATURES (a measured run's, to fit cost models on)."""
        self.columns = {name: array("d" if name in FLOAT_FIELDS else "q") for name in FIELDS}
        self._appends = [column.append for column in self.columns.values()]  # in FIELDS order
        self._values = attrgetter(*FIELDS)  # a record's FIELDS as a tuple, in one call (append runs every step)
        self.feature_columns = [array("d") for _ in FEATURES] if with_features else []
        self.columns |= {FEATURE_PREFIX + name: c for name, c in zip(FEATURES, self.feature_columns)}

    @classmethod
    def of(cls, steps) -> "StepLog":
        log = cls()
        for step in steps:
            log.append(step)
        return log

    @classmethod
    def merged(cls, logs: list["StepLog"]) -> "StepLog":
        """Several engines' steps in one log (a cluster's), each engine's in turn, with an `instance`
        column: the index of the log it came from."""
        log = cls()
        instance = array("q")
        for index, part in enumerate(logs):
            for name, column in log.columns.items():
                column.extend(part.columns[name])
            instance.extend([index] * len(part))
        log.columns["instance"] = instance
        return log

    def append(self, step: StepRecord) -> None:
        self.append_values(self._values(step), step.features)

    def append_values(self, values: tuple, features: list[float] | None = None) -> None:
        """A step given as a StepRecord's fields before `features`, in their order (FIELDS), and its features:
        as append(StepRecord(*values, features=features)), without building the record."""
        for column_append, value in zip(self._appends, values):
            column_append(math.nan if value is None else value)
        if self.feature_columns:
            for column, value in zip(self.feature_columns, features or [math.nan] * len(FEATURES)):
                column.append(value)

    def __len__(self) -> int:
        return len(self.columns["start_s"])

    def __getitem__(self, i: int) -> StepRecord:
        values = {name: column[i] for name, column in self.columns.items() if name in FIELDS}
        if self.feature_columns:
            values["features"] = [c[i] for c in self.feature_columns]
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

    def write_csv(self, path, chunk_rows: int = 10_000) -> None:
        """steps.csv, a chunk of rows at a time: all the text of a replayed trace's ~10^6 steps at
        once would cost far more than the columns themselves (chunks of 100,000 rows raised the
        whole trace replay's peak RSS from 310 to 407 MiB; of 10,000, 310). The same text as pandas'
        to_csv (floats as repr, NaN empty), at ~half its time: ~1.2 s of a 260,916-step trace's
        9 s run went to pandas formatting the floats."""
        with open(path, "w") as f:
            f.write(",".join(["step", *self.columns]) + "\n")
            for start in range(0, len(self), chunk_rows):
                end = min(start + chunk_rows, len(self))
                cells = [map(str, range(start, end))] + [_texts(c[start:end]) for c in self.columns.values()]
                f.writelines(f"{','.join(row)}\n" for row in zip(*cells))


def _texts(column: array) -> list[str]:
    if column.typecode == "d":
        return ["" if v != v else repr(v) for v in column.tolist()]  # v != v: NaN, which pandas writes empty
    return list(map(str, column.tolist()))
