"""The DVC stages, one module per stage: its params dataclass, its `run`, and a `main` that dvc.yaml's
cmd runs (`python -m chunklab.stages.<stage> --params params.yaml --out ...`).

The top layer: a stage may import any chunklab package; no chunklab module imports this one.
params.yaml is read here only, each section typed by its stage's dataclass (typed_yaml.py).
"""
