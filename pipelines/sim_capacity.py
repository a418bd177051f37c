"""Stage sim_capacity (simulated): each workload's capacity at the chapter's budgets and at its
tuned settings (chunklab/stages/sim_capacity.py).

    pipelines/sim_capacity.py --params params.yaml --tuning outputs/simulated/tuning
                              --out outputs/simulated/capacity --table outputs/simulated/tables/capacity.md
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.sim_capacity import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "tuning", "out", "table")
    params = read_params(args.params)
    run(params.sim_capacity, params.sim, profile=args.profile, tuning_dir=args.tuning, out_dir=args.out, table_path=args.table)
