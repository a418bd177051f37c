"""Stage fidelity (measured, then simulated): the real engine at fixed points, each repeated,
against the simulated engine on the same requests with this machine's profile
(chunklab/stages/fidelity.py).

    pipelines/fidelity.py --params params.yaml --profile outputs/profiles/machine.json
        --probe-only-profile outputs/profiles/machine_probe_only.json
        --capacity outputs/capacity/measured_vs_simulated.csv
        --out outputs/fidelity --table outputs/tables/fidelity.md
"""
from chunklab.stages.common import arguments, read_params
from chunklab.stages.fidelity import run

if __name__ == "__main__":
    args = arguments(__doc__, "params", "profile", "probe_only_profile", "capacity", "out", "table")
    run(read_params(args.params).fidelity, profile=args.profile, probe_only_profile=args.probe_only_profile,
        capacity_csv=args.capacity,
        out_dir=args.out, table_path=args.table)
