"""REPORT.md's writeup: a measured table from another machine never sits silently beside this one's."""
import json

from chunklab.report.writeup import other_machine, repro_cpu

ZEN5 = "AMD EPYC (family 26 model 2 stepping 0, avx512, L2 1024 KiB, L3 32 MiB)"
AVX2 = "AMD EPYC (family 23 model 1 stepping 2, avx2, L2 512 KiB, L3 8 MiB)"


def table(cpu: str) -> str:
    return f"| a | b |\n|---|---|\n| 1 | 2 |\n\nConditions: tiny_gpt, 2x x86_64 CPU ({cpu}), device cpu, 2 threads"


def test_a_table_measured_on_the_repro_cpu_needs_no_line():
    assert other_machine(table(AVX2), AVX2) == []


def test_a_table_from_another_cpu_is_flagged_naming_this_one():
    (line,) = other_machine(table(ZEN5), AVX2)
    assert "another machine" in line and AVX2 in line


def test_two_cpus_sold_under_one_name_are_told_apart():
    """A table written before CPUs carried family/model names only 'AMD EPYC': not this repro's."""
    assert other_machine(table("AMD EPYC"), AVX2) != []


def test_the_repro_cpu_is_the_calibrated_profile_s(tmp_path):
    assert repro_cpu(tmp_path) == ""  # no profile: nothing to compare against, nothing flagged
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "machine.json").write_text(json.dumps({"fingerprint": {"cpu_model": AVX2}}))
    assert repro_cpu(tmp_path) == AVX2
    assert other_machine(table(ZEN5), repro_cpu(tmp_path)) != []
