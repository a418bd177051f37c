"""vLLM's CPU build as a measured peer: the same weights, the same work, scored by our metric code.

`make peers` installs vLLM into its own venv (.peers/vllm/: vLLM pins a transformers
release that ours is past). This module, in our venv, exports TinyGPT as a Llama
checkpoint, writes a work list, runs peers/vllm_worker.py under the peer's python
(one process per token budget: vLLM fixes max_num_batched_tokens at start), and turns
its raw per-token timestamps into our RequestRecords, so TTFT, every-gap ITL and TPOT
are computed for both engines by the same functions.

vLLM runs with the settings its CPU documentation recommends, on the threads our
engine uses: OpenMP bound to every core (no core reserved for its front end),
tcmalloc and Intel OpenMP preloaded where present, a 1 GiB KV cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from chunklab.engine.sequence import Request
from chunklab.metrics.records import RequestRecord, timed_record
from chunklab.paths import in_project

WORKER = Path(__file__).with_name("vllm_worker.py")
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
INSTALL_HINT = "`make peers` installs it (about 3 minutes, 1.4 GB in .peers/vllm/)"


class PeerUnavailable(RuntimeError):
    """vLLM's venv is not installed here (or its python cannot import vllm)."""


def peer_dir() -> Path:
    return in_project(os.environ.get("CHUNKLAB_VLLM_PEER", Path(".peers") / "vllm"))


def peer_python() -> Path:
    python = peer_dir() / "bin" / "python"
    if not python.is_file():
        raise PeerUnavailable(f"vLLM peer not installed ({peer_dir()}): {INSTALL_HINT}")
    return python


def peer_env(threads: int) -> dict[str, str]:
    preload = [str(p) for p in (TCMALLOC, peer_dir() / "lib" / "libiomp5.so") if p.is_file()]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}",
               VLLM_CPU_NUM_OF_RESERVED_CPU="0", OMP_NUM_THREADS=str(threads), VLLM_NO_USAGE_STATS="1",
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)  # our src/ must not shadow anything in the peer's venv
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return env


def export_model(model_cfg, dest: Path) -> Path:
    """TinyGPT (seed from the config) saved as a Hugging Face Llama checkpoint vLLM can load."""
    from chunklab.model.hf_export import to_llama  # optional: transformers, only to export
    from chunklab.model.tiny_gpt import TinyGPT  # optional: torch, only to export

    to_llama(TinyGPT.from_seed(model_cfg, model_cfg.seed)).save_pretrained(dest)
    return dest


def run_worker(spec: dict, threads: int, timeout_s: float = 1200) -> dict:
    """One vLLM engine over spec's tasks; raises with the tail of its log if it fails."""
    python = peer_python()
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out_path, log_path = Path(tmp) / "spec.json", Path(tmp) / "out.json", Path(tmp) / "log"
        spec_path.write_text(json.dumps(spec))
        with open(log_path, "w") as log:
            proc = subprocess.run([str(python), str(WORKER), str(spec_path), str(out_path)], env=peer_env(threads),
                                  cwd=tmp, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        if proc.returncode != 0 or not out_path.is_file():
            tail = log_path.read_text()[-1500:]
            raise RuntimeError(f"vLLM worker failed (exit {proc.returncode}): {tail}")
        return json.loads(out_path.read_text())


def serve_task(requests: list[Request]) -> dict:
    return {"kind": "serve", "requests": [{"id": r.request_id, "arrival_s": r.arrival_s, "prompt": list(r.prompt_token_ids),
                                           "max_tokens": r.max_output_tokens} for r in requests]}


def serve_records(result: dict, requests: list[Request]) -> list[RequestRecord]:
    """The worker's per-token timestamps as our records (first scheduled: when it was submitted)."""
    by_id = {r.request_id: r for r in requests}
    out = []
    for row in sorted(result["requests"], key=lambda row: row["id"]):
        req = by_id[row["id"]]
        out.append(timed_record(req, len(req.prompt_token_ids), row["token_times_s"], row["submitted_s"]))
    return out
