"""A long-lived engine keeps the memory of its large steps (engine/heap.py): counted in page faults."""
import dataclasses
import resource

from chunklab import bench
from chunklab.config import EngineConfig, ModelConfig
from chunklab.engine.heap import DEFAULT_POLICY, heap_policy
from chunklab.engine.sequence import Request
from chunklab.engine.serve import serve
from chunklab.workload.synthetic import prompt_ids


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_a_large_step_after_small_ones_reuses_its_memory():
    """One engine prefills 1,536 tokens in one pass, then in chunks of 256, five times over. Without
    the policy (glibc's adaptive thresholds) every one-pass round after the first faulted 14,784 pages
    (58 MiB) in again on an AMD EPYC VM (the chunked runs' frees trim the heap); with it, none."""
    n = 1536
    engine = bench.make_engine(ModelConfig(), EngineConfig(), budget=n, max_num_seqs=1)
    assert heap_policy() != DEFAULT_POLICY, heap_policy()  # the runner applied it (glibc)
    request = Request(0, 0.0, prompt_ids(0, 0, n, 256), 1)
    one_pass_faults = []
    for _ in range(5):
        for chunk in (n, 256):
            engine.scheduler.cfg = dataclasses.replace(engine.scheduler.cfg, budget=chunk)
            before = _minor_faults()
            serve(engine, [request])
            if chunk == n:
                one_pass_faults.append(_minor_faults() - before)
    # The first passes may fault activations in (~4,800 pages alone; a few hundred more where other
    # tests ran first in this process); after them a pass reuses its memory. Without the policy
    # each pass faults its ~58 MiB again.
    assert max(one_pass_faults[2:]) < 2_000, one_pass_faults


def test_a_measured_run_records_the_heap_policy():
    from chunklab.experiments.compose import compose_run_config
    from chunklab.metrics.conditions import conditions
    from chunklab.model.sizes import num_parameters

    cfg = compose_run_config(["experiment=ch10", "tracking=none"])
    bench.make_engine(cfg.model, cfg.engine, budget=8)
    assert conditions(cfg, num_parameters(cfg.model), forward_path="x")["heap"] == heap_policy()
