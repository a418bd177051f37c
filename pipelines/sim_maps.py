"""Stage sim_maps (simulated): budget x load maps per workload (chunklab/stages/sim_maps.py).

    pipelines/sim_maps.py --params params.yaml --out outputs/simulated/maps
                          --table outputs/simulated/tables/maps.md
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.sim_maps import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "out", "table")
    params = read_params(args.params)
    run(params.sim_maps, params.sim, profile=args.profile, out_dir=args.out, table_path=args.table)
