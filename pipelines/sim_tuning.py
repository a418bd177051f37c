"""Stage sim_tuning (simulated): the scheduler's knobs tuned per workload by Optuna through run.py
(chunklab/stages/sim_tuning.py).

    pipelines/sim_tuning.py --params params.yaml --out outputs/simulated/tuning
                            --table outputs/simulated/tables/tuning.md
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.sim_tuning import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "out", "table")
    params = read_params(args.params)
    run(params.sim_tuning, params.sim, profile=args.profile, out_dir=args.out, table_path=args.table)
