"""panel_linear, the project's own GEMM (csrc/panel_linear.cpp), against torch.mm at every kind of edge:
row counts that leave uneven blocks and chunks, column counts that end inside a panel or leave an odd panel."""
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
