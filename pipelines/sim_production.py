"""Stage sim_production (simulated): the budget question at production scale, GPU presets priced
by the roofline cost model (chunklab/stages/sim_production.py).

    pipelines/sim_production.py --params params.yaml --out outputs/simulated/production
                                --table outputs/simulated/tables/production.md
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.sim_production import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "out", "table")
    run(read_params(args.params).sim_production, out_dir=args.out, table_path=args.table)
