"""A long-lived engine keeps the memory of its large steps (engine/malloc_policy.py): counted in page faults."""
import json
import subprocess
import sys

from chunklab import bench
from chunklab.engine.malloc_policy import heap_policy


# Run in a process of its own: the faults a pass takes depend on what the process's heap went
# through before, and under pytest-xdist that is whatever other tests the worker ran (once, 2,112
# pages in a third pass after them, with chunks of 256; alone, 0-576 from the second pass on).
_ONE_PASS_FAULTS = """
import dataclasses, json, resource
from chunklab import bench
from chunklab.config import EngineConfig, ModelConfig
from chunklab.engine.malloc_policy import DEFAULT_POLICY, heap_policy
from chunklab.engine.sequence import Request
from chunklab.engine.replay import replay
from chunklab.workload.synthetic import prompt_ids

def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

n = 1536
# oneDNN at every size, as the one pass runs in every plan: the probed plan (which library the
# chunks take) changes how much their frees trim, so it would change what this test sees.
engine = bench.make_engine(ModelConfig(), EngineConfig(linear_library="onednn"), budget=n, max_num_seqs=1)
request = Request(0, 0.0, prompt_ids(0, 0, n, 256), 1)
one_pass_faults = []
for _ in range(5):
    for chunk in (n, 64):
        engine.scheduler.reconfigure(dataclasses.replace(engine.scheduler.config, budget=chunk))
        before = minor_faults()
        replay(engine, [request])
        if chunk == n:
            one_pass_faults.append(minor_faults() - before)
print(json.dumps({"policy_applied": heap_policy() != DEFAULT_POLICY, "one_pass_faults": one_pass_faults}))
"""


def test_a_large_step_after_small_ones_reuses_its_memory():
    """One engine (oneDNN linear layers) prefills 1,536 tokens in one pass, then in 24 chunks of 64, five
    times over. On an AMD EPYC VM, without the policy (glibc's adaptive thresholds) every one-pass round
    faulted 12,882-15,166 pages (~58 MiB) in again (the chunked runs' frees trim the heap); with it,
    3,687 in the first and 0-512 after. (Chunks of 256 through the probed plan, as this test once ran,
    faulted 2,048-2,661 pages a pass without the policy once the panel path took 256-row steps: too
    close to the bound to tell.)"""
    run = subprocess.run([sys.executable, "-c", _ONE_PASS_FAULTS], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["policy_applied"], got  # the runner applied it (glibc)
    # The first passes may fault activations in (~4,800 pages alone); after them a pass reuses its
    # memory. Without the policy each pass faults its ~58 MiB again.
    assert max(got["one_pass_faults"][2:]) < 2_000, got


def test_a_measured_run_records_the_heap_policy():
    from chunklab.experiments.compose import compose_run_config
    from chunklab.metrics.conditions import conditions
    from chunklab.model.sizes import num_parameters

    cfg = compose_run_config(["experiment=ch10", "tracking=none"])
    bench.make_engine(cfg.model, cfg.engine, budget=8)
    assert conditions(cfg, num_parameters(cfg.model), forward_path="x")["heap"] == heap_policy()
