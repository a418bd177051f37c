"""Stage sim_disagg (simulated): colocated replicas against prefill/decode splits of the same GPUs,
at production scale (chunklab/stages/sim_disagg.py).

    pipelines/sim_disagg.py --params params.yaml --out outputs/simulated/disagg
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.sim_disagg import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "out")
    run(read_params(args.params).sim_disagg, out_dir=args.out)
