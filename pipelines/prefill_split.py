"""Stage prefill_split (measured): one long prompt prefilled in chunks of each size, each attention
(chunklab/stages/prefill_split.py).

    pipelines/prefill_split.py --params params.yaml --csv outputs/prefill_split.csv
                               --conditions outputs/prefill_split_conditions.json
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.prefill_split import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "csv", "conditions")
    run(read_params(args.params).prefill_split, csv_path=args.csv, conditions_path=args.conditions)
