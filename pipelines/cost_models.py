"""Stage cost_models: the roofline cost model fit on committed measurements (chunklab/stages/cost_models.py).

    pipelines/cost_models.py --params params.yaml --shapes outputs/profiles/machine_shapes.csv --out outputs/cost_models
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.cost_models import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "shapes", "out")
    run(read_params(args.params).cost_models, shapes_csv=args.shapes, out_dir=args.out)
