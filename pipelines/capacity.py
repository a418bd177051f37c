"""Stage capacity (measured): this machine's capacity on the real engine beside the simulated one
of its profile (chunklab/stages/capacity.py).

    pipelines/capacity.py --params params.yaml --profile outputs/profiles/machine.json
                          --out outputs/capacity --table outputs/tables/capacity.md
"""
from chunklab.stages.capacity import run
from chunklab.stages.common import arguments, read_params

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "out", "table")
    run(read_params(args.params).capacity, profile=args.profile, out_dir=args.out, table_path=args.table)
