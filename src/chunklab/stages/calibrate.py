"""Stage calibrate (measured): profile this machine's engine over step shapes and serving replays,
fit the step-cost model, write this machine's profile.

Writes, in the profiles folder: machine.json (fingerprinted: calibration/fingerprint.py), its
probe-only variant machine_probe_only.json (the fidelity stage's "before"), machine_shapes.csv
(every profiled shape: features, measured, predicted), machine_serving_steps.csv (every
serving-replay step, the same) and metrics.json; and installs machine.json in the per-machine
cache, so engine.profile=auto on this machine uses it.

The sim_* stages, perf and cost_models read this machine.json too (named in their commands), so
every section of REPORT.md describes the machine of this repro.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from chunklab.cost_models.fits.profile import split
from chunklab.calibration.machine import machine_profile_path, write_profile
from chunklab.calibration.profile import HELD_OUT_REPLAYS, CalibrationSettings, calibrate
from chunklab.cost_models.linear import probe_only
from chunklab.cost_models.step_shape import FEATURES
from chunklab.hydra_compose import compose_config
from chunklab.stages.common import arguments, read_section, write_json
from chunklab.stages.typed_yaml import Section


@Section
class CalibrateParams:
    seed: int
    num_random_shapes: int
    rounds: int
    burst: int
    held_out_share: float
    replay_requests: int
    overrides: list[str]


def run(p: CalibrateParams, out_dir: Path) -> None:
    cfg = compose_config(["tracking=none", *p.overrides])  # the model and compute path to calibrate
    settings = CalibrationSettings(seed=p.seed, num_random_shapes=p.num_random_shapes, rounds=p.rounds,
                                   burst=p.burst, held_out_share=p.held_out_share, replay_requests=p.replay_requests)
    cal = calibrate(cfg.model, cfg.engine, settings)
    write_profile(cal.profile, out_dir / "machine.json")
    # its baseline is the stored fit's: the probe-only fit is never read with a sentinel
    write_profile({k: v for k, v in probe_only(cal.profile).items() if k != "sentinel"},
                  out_dir / "machine_probe_only.json")
    write_profile(cal.profile, machine_profile_path(cfg.model, cfg.engine))
    doc = cal.profile
    held, shapes = doc["held_out_serving"], doc["held_out_shapes"]
    write_json(out_dir / "metrics.json", {
        "held_out_serving_median_rel_error": round(held["probe + serving"]["median_rel_error"], 4),
        "held_out_serving_p90_rel_error": round(held["probe + serving"]["p90_rel_error"], 4),
        "held_out_serving_median_rel_error_probe_only": round(held["probe only"]["median_rel_error"], 4),
        "held_out_serving_p90_rel_error_probe_only": round(held["probe only"]["p90_rel_error"], 4),
        "held_out_shapes_median_rel_error": round(shapes["median_rel_error"], 4),
        "held_out_shapes_p90_rel_error": round(shapes["p90_rel_error"], 4),
        "profiling_s": doc["shapes"]["profiling_s"], "serving_s": doc["serving"]["serving_s"]})
    test = set(split(len(cal.shapes), p.held_out_share, p.seed)[1])
    x = np.array([s.features() for s in cal.shapes])
    table = pd.DataFrame(x, columns=list(FEATURES))
    table.insert(0, "mixed_batch", [s.mixed_batch for s in cal.shapes])
    table["held_out"] = [i in test for i in range(len(cal.shapes))]
    table["measured_s"] = cal.times_s
    table["predicted_s"] = x @ np.array(doc["model"]["coefficients_s"])
    table.to_csv(out_dir / "machine_shapes.csv", index_label="shape", float_format="%.6g")
    sv = cal.serving  # every serving step: which replay, features, measured, both fits' predictions
    steps = pd.DataFrame(sv.features, columns=list(FEATURES))
    steps.insert(0, "replay", sv.replay)
    steps.insert(1, "held_out", np.isin(sv.replay, HELD_OUT_REPLAYS))
    steps["measured_s"] = sv.duration_s
    steps["predicted_s"] = sv.features @ np.array(doc["model"]["coefficients_s"])
    steps["predicted_probe_only_s"] = sv.features @ np.array(doc["probe_only"]["coefficients_s"])
    steps.to_csv(out_dir / "machine_serving_steps.csv", index_label="step", float_format="%.6g")
    print(f"[calibrate] {doc['machine']}: fingerprint {doc['fingerprint_id']}")
    for name, r in held.items():
        print(f"[calibrate] fit on {name}: held-out serving steps median {r['median_rel_error']:.3f}, "
              f"p90 {r['p90_rel_error']:.3f}, measured/predicted {r['median_ratio']:.3f} ({r['num_shapes']} steps)")
    print(f"[calibrate] held-out shapes: median {shapes['median_rel_error']:.3f}, p90 {shapes['p90_rel_error']:.3f}; "
          f"{doc['shapes']['profiling_s']} s probing, {doc['serving']['serving_s']} s serving")
    print(f"[calibrate] speed sentinel right after the fit: {doc['sentinel']['baseline_ratio']:.3f} "
          f"(readings {', '.join(f'{r:.3f}' for r in doc['sentinel']['readings'])})")


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.calibrate --params params.yaml --out outputs/profiles
    """
    args = arguments(__doc__, "params", "out", argv=argv)
    run(read_section(args.params, "calibrate", CalibrateParams), out_dir=args.out)


if __name__ == "__main__":
    main()
