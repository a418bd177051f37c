"""Stage token_budget: the chapter's trace at each budget and seed, at two sizes.

Every run goes through chunklab.app (the same path as run.py) and is logged to
MLflow (experiment "dvc_token_budget"). Writes outputs/token_budget/.
"""
from __future__ import annotations

import pandas as pd

from chunklab.experiments.sweep import grid, run_grid
from common import OUTPUTS, RUNS, params, write_json


def main() -> None:
    p = params("token_budget")
    out = OUTPUTS / "token_budget"
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for size in ("small", "large"):
        base = ["experiment=ch10", "tracking.progress=false", "tracking.experiment_name=dvc_token_budget",
                f"workload.num_requests={p[size + '_requests']}", *p["overrides"]]
        points = grid({"scheduler.budget": p["budgets"], "workload.seed": p["seeds"]})
        res = run_grid(f"budget-{size}", base, points, RUNS,
                       keep_tokens=lambda pt, s=size: s == "small" and pt["workload.seed"] == p["seeds"][0])
        for frame in (res.runs, res.requests):
            frame.insert(0, "size", size)
        results.append(res)
    pd.concat([r.runs for r in results]).to_csv(out / "runs.csv", index=False, float_format="%.6g")
    pd.concat([r.requests for r in results]).to_csv(out / "requests.csv", index=False, float_format="%.6g")
    results[0].tokens.to_csv(out / "tokens.csv", index=False, float_format="%.6g")
    write_json(out / "conditions.json", {"small": results[0].conditions[0], "large": results[1].conditions[0],
                                         "lines": [c for r in results for c in r.conditions]})


if __name__ == "__main__":
    main()
