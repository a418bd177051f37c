"""Stage sim_sensitivity: a preset's assumed constants scaled, and reaching every run of the grid."""
from chunklab.stages.shared_params import SimDisaggParams
from chunklab.stages.sim_disagg import base_config
from chunklab.stages.sim_sensitivity import scaled_overrides, setting_name


def test_each_field_is_scaled_from_its_own_preset_and_a_share_stays_at_most_one():
    overrides, values = scaled_overrides("llama3_8b", "h100", ["step_overhead_s"], 2.0)
    assert overrides == ["hardware.efficiency.step_overhead_s=0.004"] and values == {"step_overhead_s": 0.004}
    _, values = scaled_overrides("mistral_nemo_12b", "a100_80g", ["attention_prefill", "attention_decode_bandwidth"], 2.0)
    assert values == {"attention_prefill": 1.0, "attention_decode_bandwidth": 1.0}  # 0.5 and 0.7174 x 2, capped
    _, values = scaled_overrides("mistral_nemo_12b", "a100_80g", ["attention_prefill"], 0.5)
    assert values == {"attention_prefill": 0.25}
    assert setting_name("attention", 0.5) == "attention_x0.5"


def test_a_pairs_overrides_reach_its_runs_and_no_other_pairs():
    p = SimDisaggParams(pairs=[["llama3_8b", "h100", 1.0]], gpus=[2], workloads=["ch10_production"], trace_workloads=[],
                        num_requests=10, seed=1, slos=["disagg_balanced"], capacity_slo="disagg_balanced", target=0.9,
                        capacity_rel_tol=0.1, loads=[1.0], verdict_loads=[1.0], throughput_load=1.0, budgets=[512],
                        colocated_policies=[], prefill_budget=8192, links=["nvlink4"], router="round_robin",
                        tie_margin=0.05, processes=1, overrides=[])
    overrides, _ = scaled_overrides("llama3_8b", "h100", ["step_overhead_s"], 0.5)
    cfg = base_config("llama3_8b", "h100", "ch10_production", p, ("topology=replicas",), 10, tuple(overrides))
    assert cfg.hardware.efficiency.step_overhead_s == 0.001
    assert base_config("llama3_8b", "h100", "ch10_production", p, ("topology=replicas",), 10).hardware.efficiency.step_overhead_s == 0.002
