"""Stage cluster (measured, then simulated): the single engine, 2 replicas and 1 prefill + 1 decode
instance on this machine's cores, repeated, beside their simulated twins; the shm link timed first
(chunklab/stages/cluster.py).

    pipelines/cluster.py --params params.yaml --profile outputs/profiles/machine.json
        --capacity outputs/capacity/measured_vs_simulated.csv
        --out outputs/cluster --table outputs/tables/cluster.md
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.cluster import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "capacity", "out", "table")
    run(read_params(args.params).cluster, profile=args.profile, capacity_csv=args.capacity,
        out_dir=args.out, table_path=args.table)
