"""The fused C++ forward (csrc/): built once per machine and source, then loaded.

torch.utils.cpp_extension compiles it with g++ on first use (~30 s on 2 cores)
into .cache/torch_extensions/<cpu tag>/<name>/, the name a digest of the sources
and flags; later processes import that .so directly, whatever the checkout's path
(cpp_extension itself would rebuild when the same sources sit at another path).
`make setup` builds it, so tests and runs do not pay the build. The build is for
this CPU (-march=native, or CHUNKLAB_MARCH): the tag keeps machines that share a checkout apart.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
from functools import cache
from pathlib import Path

import torch

from chunklab.model.linear_plan import LIBRARIES, LinearPlan, pack
from chunklab.model.tiny_gpt import TinyGPT
from chunklab.paths import in_project

CSRC = Path(__file__).parent / "csrc"
SOURCES = ("fused_forward.cpp", "elementwise.cpp", "decode_attention.cpp", "prefill_attention.cpp",
           "panel_linear.cpp")
PREFILL_ATTENTION = ("sdpa", "paged")  # the C++ side's order
# -march=native: this CPU's own vector paths. CHUNKLAB_MARCH names another target, e.g. x86-64-v3
# (AVX2, no AVX-512), so that one machine builds and tests the kernels of a smaller CPU too
# (tests/test_kernel_isa.py); the flags are part of the build's name, so the builds sit apart.
MARCH = os.environ.get("CHUNKLAB_MARCH", "native")
CFLAGS = ["-O3", f"-march={MARCH}", "-fopenmp", "-fopenmp-simd"]


class NativeUnavailable(RuntimeError):
    """The fused forward cannot run here (no compiler, unsupported dtype or device)."""


def _cpu_tag() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
        lines = info.splitlines()
        model = next((l for l in lines if l.startswith("model name")), "")
        flags = next((l for l in lines if l.startswith("flags")), "")
    except OSError:
        model = flags = ""
    key = f"{platform.machine()}|{model}|{flags}|{torch.__version__}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def build_directory() -> Path:
    root = in_project(os.environ.get("CHUNKLAB_EXTENSIONS_DIR", Path(".cache") / "torch_extensions"))
    return root / _cpu_tag()


def extension_name() -> str:
    """A digest of every source and header (torch tracks .cpp files, not headers) and the flags."""
    digest = hashlib.sha256(" ".join(CFLAGS).encode())
    for path in sorted(CSRC.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    return f"chunklab_fused_{digest.hexdigest()[:10]}"


@cache
def load_extension():
    """The compiled module; raises NativeUnavailable with the compiler's reason."""
    name = extension_name()
    build_dir = build_directory() / name
    built = build_dir / f"{name}.so"
    if built.is_file():
        try:
            spec = importlib.util.spec_from_file_location(name, built)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except ImportError:
            pass  # another process is still linking it: cpp_extension.load below waits on its lock
    from torch.utils import cpp_extension

    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        return cpp_extension.load(name=name, sources=[str(CSRC / s) for s in SOURCES], extra_cflags=CFLAGS,
                                  extra_ldflags=["-fopenmp"], build_directory=str(build_dir), verbose=False)
    except (RuntimeError, OSError, ImportError) as exc:
        lines = str(exc).splitlines()
        reason = next((l.strip() for l in lines if "error" in l.lower() and "Error building" not in l), lines[0][:200])
        raise NativeUnavailable(f"building the fused forward failed: {reason}") from exc


class FusedForward:
    """TinyGPT.forward as one C++ call. Holds the weights in the order the C++ side reads them,
    and, where the plan sends any batch size to oneDNN or to panel_linear, each projection
    prepacked once for that library. prefill_attention: paged (the project's kernel) or sdpa."""

    def __init__(self, model: TinyGPT, block_size: int, linear_plan: LinearPlan = LinearPlan.single("mkl"),
                 prefill_attention: str = "paged"):
        p = next(model.parameters())
        if p.dtype != torch.float32 or p.device.type != "cpu" or model.cfg.head_dim % 2:
            raise NativeUnavailable(f"the fused forward runs float32 on CPU with an even head_dim, not {p.dtype} "
                                    f"on {p.device.type}, head_dim {model.cfg.head_dim}")
        self.ext = load_extension()
        self.cfg = model.cfg
        self.block_size = block_size
        self.weights = [model.embed.weight.detach()]
        for b in model.blocks:
            self.weights += [t.detach() for t in (b.attn_norm, b.attn.wqkv, b.attn.wo, b.mlp_norm,
                                                  b.mlp.w_gate_up, b.mlp.w_down)]
        self.weights.append(model.final_norm.detach())
        self.linear_plan = linear_plan
        self.prefill_attention = PREFILL_ATTENTION.index(prefill_attention)
        projections = [w.detach() for b in model.blocks for w in (b.attn.wqkv, b.attn.wo, b.mlp.w_gate_up, b.mlp.w_down)]
        self.packed = [pack(w) for w in projections] if "onednn" in linear_plan.uses else []
        self.panels = self._pack_panels(model) if "panels" in linear_plan.uses else []
        # The forward's activations for steps of up to 512 rows, grown by the C++ side on first use
        # and reused: one engine's, never shared between threads.
        self.scratch = torch.empty(0)
        self.rope_cos = model.rope_cos.float().contiguous()
        self.rope_sin = model.rope_sin.float().contiguous()

    def _pack_panels(self, model: TinyGPT) -> list[torch.Tensor]:
        """Per layer (wqkv, wo, w_gate_up, w_down) in panel form, as fused_forward.cpp's panel path runs
        them: the RMSNorm gains folded into the rows of wqkv and w_gate_up, w_gate_up's gate and up
        columns packed in pairs (its GEMM writes silu(gate) * up)."""
        pack = self.ext.pack_panels
        return [p for b in model.blocks
                for p in (pack(b.attn.wqkv.detach(), b.attn_norm.detach()), pack(b.attn.wo.detach()),
                          pack(b.mlp.w_gate_up.detach(), b.mlp_norm.detach(), pairs=True), pack(b.mlp.w_down.detach()))]

    def __call__(self, input_ids: torch.Tensor, block_tables: torch.Tensor, starts: list[int],
                 num_tokens: list[int], num_decodes: int, kv_cache, sample_rows: list[int] | None = None
                 ) -> torch.Tensor:
        """Hidden states of sample_rows (default: every row), [len(sample_rows), d_model]; see
        csrc/fused_forward.cpp for the layout contract."""
        c = self.cfg
        T = input_ids.shape[0]
        library = LIBRARIES.index(self.linear_plan.library_for(T))  # the C++ enum's order
        return self.ext.forward(input_ids, block_tables, starts, num_tokens, num_decodes, self.weights,
                                kv_cache[0], kv_cache[1], self.rope_cos, self.rope_sin,
                                c.num_heads, c.num_kv_heads, c.head_dim, self.block_size, c.norm_eps,
                                self.packed, self.panels, library, self.prefill_attention,
                                list(range(T)) if sample_rows is None else sample_rows, self.scratch)


def build_now() -> bool:
    """Builds (or loads) the fused forward now and says so; False where it cannot run here."""
    try:
        print(f"fused forward ready: {load_extension().__file__}")
        return True
    except NativeUnavailable as exc:
        print(f"fused forward unavailable, runs will use eager torch ops: {exc}")
        return False


if __name__ == "__main__":  # `python -m chunklab.model.native`: build now (linear_library's main also probes)
    build_now()
