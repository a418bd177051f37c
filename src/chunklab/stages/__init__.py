"""The DVC stages' logic, one module per stage (pipelines/<stage>.py parses paths and calls it).

The top layer: a stage may import any chunklab package; no chunklab module imports this one.
params.yaml is read here only, typed (params.py).
"""
