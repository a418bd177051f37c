"""A run's workload as an MLflow dataset input, with an explicit schema and digest.

MLflow infers a PandasDataset's schema on logging and then warns that integer columns
cannot hold missing values (a hint about model inputs). A workload table never has
missing values and its columns are known, so the schema is declared, not inferred; the
digest is ours too (the trace file's bytes, or the table's), so equal workloads share it.
"""
from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import pandas as pd
from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.pandas_dataset import PandasDataset
from mlflow.types.schema import ColSpec, DataType, Schema

# app.workload_frame's columns
SCHEMA = Schema([ColSpec(DataType.long, "request_id"), ColSpec(DataType.double, "arrival_s"),
                 ColSpec(DataType.long, "prompt_tokens"), ColSpec(DataType.long, "max_output_tokens"),
                 ColSpec(DataType.string, "label")])


class WorkloadDataset(PandasDataset):
    @property
    def schema(self) -> Schema:
        return SCHEMA


def workload_dataset(requests: pd.DataFrame, name: str, trace_path: str, spec: dict[str, str]) -> WorkloadDataset:
    """The trace file (digest of its bytes) or the synthetic spec (digest of the table) as the source."""
    if list(requests.columns) != SCHEMA.input_names():
        raise ValueError(f"workload table columns {list(requests.columns)} != {SCHEMA.input_names()}")
    if trace_path:
        digest = hashlib.sha256(Path(trace_path).read_bytes()).hexdigest()[:16]
        with warnings.catch_warnings():
            # MLflow registers its local-file source twice (schemes "" and "file") and warns that a
            # path matches both; they are the same class, so this one message is noise, nothing else.
            warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted in multiple ways")
            source = resolve_dataset_source(trace_path)
    else:
        digest = hashlib.sha256(pd.util.hash_pandas_object(requests, index=False).to_numpy().tobytes()).hexdigest()[:16]
        source = CodeDatasetSource(tags=spec)
    return WorkloadDataset(df=requests, source=source, name=name, digest=digest)
