"""Stage sim_traces (simulated): the Azure conversation trace replayed whole, per budget and time
compressed (chunklab/stages/sim_traces.py).

    pipelines/sim_traces.py --params params.yaml --out outputs/simulated/traces
                            --table outputs/simulated/tables/traces.md
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.sim_traces import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "out", "table")
    params = read_params(args.params)
    run(params.sim_traces, params.sim, profile=args.profile, out_dir=args.out, table_path=args.table)
