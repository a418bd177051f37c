"""Stage calibrate: profile the real engine over step shapes, fit the step-cost model,
write the profile a simulated run predicts from.

Writes outputs/profiles/cpu.json (model, conditions, held-out error) and
outputs/profiles/cpu_shapes.csv (every profiled shape: features, measured, predicted).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from chunklab.calibration.fit import split
from chunklab.calibration.profile import calibrate
from chunklab.engine.step_shape import FEATURES
from chunklab.experiments.compose import compose_run_config
from common import OUTPUTS, params, write_json


def main() -> None:
    p = params("calibrate")
    cfg = compose_run_config(["tracking=none", *p["overrides"]])
    cal = calibrate(cfg, p["seed"], p["num_random_shapes"], p["rounds"], p["burst"], p["held_out_share"])
    out = OUTPUTS / "profiles"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu.json").write_text(json.dumps(cal.profile, indent=2) + "\n")
    held = cal.profile["held_out"]
    write_json(out / "metrics.json", {"held_out_median_rel_error": round(held["median_rel_error"], 4),
                                      "held_out_p90_rel_error": round(held["p90_rel_error"], 4),
                                      "profiling_s": cal.profile["shapes"]["profiling_s"]})
    test = set(split(len(cal.shapes), p["held_out_share"], p["seed"])[1])
    x = np.array([s.features() for s in cal.shapes])
    table = pd.DataFrame(x, columns=list(FEATURES))
    table.insert(0, "mixed_batch", [s.mixed_batch for s in cal.shapes])
    table["held_out"] = [i in test for i in range(len(cal.shapes))]
    table["measured_s"] = cal.times_s
    table["predicted_s"] = x @ np.array(cal.profile["model"]["coefficients_s"])
    table.to_csv(out / "cpu_shapes.csv", index_label="shape", float_format="%.6g")
    for name, r in cal.results.items():
        print(f"[calibrate] {name}: held-out median {r.median_rel_error:.3f}, p90 {r.p90_rel_error:.3f} "
              f"({len(r.rel_errors)} shapes)")
    s = cal.profile["shapes"]
    print(f"[calibrate] {s['num_shapes']} shapes x {s['rounds']} rounds x {s['burst']} steps in {s['profiling_s']} s; "
          f"stored linear (better held-out form: {cal.profile['better_form']})")


if __name__ == "__main__":
    main()
