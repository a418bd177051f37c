"""Stage cost_models: the roofline cost model fit on committed measurements (chunklab/stages/cost_models.py).

    pipelines/cost_models.py --params params.yaml --out outputs/cost_models
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.cost_models import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "out")
    run(read_params(args.params).cost_models, out_dir=args.out)
