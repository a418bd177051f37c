// Linear layers at decode batch sizes: y = x @ w for a few rows of x, streaming w once.
//
// At 1-8 rows a step's linear layers are a read of every weight (22 MiB for TinyGPT)
// with a few FLOPs per byte, so what matters is reading w at the machine's memory rate.
// Measured on an AMD EPYC VM (2 threads): MKL's and oneDNN's GEMMs at one row ran
// 3.7 ms a step, ~6 GB/s, against a 21.6 GB/s read rate. Here w is repacked once into
// column panels of 16, [ceil(N / 16), K, 16], each one contiguous run of memory the
// prefetcher streams; the threads split the panels; up to 4 rows share each pass over
// a panel (8 accumulators of 8 floats), more rows take further passes (from L2).
#include "kernels.h"

#include <ATen/Parallel.h>

namespace chunklab {
namespace {

constexpr int64_t kPanel = 16;  // output columns per panel

// Rows [0, R) of x (row stride K) against one panel [K, 16]; writes cols [0, cols) of y's rows.
template <int R>
void panel_rows(const float* x, int64_t K, const float* panel, float* y, int64_t ldy, int64_t cols) {
  f8v acc[R][2] = {};
  for (int64_t k = 0; k < K; ++k) {
    const f8v w0 = *reinterpret_cast<const f8v*>(panel + k * kPanel);
    const f8v w1 = *reinterpret_cast<const f8v*>(panel + k * kPanel + 8);
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * K + k];
      acc[r][0] += xv * w0;
      acc[r][1] += xv * w1;
    }
  }
  for (int r = 0; r < R; ++r) {
    float* out = y + r * ldy;
    if (cols == kPanel) {
      *reinterpret_cast<f8v_u*>(out) = acc[r][0];
      *reinterpret_cast<f8v_u*>(out + 8) = acc[r][1];
    } else {
      for (int64_t j = 0; j < cols; ++j) out[j] = j < 8 ? acc[r][0][j] : acc[r][1][j - 8];
    }
  }
}

}  // namespace

at::Tensor pack_panels(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat, "pack_panels takes a float32 [in, out] weight");
  const int64_t K = w.size(0), N = w.size(1), P = (N + kPanel - 1) / kPanel;
  auto src = w.contiguous();
  // Zeroed so the last panel's padding columns add nothing; the CPU allocator aligns to 64 bytes,
  // so every panel row is one aligned pair of f8v (checked: the aligned loads rely on it).
  auto out = at::zeros({P, K, kPanel}, w.options());
  TORCH_CHECK(reinterpret_cast<uintptr_t>(out.data_ptr()) % 32 == 0, "pack_panels: panels not 32-byte aligned");
  const float* s = src.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t p = 0; p < P; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < kPanel && p * kPanel + j < N; ++j) o[(p * K + k) * kPanel + j] = s[k * N + p * kPanel + j];
  return out;
}

at::Tensor panel_linear(const at::Tensor& x, const at::Tensor& panels, int64_t out_features) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.size(1) == panels.size(1), "panel_linear: bad input shape");
  const int64_t M = x.size(0), K = x.size(1), P = panels.size(0), N = out_features;
  auto y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = panels.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, P, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* panel = wp + p * K * kPanel;
      const int64_t cols = std::min(kPanel, N - p * kPanel);
      for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const float* xr = xp + r0 * K;
        float* yr = yp + r0 * N + p * kPanel;
        switch (std::min<int64_t>(4, M - r0)) {
          case 1: panel_rows<1>(xr, K, panel, yr, N, cols); break;
          case 2: panel_rows<2>(xr, K, panel, yr, N, cols); break;
          case 3: panel_rows<3>(xr, K, panel, yr, N, cols); break;
          default: panel_rows<4>(xr, K, panel, yr, N, cols);
        }
      }
    }
  });
  return y;
}

}  // namespace chunklab
