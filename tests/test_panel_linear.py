"""panel_linear, the project's own GEMM (csrc/panel_linear.cpp), and its epilogues (panel_gemm), against
torch at every kind of edge: row counts that leave uneven blocks and chunks, column counts that end inside
a panel or leave an odd panel."""
import pytest
import torch

from chunklab.model.native import load_extension


@pytest.mark.parametrize("rows", [0, 1, 3, 8, 12, 13, 25, 97, 200])
@pytest.mark.parametrize("k, n", [(7, 16), (64, 40), (32, 48), (256, 384), (96, 5)])
@pytest.mark.parametrize("threads", [1, 2])
def test_panel_linear_matches_mm(rows, k, n, threads):
    ext = load_extension()
    gen = torch.Generator().manual_seed(rows * 1000 + k + n)
    x, w = torch.randn(rows, k, generator=gen), torch.randn(k, n, generator=gen)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = ext.panel_linear(x, ext.pack_panels(w), n)
    finally:
        torch.set_num_threads(previous)
    assert got.shape == (rows, n)
    torch.testing.assert_close(got, x @ w, rtol=1e-4, atol=1e-4)


def test_panel_linear_refuses_a_column_count_its_panels_cannot_hold():
    ext = load_extension()
    panels = ext.pack_panels(torch.randn(8, 40))  # 3 panels: 33-48 columns
    with pytest.raises(RuntimeError, match="cannot hold"):
        ext.panel_linear(torch.randn(2, 8), panels, 64)


@pytest.mark.parametrize("rows", [1, 5, 13, 64, 97, 200])  # past 128 rows the norm runs over the threads
@pytest.mark.parametrize("k, f", [(32, 40), (64, 16), (96, 5)])
@pytest.mark.parametrize("threads", [1, 2])
def test_panel_gemm_epilogues_match_the_separate_steps(rows, k, f, threads):
    """The fused forward's panel path: RMSNorm (gain folded into the packed rows) then x @ w; the
    residual add into y; RMSNorm then silu(gate) * up of a [gate | up] weight packed in pairs."""
    ext = load_extension()
    gen = torch.Generator().manual_seed(rows * 100 + k + f)
    x, gain = torch.randn(rows, k, generator=gen), torch.rand(k, generator=gen) + 0.5
    w, w_gate_up = torch.randn(k, 3 * f, generator=gen), torch.randn(k, 2 * f, generator=gen)
    residual = torch.randn(rows, 3 * f, generator=gen)
    eps = 1e-5
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        normed = torch.empty(rows, 3 * f)
        ext.panel_gemm(x, ext.pack_panels(w, gain), normed, 0, eps)
        added = residual.clone()
        ext.panel_gemm(x, ext.pack_panels(w), added, 1)
        act = torch.empty(rows, f)
        ext.panel_gemm(x, ext.pack_panels(w_gate_up, gain, pairs=True), act, 2, eps)
    finally:
        torch.set_num_threads(previous)
    h = torch.nn.functional.rms_norm(x, (k,), gain, eps)  # as TinyGPT normalises
    torch.testing.assert_close(normed, h @ w, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(added, residual + x @ w, rtol=1e-4, atol=1e-4)
    gate, up = (h @ w_gate_up).chunk(2, dim=-1)
    torch.testing.assert_close(act, torch.nn.functional.silu(gate) * up, rtol=1e-4, atol=1e-4)


def test_panel_gemm_adds_into_a_strided_output():
    """y's rows may be a view with a longer row stride (a column slice): only its own columns change."""
    ext = load_extension()
    x, w = torch.randn(9, 32), torch.randn(32, 24)
    big = torch.randn(9, 40)
    before = big.clone()
    view = big[:, 8:32]
    ext.panel_gemm(x, ext.pack_panels(w), view, 1)
    torch.testing.assert_close(big[:, 8:32], before[:, 8:32] + x @ w, rtol=1e-4, atol=1e-4)
    assert torch.equal(big[:, :8], before[:, :8]) and torch.equal(big[:, 32:], before[:, 32:])


def test_panel_gemm_refuses_pairs_that_do_not_fit():
    ext = load_extension()
    with pytest.raises(RuntimeError, match="gate \\| up"):
        ext.pack_panels(torch.randn(8, 33), pairs=True)
    panels = ext.pack_panels(torch.randn(8, 64), pairs=True)  # 2 x 2 panels: 17-32 pairs
    with pytest.raises(RuntimeError, match="cannot hold"):
        ext.panel_gemm(torch.randn(2, 8), panels, torch.empty(2, 40), 2)
