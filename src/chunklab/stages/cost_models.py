"""Stage cost_models: the roofline cost model (cost_models/roofline.py) fit where measurements exist.

- Each GPU preset with published operator times of its own device (H100, A100; params
  cost_models.devices): the GEMM and elementwise efficiencies fit on Vidur's measured operator
  times of Llama-2-7B on that device (data/profiles/vidur/), scored per operator on held-out token
  counts; and every device's decode-sized steps priced by every fit (decode_steps.csv).
- This CPU: the same form fit on TinyGPT's calibration probe (this repro's probe shapes,
  outputs/profiles/machine_shapes.csv), beside the linear profile fit on the same shapes.
Both inputs are committed data, so the outputs reproduce on any machine (numbers rounded to 4
significant digits, so a BLAS's last bits cannot change a byte).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from chunklab.cost_models.fits.cpu import fit_cpu
from chunklab.cost_models.fits.vidur import (DECODE_STEP_TOKENS, fit_vidur, read_operator_times, step_error,
                                      with_efficiency)
from chunklab.hydra_compose import compose_config
from chunklab.paths import project_dir
from chunklab.stages.common import arguments, read_section, write_json
from chunklab.stages.shared_params import VidurDevice
from chunklab.stages.typed_yaml import Section


@Section
class CostModelsParams:
    devices: list[VidurDevice]  # each GPU preset fit on its own device's operator times
    cpu_overrides: list[str]


def sig4(x: float) -> float:
    return float(f"{x:.4g}")


def device_fit(d: VidurDevice, out_dir: Path) -> tuple[dict, pd.DataFrame]:
    """The fit of preset d.hardware on Vidur's operator times measured on that device (d.data):
    <name>_operators.csv, <name>_points.csv (the plots stage draws them), <name>_fit.json."""
    cfg = compose_config(["engine=simulated", "tracking=none", "model=llama2_7b", f"hardware={d.hardware}"])
    fit = fit_vidur(cfg.model, cfg.hardware, Path(d.data))
    errors = fit.errors.assign(median_rel_error=lambda e: e["median_rel_error"].map(sig4),
                               p90_rel_error=lambda e: e["p90_rel_error"].map(sig4))
    errors.to_csv(out_dir / f"{d.name}_operators.csv", index=False)
    points = fit.points.assign(predicted_ms=lambda e: e["predicted_ms"].map(sig4))
    points.to_csv(out_dir / f"{d.name}_points.csv", index=False)
    held = errors[errors["split"] == "held out"].set_index("op")
    doc = {"data": d.data, "model": cfg.model.name, "hardware": cfg.hardware.name,
           "held_out": "every third token count (sorted), tensor-parallel degree 1",
           "efficiency": {k: sig4(v) for k, v in fit.efficiency.items()},
           "held_out_error": {op: {"median_rel_error": r.median_rel_error, "p90_rel_error": r.p90_rel_error,
                                   "n": int(r.n)} for op, r in held.iterrows()},
           "not_in_data": "attention kernels (prefill and decode), the embedding lookup's share of a step, "
                          "per-step scheduling overhead"}
    write_json(out_dir / f"{d.name}_fit.json", doc)
    return doc, errors


def decode_steps(devices: list[VidurDevice], fits: dict[str, dict]) -> pd.DataFrame:
    """decode_steps.csv: each device's operator times priced with each fit's efficiencies (its own and
    the others', as a borrowing preset would be): a whole layer's signed error on steps of at most
    DECODE_STEP_TOKENS tokens (> 0: predicted too slow)."""
    rows = []
    for d in devices:
        cfg = compose_config(["engine=simulated", "tracking=none", "model=llama2_7b", f"hardware={d.hardware}"])
        data = read_operator_times(Path(d.data))
        for source in devices:
            e = step_error(data, cfg.model, with_efficiency(cfg.hardware, fits[source.name]["efficiency"]))
            rows.append({"data": d.hardware, "efficiencies_fit_on": source.hardware, "max_tokens": DECODE_STEP_TOKENS,
                         **{k: sig4(v) if k != "n" else v for k, v in e.items()}})
    return pd.DataFrame(rows)


def cpu(p: CostModelsParams, shapes_csv: Path, out_dir: Path) -> tuple[dict, pd.DataFrame]:
    """The fit on this repro's calibration probe shapes (shapes_csv): cpu_forms.csv, cpu_fit.json."""
    cfg = compose_config(["tracking=none", *p.cpu_overrides])  # the model only
    eff, forms = fit_cpu(cfg.model, shapes_csv)
    forms = forms.assign(median_rel_error=lambda d: d["median_rel_error"].map(sig4),
                         p90_rel_error=lambda d: d["p90_rel_error"].map(sig4))
    forms.to_csv(out_dir / "cpu_forms.csv", index=False)
    doc = {"data": f"{shapes_csv} (this repro's calibration probe, mixed-batch shapes)",
           "model": cfg.model.name, "units": "efficiencies on a unit device of 1 TFLOP/s and 1 TB/s: the rates reached",
           "efficiency": {k: sig4(v) for k, v in eff.items()}}
    write_json(out_dir / "cpu_fit.json", doc)
    return doc, forms


def presets(fits: dict[str, dict]) -> pd.DataFrame:
    """presets.csv: every roofline preset in conf/hardware/ and whose fit its GEMM and elementwise
    efficiencies are (equal to every fitted number): its own device's, another device's (borrowed),
    or none (its own figures, not fit here)."""
    rows = []
    for path in sorted((project_dir() / "conf" / "hardware").glob("*.yaml")):
        hw = compose_config(["engine=simulated", "tracking=none", "model=llama2_7b", f"hardware={path.stem}"]).hardware
        if hw.cost_model != "roofline":
            continue
        same = [f["hardware"] for f in fits.values()
                if all(getattr(hw.efficiency, k) == v for k, v in f["efficiency"].items())]
        fit_on = hw.name if hw.name in same else (same[0] if same else "")
        rows.append({"hardware": hw.name, "efficiencies_fit_on": fit_on,
                     "efficiencies": "own device's fit" if fit_on == hw.name else
                     f"borrowed from {fit_on}" if fit_on else "not fit (the preset's own figures)"})
    return pd.DataFrame(rows)


def device_md(d: VidurDevice, h: dict, errors: pd.DataFrame) -> list[str]:
    held = errors[errors["split"] == "held out"].drop(columns="split")
    e = h["efficiency"]
    return [f"**{d.name.upper()}** (preset `{d.hardware}`; Vidur's measured operator times of Llama-2-7B on this "
            "device, tensor-parallel 1; fit on two thirds of the token counts 1-4096, scored on every third, held out):",
            "", held.to_markdown(index=False, floatfmt=".3f"), "",
            "Fitted: GEMMs reach " + f"{e['gemm_max']:.1%} of the dense BF16 peak at many rows (half of "
            f"that at {e['gemm_half_rows']:.0f} rows) and read weights at "
            f"{e['weight_bandwidth']:.1%} of HBM bandwidth; elementwise kernels move bytes at "
            f"{e['elementwise_bandwidth']:.1%} of it, at least "
            f"{e['kernel_floor_s'] * 1e6:.1f} us each (one share for all five kernels: it fits their "
            "sum, not each alone). Not in the data: " + h["not_in_data"] + f"; conf/hardware/{d.hardware}.yaml says "
            "what each of those terms rests on.", ""]


def run(p: CostModelsParams, shapes_csv: Path, out_dir: Path) -> None:
    """Writes out_dir: every fit's files, decode_steps.csv and cost_models.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fits, md = {}, ["### The roofline cost model, fit where measurements exist", ""]
    for d in p.devices:
        fits[d.name], errors = device_fit(d, out_dir)
        md += device_md(d, fits[d.name], errors)
    steps = decode_steps(p.devices, fits)
    steps.to_csv(out_dir / "decode_steps.csv", index=False)
    table = presets(fits)
    table.to_csv(out_dir / "presets.csv", index=False)
    if len(p.devices) > 1:
        held = {d.name: pd.Series({op: r["median_rel_error"] for op, r in fits[d.name]["held_out_error"].items()})
                for d in p.devices}
        md += ["Held-out median error per operator, each device's own fit side by side:", "",
               pd.DataFrame(held).rename_axis("op").reset_index().to_markdown(index=False, floatfmt=".3f"), ""]
    md += [f"Decode-sized steps (at most {DECODE_STEP_TOKENS} tokens): a whole layer's signed error, predicted over "
           "measured less one (> 0: too slow), on each device's operator times priced with each fit's efficiencies "
           "(another device's: what a preset borrowing them would predict):", "",
           steps.to_markdown(index=False, floatfmt=".3f"), ""]
    md += ["Each GPU preset's GEMM and elementwise efficiencies, and whose fit they are (a borrowed fit is "
           "unverified on the borrowing device):", "", table.to_markdown(index=False), ""]
    c, c_forms = cpu(p, shapes_csv, out_dir)
    e = c["efficiency"]
    md += ["**This CPU** (TinyGPT's calibration probe of this repro's profile, outputs/profiles/machine_shapes.csv, "
           "mixed-batch shapes; same held-out shapes for both forms):", "",
           c_forms.to_markdown(index=False, floatfmt=".3f"), "",
           f"Rates the roofline fit implies: GEMMs up to {e['gemm_max'] * 1e3:.0f} GFLOP/s (half at "
           f"{e['gemm_half_rows']:.0f} rows), weights read at {e['weight_bandwidth'] * 1e3:.1f} GB/s, prefill "
           f"attention {e['attention_prefill'] * 1e3:.0f} GFLOP/s, decode K/V reads "
           f"{e['attention_decode_bandwidth'] * 1e3:.2f} GB/s, {e['step_overhead_s'] * 1e3:.2f} ms a step.", ""]
    (out_dir / "cost_models.md").write_text("\n".join(md))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.cost_models --params params.yaml --shapes outputs/profiles/machine_shapes.csv --out outputs/cost_models
    """
    args = arguments(__doc__, "params", "shapes", "out", argv=argv)
    run(read_section(args.params, "cost_models", CostModelsParams), shapes_csv=args.shapes, out_dir=args.out)


if __name__ == "__main__":
    main()
