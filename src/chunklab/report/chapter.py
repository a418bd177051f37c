"""The chapter's published figures, for comparison only (4x x86_64, torch 2.14.0, 2026-09-13)."""

CONDITIONS = ("TinyGPT (reference, random weights) (5,838,080 params), 4x x86_64 CPU, torch 2.14.0+cu130, "
              "mixed: 35% of prompts 1536 tokens, rest 16-32, output 32-64, seed 3, arrival rate 8.0/s, "
              "measured 2026-09-13T15:29:29+00:00")

# passes -> total ms for one 1536-token prompt (its one-pass prefill materialised the scores)
PREFILL_SPLIT_MS = {1: 1303.8, 6: 451.3, 24: 378.7}

# budget -> metrics of its single 24-request run; its "ITL p50" is the median of per-request mean gaps
TOKEN_BUDGET = {
    64: {"ttft_p50_s": 4.299, "ttft_p95_s": 9.16, "tpot_p50_s": 0.0742, "output_tokens_per_s": 88.87, "goodput_req_per_s": 0.216},
    512: {"ttft_p50_s": 2.122, "ttft_p95_s": 4.374, "tpot_p50_s": 0.0496, "output_tokens_per_s": 143.3, "goodput_req_per_s": 0.348},
    8192: {"ttft_p50_s": 1.986, "ttft_p95_s": 3.258, "tpot_p50_s": 0.0356, "output_tokens_per_s": 170.7, "goodput_req_per_s": 1.245},
}
