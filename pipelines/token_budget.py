"""Stage token_budget (measured): the chapter's trace on the real engine at each budget
(chunklab/stages/token_budget.py).

    pipelines/token_budget.py --params params.yaml --profile outputs/profiles/machine.json
                              --out outputs/token_budget
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.token_budget import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "out")
    run(read_params(args.params).token_budget, profile=args.profile, out_dir=args.out)
