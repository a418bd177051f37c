"""Where a wall-clock run's extra TTFT at low load comes from, timed directly (the clocks stage finds
the wall clock's TTFT p50 later than the replay clock's on the same requests; the replay clock
skips idle time, the wall clock sleeps through it). Two candidates, each measured side by side:

1. the sleep's overshoot: how much later than asked time.sleep returns (the wall clock's
   wait_until sleeps until the next arrival);
2. the first step after an idle wait: one short prefill step timed right after a sleep of
   `--idle-ms`, against the same step right after another step (rounds alternate the two).

    .venv/bin/python scripts/clock_wakeup.py --profile outputs/profiles/machine.json

Prints medians and 90th percentiles in milliseconds. Run it alone on the machine: it measures.
"""
from __future__ import annotations

import argparse
import statistics
import time

from chunklab.engine.sequence import Request
from chunklab.experiments.compose import compose_run_config
from chunklab.runner import engine_for


def quantiles_ms(values_s: list[float]) -> str:
    ordered = sorted(values_s)
    return f"median {1e3 * statistics.median(ordered):.3f} ms, p90 {1e3 * ordered[int(0.9 * (len(ordered) - 1))]:.3f} ms"


def sleep_overshoot(delay_s: float, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        time.sleep(delay_s)
        out.append(time.perf_counter() - start - delay_s)
    return out


def first_step_s(engine, request_id: int, prompt_tokens: int, idle_s: float) -> float:
    """One request's first step (its whole prefill), timed, after idle_s of sleep (0: none)."""
    if idle_s:
        time.sleep(idle_s)
    engine.add_request(Request(request_id, 0.0, tuple(range(prompt_tokens)), 2))
    start = time.perf_counter()
    engine.step()
    elapsed = time.perf_counter() - start
    while engine.has_unfinished:
        engine.step()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="this machine's profile (engine.profile)")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--idle-ms", type=float, default=300.0, help="the idle wait before a cold step")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    args = ap.parse_args()

    for delay_ms in (1.0, 10.0, args.idle_ms):
        print(f"sleep {delay_ms:g} ms overshoot: {quantiles_ms(sleep_overshoot(delay_ms / 1e3, 40))}")

    cfg = compose_run_config([f"engine.profile={args.profile}", "tracking=none"])
    engine, _ = engine_for(cfg.serving)
    engine.warmup()
    warm, cold = [], []
    for k in range(args.rounds):  # alternated, so a slow spell of the VM hits both alike
        warm.append(first_step_s(engine, 2 * k, args.prompt_tokens, 0.0))
        cold.append(first_step_s(engine, 2 * k + 1, args.prompt_tokens, args.idle_ms / 1e3))
    print(f"{args.prompt_tokens}-token prefill step right after another step: {quantiles_ms(warm)}")
    print(f"{args.prompt_tokens}-token prefill step after {args.idle_ms:g} ms idle: {quantiles_ms(cold)}")
    print(f"cold over warm, median: {statistics.median(cold) / statistics.median(warm):.2f}x "
          f"(+{1e3 * (statistics.median(cold) - statistics.median(warm)):.3f} ms)")


if __name__ == "__main__":
    main()
