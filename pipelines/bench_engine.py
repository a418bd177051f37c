"""Engine micro-benchmark: prints each figure and its ratio to this machine's matmul rate
(chunklab/stages/bench_engine.py).

    python pipelines/bench_engine.py [--repeats N] [--threads T] [--prompt-tokens N] [--eager]
"""
import argparse

from chunklab.stages.bench_engine import report

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompt-tokens", type=int, default=1536)
    ap.add_argument("--eager", action="store_true", help="eager torch ops (engine.compile=false), not the fused forward")
    args = ap.parse_args()
    report(args.repeats, args.threads, args.prompt_tokens, args.eager)
