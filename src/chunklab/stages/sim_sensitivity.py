"""Stage sim_sensitivity (SIMULATED): which P/D verdicts move when the GPU presets' assumed constants do.

The roofline prices a GPU step with efficiencies fit on measured operator times (GEMMs, elementwise)
and with constants nobody measured for us: the step overhead (2 ms: scheduling, sampling, launches)
and the attention efficiencies (prefill from the FlashAttention papers, decode assumed equal to the
fitted weight-read share). Each knob is scaled by each factor, one knob at a time, in every preset of
sim_disagg's pairs (a share of a peak is capped at 1), and sim_disagg's grid runs again on `gpus`
(a part of its GPU counts: the runs cost what the grid does). The report decides the published
statements on each setting's tables with the rules of the main grid and names the verdicts that
move (report/disagg_text.py).

Writes out_dir/<knob>_x<factor>/ (sim_disagg's files), and out_dir/settings.json: each setting's knob,
factor and the seconds or shares it gave each preset.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from chunklab.experiments.compose import compose_run_config
from chunklab.stages.common import arguments, read_section, write_json
from chunklab.stages.shared_params import SimDisaggParams
from chunklab.stages.sim_disagg import run as run_disagg
from chunklab.stages.typed_yaml import Section

SHARES = ("attention_prefill", "attention_decode_bandwidth")  # shares of a peak: at most 1


@Section
class SimSensitivityParams:
    knobs: dict[str, list[str]]  # knob -> the hardware.efficiency fields it scales together
    factors: list[float]  # each knob x each factor, one knob at a time
    gpus: list[int]  # sim_disagg's grid on these GPU counts (a subset of sim_disagg.gpus)


def setting_name(knob: str, factor: float) -> str:
    return f"{knob}_x{factor:g}"


def scaled_overrides(model: str, hardware: str, fields: list[str], factor: float) -> tuple[list[str], dict]:
    """Hydra overrides setting each field of the preset's efficiency to factor x its value (a share
    capped at 1), and the values set."""
    efficiency = compose_run_config(["engine=simulated", "tracking=none", f"model={model}",
                                     f"hardware={hardware}"]).hardware.efficiency
    values = {}
    for name in fields:
        value = getattr(efficiency, name) * factor
        values[name] = min(value, 1.0) if name in SHARES else value
    return [f"hardware.efficiency.{k}={v!r}" for k, v in values.items()], values


def run(p: SimSensitivityParams, disagg: SimDisaggParams, out_dir: Path) -> None:
    if not set(p.gpus) <= set(disagg.gpus) or min(p.gpus) != min(disagg.gpus):
        # a run's requests scale from the grid's smallest N: the same smallest N, the same runs as the main grid's
        raise SystemExit(f"sim_sensitivity.gpus={p.gpus}: must be among sim_disagg.gpus {disagg.gpus}, "
                         f"its smallest among them")
    unknown = [f for fields in p.knobs.values() for f in fields
               if f not in {x.name for x in dataclasses.fields(type(compose_run_config([]).hardware.efficiency))}]
    if unknown:
        raise SystemExit(f"sim_sensitivity.knobs: {unknown[0]!r} is not a field of hardware.efficiency")
    grid = dataclasses.replace(disagg, gpus=p.gpus)
    settings = {}
    for knob, fields in p.knobs.items():
        for factor in p.factors:
            name = setting_name(knob, factor)
            overrides, values = {}, {}
            for model, hardware, _ in grid.pairs:
                overrides[model, hardware], values[f"{model} on {hardware}"] = scaled_overrides(
                    model, hardware, fields, factor)
            print(f"[sim_sensitivity] {name}: {values}", flush=True)
            run_disagg(grid, out_dir / name, {k: tuple(v) for k, v in overrides.items()})
            settings[name] = {"knob": knob, "factor": factor, "fields": fields, "values": values}
    write_json(out_dir / "settings.json", {"gpus": p.gpus, "settings": settings})


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_sensitivity --params params.yaml --out outputs/simulated/sensitivity
    """
    args = arguments(__doc__, "params", "out", argv=argv)
    run(read_section(args.params, "sim_sensitivity", SimSensitivityParams),
        read_section(args.params, "sim_disagg", SimDisaggParams), out_dir=args.out)


if __name__ == "__main__":
    main()
