"""Instruction-set caps (chunklab/isa.py): a capped process runs every library at the cap."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chunklab import isa
from chunklab.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CPU_FLAGS = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
needs_avx2 = pytest.mark.skipif(" avx2 " not in CPU_FLAGS, reason="no AVX2 on this CPU")


def test_an_unknown_isa_is_one_line_naming_the_known_ones():
    with pytest.raises(ConfigError) as err:
        isa.env_for("avx1024")
    assert str(err.value) == "isa='avx1024': must be one of native, avx2"


def test_the_current_cap_is_read_from_the_environment(monkeypatch):
    for key in isa.KEYS:
        monkeypatch.delenv(key, raising=False)
    assert isa.current() == "native"
    for key, value in isa.CAPS["avx2"].items():
        monkeypatch.setenv(key, value)
    assert isa.current() == "avx2"
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS")  # one library left uncapped: not the cap
    assert isa.current() == "custom"


def capped_run(tmp_path: Path, code: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    """code in a fresh interpreter, started uncapped, that restarts itself under the avx2 cap first."""
    script = tmp_path / "capped.py"
    script.write_text(f"import sys\nfrom chunklab import isa\nisa.reexec_under('avx2', sys.argv)\n{code}\n")
    env = {k: v for k, v in os.environ.items() if k not in isa.KEYS} | extra_env
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@needs_avx2
def test_a_process_restarted_under_the_cap_runs_torch_and_onednn_at_avx2(tmp_path):
    code = ("import torch\nfrom chunklab import bench\nprint('cap', isa.current())\n"
            "print('torch', torch.backends.cpu.get_cpu_capability())\n"
            "bench.gemm_fn('onednn', torch.randn(64, 256), torch.randn(128, 256))()")
    proc = capped_run(tmp_path, code, {"ONEDNN_VERBOSE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cap avx2" in proc.stdout and "torch AVX2" in proc.stdout
    verbose = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("onednn_verbose")]
    assert any("isa:Intel AVX2" in line for line in verbose), verbose  # what oneDNN says it may use
    ran = [line for line in verbose if ",primitive,exec," in line]  # and the kernels it ran (brg_matmul:avx2)
    assert ran and all("avx512" not in line.lower().replace("-", "") for line in ran), ran


def test_the_fused_kernels_build_for_the_cap_s_target(tmp_path):
    proc = capped_run(tmp_path, "from chunklab.model import native\nprint('march', native.MARCH)", {})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "march x86-64-v3" in proc.stdout
