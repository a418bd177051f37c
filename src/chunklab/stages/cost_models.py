"""Stage cost_models: the roofline cost model (engine/cost_models/roofline.py) fit where measurements exist.

- H100: the GEMM and elementwise efficiencies fit on Vidur's measured operator times of
  Llama-2-7B (data/profiles/vidur/), scored per operator on held-out token counts.
- This CPU: the same form fit on TinyGPT's calibration probe (the reference profile's shapes,
  outputs/profiles/cpu_shapes.csv), beside the linear profile fit on the same shapes.
Both inputs are committed data, so the outputs reproduce on any machine (numbers rounded to 4
significant digits, so a BLAS's last bits cannot change a byte).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from chunklab.costs.cpu_fit import fit_cpu
from chunklab.costs.vidur_fit import VIDUR_CSV, fit_vidur
from chunklab.experiments.compose import compose_run_config
from chunklab.report import figures
from chunklab.stages.common import write_json
from chunklab.stages.params import CostModelsParams


def sig4(x: float) -> float:
    return float(f"{x:.4g}")


def h100(out_dir: Path) -> tuple[dict, pd.DataFrame]:
    """The fit on Vidur's H100 operator times: h100_operators.csv, h100_points.csv, h100_fit.png, h100_fit.json."""
    cfg = compose_run_config(["engine=simulated", "tracking=none", "model=llama2_7b", "hardware=h100"])
    fit = fit_vidur(cfg.model, cfg.hardware)
    errors = fit.errors.assign(median_rel_error=lambda d: d["median_rel_error"].map(sig4),
                               p90_rel_error=lambda d: d["p90_rel_error"].map(sig4))
    errors.to_csv(out_dir / "h100_operators.csv", index=False)
    points = fit.points.assign(predicted_ms=lambda d: d["predicted_ms"].map(sig4))
    points.to_csv(out_dir / "h100_points.csv", index=False)
    figures.operator_fit(points, out_dir / "h100_fit.png", "Llama-2-7B on H100: Vidur's measured operator times "
                         "and the roofline fit (hollow: held out)")
    held = errors[errors["split"] == "held out"].set_index("op")
    doc = {"data": str(VIDUR_CSV), "model": cfg.model.name, "hardware": cfg.hardware.name,
           "held_out": "every third token count (sorted), tensor-parallel degree 1",
           "efficiency": {k: sig4(v) for k, v in fit.efficiency.items()},
           "held_out_error": {op: {"median_rel_error": r.median_rel_error, "p90_rel_error": r.p90_rel_error,
                                   "n": int(r.n)} for op, r in held.iterrows()},
           "not_in_data": "attention kernels (prefill and decode), the embedding lookup's share of a step, "
                          "per-step scheduling overhead"}
    write_json(out_dir / "h100_fit.json", doc)
    return doc, errors


def cpu(p: CostModelsParams, out_dir: Path) -> tuple[dict, pd.DataFrame]:
    """The fit on the reference profile's probe shapes: cpu_forms.csv, cpu_fit.json."""
    cfg = compose_run_config(["engine=simulated", "tracking=none", *p.cpu_overrides])
    eff, forms = fit_cpu(cfg.model)
    forms = forms.assign(median_rel_error=lambda d: d["median_rel_error"].map(sig4),
                         p90_rel_error=lambda d: d["p90_rel_error"].map(sig4))
    forms.to_csv(out_dir / "cpu_forms.csv", index=False)
    doc = {"data": "outputs/profiles/cpu_shapes.csv (the reference profile's calibration probe, mixed-batch shapes)",
           "model": cfg.model.name, "units": "efficiencies on a unit device of 1 TFLOP/s and 1 TB/s: the rates reached",
           "efficiency": {k: sig4(v) for k, v in eff.items()}}
    write_json(out_dir / "cpu_fit.json", doc)
    return doc, forms


def run(p: CostModelsParams, out_dir: Path) -> None:
    """Writes out_dir: both fits' files and cost_models.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    h, h_err = h100(out_dir)
    c, c_forms = cpu(p, out_dir)
    held = h_err[h_err["split"] == "held out"].drop(columns="split")
    e = c["efficiency"]
    md = ["### The roofline cost model, fit where measurements exist", "",
          "**H100** (Vidur's measured operator times of Llama-2-7B, tensor-parallel 1; fit on two thirds of the "
          "token counts 1-4096, scored on every third, held out):", "",
          held.to_markdown(index=False, floatfmt=".3f"), "",
          "Fitted: GEMMs reach " + f"{h['efficiency']['gemm_max']:.1%} of the dense BF16 peak at many rows (half of "
          f"that at {h['efficiency']['gemm_half_rows']:.0f} rows) and read weights at "
          f"{h['efficiency']['weight_bandwidth']:.1%} of HBM bandwidth; elementwise kernels move bytes at "
          f"{h['efficiency']['elementwise_bandwidth']:.1%} of it, at least "
          f"{h['efficiency']['kernel_floor_s'] * 1e6:.1f} us each (one share for all five kernels: it fits their "
          "sum, not each alone). Not in the data: " + h["not_in_data"] + "; conf/hardware/h100.yaml says what "
          "each of those terms rests on.", "",
          "**This CPU** (TinyGPT's calibration probe of the reference profile, mixed-batch shapes; same held-out "
          "shapes for both forms):", "",
          c_forms.to_markdown(index=False, floatfmt=".3f"), "",
          f"Rates the roofline fit implies: GEMMs up to {e['gemm_max'] * 1e3:.0f} GFLOP/s (half at "
          f"{e['gemm_half_rows']:.0f} rows), weights read at {e['weight_bandwidth'] * 1e3:.1f} GB/s, prefill "
          f"attention {e['attention_prefill'] * 1e3:.0f} GFLOP/s, decode K/V reads "
          f"{e['attention_decode_bandwidth'] * 1e3:.2f} GB/s, {e['step_overhead_s'] * 1e3:.2f} ms a step.", ""]
    (out_dir / "cost_models.md").write_text("\n".join(md))
