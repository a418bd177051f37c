"""Stage calibrate (measured): this machine's step-cost profile from probe shapes and serving
replays (chunklab/stages/calibrate.py).

    pipelines/calibrate.py --params params.yaml --out outputs/profiles
"""
from chunklab.stages.calibrate import run
from chunklab.stages.common import arguments, read_params

if __name__ == "__main__":
    args = arguments(__doc__, "params", "out")
    run(read_params(args.params).calibrate, out_dir=args.out)
