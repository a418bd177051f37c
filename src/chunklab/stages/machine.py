"""Stage machine: which machine this checkout's measured stages run on (outputs/machine.json).

DVC reruns a stage when a dependency changes, and the machine is not a file: a clone moved
from an Intel VM to an AMD one would keep the first machine's measured tables. This stage
runs on every `dvc repro` (always_changed) and writes only what tells machines apart, so
its output changes exactly when the machine does, and every measured stage, which depends
on it, reruns then and only then. Simulated stages do not depend on it: they are the same
on every machine.
"""
from __future__ import annotations

from pathlib import Path

from chunklab.calibration.fingerprint import machine_identity
from chunklab.stages.common import arguments, write_json


def run(out_path: Path) -> None:
    identity = machine_identity()
    write_json(out_path, identity)
    print(f"[machine] {identity['cpu_model']}, {identity['cpu_logical_cores']} logical cores, "
          f"torch {identity['torch_version']} ({identity['torch_threads']} threads)")


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.machine --out outputs/machine.json
    """
    args = arguments(__doc__, "out", argv=argv)
    run(args.out)


if __name__ == "__main__":
    main()
