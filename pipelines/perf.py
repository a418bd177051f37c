"""Stage perf (measured): the engine against this machine's limits, the simulator, the chapter's
trace end to end and vLLM's CPU build (chunklab/stages/perf.py).

    pipelines/perf.py --params params.yaml --csv outputs/perf.csv --vs-vllm outputs/perf_vs_vllm.csv
        --end-to-end outputs/perf_end_to_end.csv --conditions outputs/perf_conditions.json
        --metrics outputs/perf_metrics.json --table outputs/tables/perf.md
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.perf import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "csv", "vs_vllm", "end_to_end", "conditions", "metrics", "table")
    run(read_params(args.params).perf, profile=args.profile, csv_path=args.csv, vs_vllm_path=args.vs_vllm,
        end_to_end_path=args.end_to_end, conditions_path=args.conditions, metrics_path=args.metrics,
        table_path=args.table)
