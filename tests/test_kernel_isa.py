"""The attention kernels' other vector paths, built and tested on this machine.

The C++ kernels choose their vector path at compile time (-march=native): AVX-512, AVX2 or
plain (GCC's generic vectors). A machine only ever tests its own, so CI on an AVX-512 machine
would never run the AVX2 kernels that an AMD Zen 3 takes, and the other way round. Here a
smaller target is built beside the native one (CHUNKLAB_MARCH, a separate build) and the
fused-forward tests run against it in a child process.
"""
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from chunklab.model import native
from helpers import cpu_flags

ROOT = Path(__file__).resolve().parents[1]


def _native_isa() -> str:
    try:
        return native.load_extension().vector_isa()
    except native.NativeUnavailable as exc:
        pytest.skip(f"no fused forward here: {exc}")


def test_the_native_build_takes_this_cpus_widest_path():
    flags = cpu_flags()
    if platform.machine() != "x86_64" or not flags:
        pytest.skip("an x86-64 CPU with /proc/cpuinfo")
    expected = "avx512" if "avx512f" in flags else "avx2" if {"avx2", "fma"} <= flags else "generic"
    assert _native_isa() == expected


@pytest.mark.slow  # one more build of the extension (~1 min on 2 cores) and the fused tests again
@pytest.mark.parametrize("march, isa, needs", [("x86-64-v3", "avx2", {"avx2", "fma"}),
                                               ("x86-64-v2", "generic", {"sse4_2"})])
def test_a_smaller_cpus_kernels_pass_the_fused_tests(march, isa, needs):
    if platform.machine() != "x86_64" or not needs <= cpu_flags():
        pytest.skip(f"this CPU cannot run -march={march}")
    if _native_isa() == isa:
        pytest.skip(f"the default suite already tests the {isa} path on this CPU")
    env = {**os.environ, "CHUNKLAB_MARCH": march}
    built = subprocess.run([sys.executable, "-c", "from chunklab.model import native; "
                            "print(native.load_extension().vector_isa())"],
                           cwd=ROOT, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    assert built.stdout.split()[-1] == isa
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fused.py",
                          "tests/test_panel_linear.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "skipped" not in run.stdout.splitlines()[-1], run.stdout.splitlines()[-1]
