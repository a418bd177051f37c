"""A new policy, router or cost model is one file in its package plus one YAML in its config group:
no registry, list or config class is edited. Checked on a copy of the project (src/, conf/, run.py)
with the three files added, run from the command line as a user would."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chunklab.topology.routers import ROUTERS
from chunklab.topology.cluster import TOPOLOGIES
from chunklab.config import ConfigError
from chunklab.engine.build import EXECUTORS
from chunklab.cost_models import COST_MODELS
from chunklab.engine.policies import ADMISSIONS, ORDERINGS
from chunklab.registry import Registry

ROOT = Path(__file__).resolve().parents[1]

PLUGINS = {
    # an ordering: admissions first, then in-flight prefills, then decodes
    "src/chunklab/engine/policies/admissions_first.py": """
        from chunklab.engine.policies.base import OrderingPolicy, Part


        class AdmissionsFirst(OrderingPolicy):
            name = "admissions_first"
            parts = (Part.ADMISSIONS, Part.PREFILLS, Part.DECODES)
        """,
    "conf/scheduler/admissions_first.yaml": """
        defaults:
          - decode_first
          - _self_
        ordering: admissions_first
        """,
    # a router: always the last instance
    "src/chunklab/topology/routers/last.py": """
        from chunklab.topology.routers.base import Router


        class Last(Router):
            name = "last"

            def choose(self, instances, request) -> int:
                return len(instances) - 1
        """,
    "conf/router/last.yaml": """
        defaults:
          - round_robin
          - _self_
        name: last
        """,
    # a cost model: every step takes one millisecond
    "src/chunklab/cost_models/constant.py": """
        from chunklab.cost_models.base import COST_MODELS, Provenance


        class ConstantCostModel:
            provenance = Provenance("constant", {"cost_model": "constant"}, {"device": "simulated (constant)"}, "1 ms a step")

            def predict(self, shape) -> float:
                return 1e-3


        @COST_MODELS.register("constant")
        def constant(model, engine, hardware, required):
            return ConstantCostModel(), ""
        """,
    "conf/hardware/constant.yaml": """
        name: constant
        cost_model: constant
        description: every step 1 ms
        """,
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "conf", root / "conf")
    shutil.copy(ROOT / "run.py", root / "run.py")
    (root / "outputs" / "profiles").mkdir(parents=True)
    shutil.copy(ROOT / "outputs" / "profiles" / "machine.json", root / "outputs" / "profiles" / "machine.json")
    for rel, body in PLUGINS.items():
        (root / rel).write_text(textwrap.dedent(body).lstrip())
    return root


def run(project: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(project / "src"))
    env.pop("CHUNKLAB_PROJECT_DIR", None)
    return subprocess.run([sys.executable, "run.py", "engine=simulated", "engine.profile=outputs/profiles/machine.json",
                           "tracking=none", "workload.num_requests=30", f"hydra.run.dir={project}/runs/x", *overrides],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_a_policy_a_router_and_a_cost_model_are_one_file_and_one_yaml_each(project):
    out = run(project, "scheduler=admissions_first", "topology=replicas", "topology.replicas=2", "router=last",
              "hardware=constant", "engine.num_blocks=1024")
    assert out.returncode == 0, out.stderr[-2000:]
    [line] = out.stdout.splitlines()
    assert line.startswith("budget") and "simulated: 1 ms a step" in line
    summary = (project / "runs" / "x" / "summary.json").read_text()
    assert '"instance_replica0_routed": 0' in summary and '"instance_replica1_routed": 30' in summary  # the router's choice


def test_an_unknown_name_is_one_line_listing_every_registered_one_the_new_ones_included(project):
    out = run(project, "router.name=fastest")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("chunklab: error: router.name='fastest': must be one of last, least_outstanding_requests, "
                                  "least_outstanding_tokens, power_of_two, round_robin")
    out = run(project, "scheduler.ordering=lifo")
    assert out.stderr.strip().endswith("must be one of admissions_first, decode_first, prefill_first")


def test_every_kind_of_variant_is_chosen_through_one_registry():
    registries = {"engine.executor": EXECUTORS, "hardware.cost_model": COST_MODELS, "scheduler.ordering": ORDERINGS,
                  "scheduler.admission": ADMISSIONS, "router.name": ROUTERS, "topology.name": TOPOLOGIES}
    for key, registry in registries.items():
        assert isinstance(registry, Registry) and registry.key == key and registry.names()
    assert TOPOLOGIES.names() == ["disaggregated", "replicas", "single"]
    with pytest.raises(ConfigError, match=r"^router\.decode='x': must be one of "):
        ROUTERS.get("x", "router.decode")


def test_a_name_registered_twice_for_two_things_is_refused():
    reg = Registry("thing.name")
    reg.register("a")(int)
    reg.add("a", int)  # the same thing again (a module imported twice) is fine
    with pytest.raises(ValueError, match="'a' is registered twice"):
        reg.add("a", float)
