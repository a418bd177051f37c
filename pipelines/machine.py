"""Stage machine: which machine this is, the measured stages' dependency (chunklab/stages/machine.py).

    pipelines/machine.py --out outputs/machine.json
"""
from chunklab.stages.common import arguments
from chunklab.stages.machine import run

if __name__ == "__main__":
    run(arguments(__doc__, "out").out)
