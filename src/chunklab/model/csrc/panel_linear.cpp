// The project's own fp32 GEMM for linear layers: y = x @ w, w prepacked once.
//
// w is repacked into column panels of 16, [ceil(N / 16), K, 16], each one contiguous run
// the prefetcher streams. A micro-kernel computes R rows (up to kMaxRows) against kPanels
// adjacent panels over the whole K, its R x 16 kPanels accumulators in registers: per k,
// one load of each panel row and one broadcast of each x[r][k], then R x kPanels FMAs
// (AVX-512: 12 rows x 2 panels = 24 zmm accumulators; AVX2: 6 rows x 1 panel, two ymm each).
//
// Why not only MKL or oneDNN: at decode and chunk sizes (1-128 rows) both repack w on
// every call or take a path tuned for big M, and read it at a fraction of the machine's
// rate. Measured on an Intel Xeon VM (AVX-512, 2 threads), TinyGPT's 24 linear layers a
// step, weights cycling through all six layers as in a forward: at 8 rows MKL 105-119
// GFLOP/s, this kernel 177-185; at 64 rows 262-276 against 300-336; past ~256 rows MKL
// is ahead (1,536 rows: 348-375 against 318-333). The probe in model/linear_library.py
// picks per batch size on each machine.
//
// Work split: rows into near-equal chunks of at most kChunkRows (x's chunk stays in L2 while
// the panels stream past it), chunks x panel groups over the threads; within a chunk, rows
// go in near-equal blocks (no 1-row tail block running at a twelfth of the rate).
//
// A thread's next item's panels are prefetched while its current item's first row block runs.
// The 24 linear layers' weights (22 MiB) do not stay in cache between steps, and an item's
// first block otherwise waits on memory for every panel row. Measured on an AMD EPYC (Zen 5,
// 2 threads), TinyGPT's four linear layers at 64 rows over six layers' weights in turn:
// 263-308 GFLOP/s without, 358-417 with, against 395-433 with one layer's weights hot.
#include "kernels.h"

#include <ATen/Parallel.h>

namespace chunklab {
namespace {

constexpr int64_t kPanel = 16;       // output columns per panel
constexpr int64_t kChunkRows = 96;   // rows of x a work item covers at most
#ifdef __AVX512F__
typedef f16v PVec;  // one panel row
typedef f16v_u PVecU;
constexpr int kVecs = 1, kPanels = 2, kMaxRows = 12;
#else
typedef f8v PVec;  // half a panel row
typedef f8v_u PVecU;
constexpr int kVecs = 2, kPanels = 1, kMaxRows = 6;
#endif
constexpr int kLanes = kPanel / kVecs;

// Rows [0, R) of x (row stride K) against NP adjacent panels; writes cols[p] columns of panel
// p into y's rows (row stride ldy), from y + p * kPanel.
// ahead: nullptr, or NP panels (K x kPanel each) to pull toward L2 at the rate these are read.
template <int R, int NP>
void micro(const float* x, int64_t K, const float* const* panels, float* y, int64_t ldy, const int64_t* cols,
           const float* const* ahead) {
  constexpr int V = NP * kVecs;
  PVec acc[R][V] = {};
  for (int64_t k = 0; k < K; ++k) {
    if (ahead != nullptr)
      for (int p = 0; p < NP; ++p) __builtin_prefetch(ahead[p] + k * kPanel, 0, 2);
    PVec w[V];
    for (int p = 0; p < NP; ++p)
      for (int v = 0; v < kVecs; ++v) w[p * kVecs + v] = *reinterpret_cast<const PVec*>(panels[p] + k * kPanel + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * K + k];
      for (int j = 0; j < V; ++j) acc[r][j] += xv * w[j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < NP; ++p) {
      float* out = y + r * ldy + p * kPanel;
      if (cols[p] == kPanel) {
        for (int v = 0; v < kVecs; ++v) *reinterpret_cast<PVecU*>(out + v * kLanes) = acc[r][p * kVecs + v];
      } else {
        for (int64_t j = 0; j < cols[p]; ++j) out[j] = acc[r][p * kVecs + j / kLanes][j % kLanes];
      }
    }
}

template <int NP>
void rows_block(int64_t R, const float* x, int64_t K, const float* const* panels, float* y, int64_t ldy,
                const int64_t* cols, const float* const* ahead) {
  switch (R) {
#define CHUNKLAB_ROWS(n) \
  case n:                \
    return micro<n, NP>(x, K, panels, y, ldy, cols, ahead);
    CHUNKLAB_ROWS(1) CHUNKLAB_ROWS(2) CHUNKLAB_ROWS(3) CHUNKLAB_ROWS(4) CHUNKLAB_ROWS(5) CHUNKLAB_ROWS(6)
#ifdef __AVX512F__
    CHUNKLAB_ROWS(7) CHUNKLAB_ROWS(8) CHUNKLAB_ROWS(9) CHUNKLAB_ROWS(10) CHUNKLAB_ROWS(11) CHUNKLAB_ROWS(12)
#endif
#undef CHUNKLAB_ROWS
  }
  TORCH_CHECK(false, "panel_linear: a block of ", R, " rows");
}

// [begin, end) of part i of n near-equal parts of [0, total).
inline std::pair<int64_t, int64_t> part(int64_t total, int64_t n, int64_t i) {
  const int64_t base = total / n, extra = total % n;
  const int64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

}  // namespace

at::Tensor pack_panels(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat, "pack_panels takes a float32 [in, out] weight");
  const int64_t K = w.size(0), N = w.size(1), P = (N + kPanel - 1) / kPanel;
  auto src = w.contiguous();
  // Zeroed so the last panel's padding columns add nothing; the CPU allocator aligns to 64 bytes,
  // and a panel row is 64 bytes, so every panel row is aligned (checked: the aligned loads rely on it).
  auto out = at::zeros({P, K, kPanel}, w.options());
  TORCH_CHECK(reinterpret_cast<uintptr_t>(out.data_ptr()) % 64 == 0, "pack_panels: panels not 64-byte aligned");
  const float* s = src.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t p = 0; p < P; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < kPanel && p * kPanel + j < N; ++j) o[(p * K + k) * kPanel + j] = s[k * N + p * kPanel + j];
  return out;
}

at::Tensor panel_linear(const at::Tensor& x, const at::Tensor& panels, int64_t out_features) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat && x.size(1) == panels.size(1),
              "panel_linear: bad input shape");
  const int64_t M = x.size(0), K = x.size(1), P = panels.size(0), N = out_features;
  TORCH_CHECK(N > (P - 1) * kPanel && N <= P * kPanel, "panel_linear: ", P, " panels cannot hold ", N, " columns");
  auto y = at::empty({M, N}, x.options());
  if (M == 0) return y;
  const float* xp = x.data_ptr<float>();
  const float* wp = panels.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t groups = (P + kPanels - 1) / kPanels, chunks = (M + kChunkRows - 1) / kChunkRows;
  // Panel p's first float; past the last panel, the last one (its zero padding columns add nothing).
  auto panel_at = [&](int64_t p) { return wp + std::min(p, P - 1) * K * kPanel; };
  // Items chunk-major: a thread's consecutive items share their rows of x.
  at::parallel_for(0, chunks * groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t g = item % groups, p0 = g * kPanels, np = std::min<int64_t>(kPanels, P - p0);
      const float* pan[kPanels];
      int64_t cols[kPanels];
      for (int64_t p = 0; p < kPanels; ++p) {
        pan[p] = panel_at(p0 + p);
        cols[p] = p < np ? std::min(kPanel, N - (p0 + p) * kPanel) : 0;
      }
      // This thread's next item's panels (its next group), pulled toward L2 during the first row
      // block: the later blocks re-read this item's panels from L1/L2 while those arrive.
      const float* next[kPanels];
      const int64_t next_p0 = ((item + 1) % groups) * kPanels;
      for (int64_t p = 0; p < kPanels; ++p) next[p] = panel_at(next_p0 + p);
      const float* const* ahead = item + 1 < end ? next : nullptr;
      const auto [r_begin, r_end] = part(M, chunks, item / groups);
      const int64_t blocks = (r_end - r_begin + kMaxRows - 1) / kMaxRows;
      for (int64_t b = 0; b < blocks; ++b) {
        const auto [b_begin, b_end] = part(r_end - r_begin, blocks, b);
        const int64_t r0 = r_begin + b_begin, R = b_end - b_begin;
        float* out = yp + r0 * N + p0 * kPanel;
        const float* const* pre = b == 0 ? ahead : nullptr;
        if (np == kPanels) rows_block<kPanels>(R, xp + r0 * K, K, pan, out, N, cols, pre);
        else rows_block<1>(R, xp + r0 * K, K, pan, out, N, cols, pre);
      }
    }
  });
  return y;
}

}  // namespace chunklab
