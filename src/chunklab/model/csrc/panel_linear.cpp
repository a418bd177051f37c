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
// Epilogues (panel_gemm): the steps around a linear layer run on the accumulators before they
// leave registers, so at chunk sizes they cost no region, stored intermediate or ATen op of their
// own. RMSNorm is a per-row scale (the gain folded into the weight's rows when packed; each row's
// 1 / rms is one read of x first, on the calling thread up to 128 rows), the residual add an
// add into y, and SiLU-mul reads a gate panel and its up panel packed side by side. Measured on
// an AMD EPYC (Zen 5, 2 threads), a 1,536-token prompt served in 24 chunks of 64 tokens, 15
// rounds of both builds alternated in one process (median per-round ratios): 0.893x the time of
// separate passes with the VM in a slow stretch (one pass ~85 ms; a copy of the unchanged build
// measured 0.988x the same way), 0.954x in a fast one (one pass ~67 ms; 24 x 64 at 1.074x it).
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

inline f16v vexp(f16v x) { return exp16(x); }
inline f8v vexp(f8v x) { return exp8(x); }

// Lanes [c0, c0 + kLanes) of an output row: stored (added, for kAdd) where they are all among its
// first `cols` columns, else those that are, one by one (the last panel of a width not a multiple of 16).
template <Epilogue E>
inline void store_lanes(float* out, int64_t c0, int64_t cols, PVec val) {
  if (c0 + kLanes <= cols) {
    PVecU* o = reinterpret_cast<PVecU*>(out + c0);
    if constexpr (E == Epilogue::kAdd) *o += val;
    else *o = val;
  } else {
    for (int64_t j = c0; j < cols; ++j) out[j] = E == Epilogue::kAdd ? out[j] + val[j - c0] : val[j - c0];
  }
}

// The steps run on a micro-kernel's accumulators before they leave registers (Epilogue in
// kernels.h). A row scale s[r] (RMSNorm's 1 / rms, the gain folded into the panels) multiplies
// row r first; kSiluPairs takes NP == 2, a gate panel and its up panel, and writes
// silu(gate) * up to one panel's width of columns.
// Rows [0, R) of x (row stride K) against NP adjacent panels, vectors [VB, VB + VN) of each
// panel row (all of it, or on AVX2 one half: see rows_block); writes (adds) those of cols[p]
// columns of panel p into y's rows (row stride ldy), from y + p * kPanel.
// ahead: nullptr, or NP panels (K x kPanel each) to pull toward L2 at the rate these are read.
template <int R, int NP, Epilogue E, int VB, int VN>
void micro(const float* x, int64_t K, const float* const* panels, float* y, int64_t ldy, const int64_t* cols,
           const float* const* ahead, const float* scale) {
  constexpr int V = NP * VN;
  PVec acc[R][V] = {};
  for (int64_t k = 0; k < K; ++k) {
    if (ahead != nullptr)
      for (int p = 0; p < NP; ++p) __builtin_prefetch(ahead[p] + k * kPanel, 0, 2);
    PVec w[V];
    for (int p = 0; p < NP; ++p)
      for (int v = 0; v < VN; ++v)
        w[p * VN + v] = *reinterpret_cast<const PVec*>(panels[p] + k * kPanel + (VB + v) * kLanes);
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * K + k];
      for (int j = 0; j < V; ++j) acc[r][j] += xv * w[j];
    }
  }
  for (int r = 0; r < R; ++r) {
    const float s = scale == nullptr ? 1.f : scale[r];
    if constexpr (E == Epilogue::kSiluPairs) {
      static_assert(NP == 2, "kSiluPairs runs a gate panel and its up panel");
      for (int v = 0; v < VN; ++v) {
        const PVec g = acc[r][v] * s, act = g / (1.f + vexp(-g)) * (acc[r][VN + v] * s);
        store_lanes<Epilogue::kStore>(y + r * ldy, (VB + v) * kLanes, cols[0], act);
      }
    } else {
      for (int p = 0; p < NP; ++p)
        for (int v = 0; v < VN; ++v)
          store_lanes<E>(y + r * ldy + p * kPanel, (VB + v) * kLanes, cols[p], acc[r][p * VN + v] * s);
    }
  }
}

// AVX2 has 16 registers: a pair item's whole panel rows (two panels, two ymm each) would leave
// room for 3 rows of accumulators, and GCC then read every weight vector from memory once per row
// (15 loads per 12 FMAs). So there a pair item runs twice, each pass half of each panel row at
// the full 6 rows (12 accumulators, 2 weight vectors, 1 broadcast: 8 loads per 12 FMAs). The
// second pass re-reads x's rows and the panels' other halves from L1/L2. Measured together with
// the AVX2 register changes in prefill_attention.cpp (there, the numbers): 24 chunks of 64 in
// 0.940x the time on an AVX2 AMD EPYC VM.
constexpr bool kHalfPairs = kVecs == 2;

template <int NP, Epilogue E, int VB, int VN>
void rows_part(int64_t R, const float* x, int64_t K, const float* const* panels, float* y, int64_t ldy,
               const int64_t* cols, const float* const* ahead, const float* scale) {
  switch (R) {
#define CHUNKLAB_ROWS(n) \
  case n:                \
    return micro<n, NP, E, VB, VN>(x, K, panels, y, ldy, cols, ahead, scale);
    CHUNKLAB_ROWS(1) CHUNKLAB_ROWS(2) CHUNKLAB_ROWS(3) CHUNKLAB_ROWS(4) CHUNKLAB_ROWS(5) CHUNKLAB_ROWS(6)
#ifdef __AVX512F__
    CHUNKLAB_ROWS(7) CHUNKLAB_ROWS(8) CHUNKLAB_ROWS(9) CHUNKLAB_ROWS(10) CHUNKLAB_ROWS(11) CHUNKLAB_ROWS(12)
#endif
#undef CHUNKLAB_ROWS
  }
  TORCH_CHECK(false, "panel_linear: a block of ", R, " rows");
}

template <int NP, Epilogue E>
void rows_block(int64_t R, const float* x, int64_t K, const float* const* panels, float* y, int64_t ldy,
                const int64_t* cols, const float* const* ahead, const float* scale) {
  if constexpr (E == Epilogue::kSiluPairs && kHalfPairs) {
    rows_part<NP, E, 0, 1>(R, x, K, panels, y, ldy, cols, ahead, scale);
    rows_part<NP, E, 1, 1>(R, x, K, panels, y, ldy, cols, nullptr, scale);
  } else {
    rows_part<NP, E, 0, kVecs>(R, x, K, panels, y, ldy, cols, ahead, scale);
  }
}

// [begin, end) of part i of n near-equal parts of [0, total).
inline std::pair<int64_t, int64_t> part(int64_t total, int64_t n, int64_t i) {
  const int64_t base = total / n, extra = total % n;
  const int64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

// Each row's 1 / rms (RMSNorm without its gain). Up to 128 rows on the calling thread (at chunk
// sizes it is microseconds, less than a parallel region's hand-off), past that over the threads.
std::vector<float> row_scales(const at::Tensor& x, double eps) {
  const int64_t M = x.size(0), K = x.size(1);
  std::vector<float> inv(M);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 128, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) inv[t] = inverse_rms(xp + t * K, K, static_cast<float>(eps));
  });
  return inv;
}

template <Epilogue E>
void run_items(const float* xp, int64_t M, int64_t K, const float* wp, int64_t P, int64_t N, float* yp,
               int64_t ldy, const float* scale) {
  // An item: kPanels adjacent panels, or (kSiluPairs) a gate panel and its up panel, which
  // pack_panels(pairs) put side by side; then the item's output is one panel's width.
  constexpr int kItemPanels = E == Epilogue::kSiluPairs ? 2 : kPanels;
  constexpr int64_t kRows = kMaxRows;  // a pair item too (AVX-512: 12 x 2 panels; AVX2: in halves, rows_block)
  const int64_t groups = (P + kItemPanels - 1) / kItemPanels, chunks = (M + kChunkRows - 1) / kChunkRows;
  const int64_t width = E == Epilogue::kSiluPairs ? N / 2 : N;  // output columns
  // Panel p's first float; past the last panel, the last one (its zero padding columns add nothing).
  auto panel_at = [&](int64_t p) { return wp + std::min(p, P - 1) * K * kPanel; };
  // Items chunk-major: a thread's consecutive items share their rows of x.
  at::parallel_for(0, chunks * groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t g = item % groups, p0 = g * kItemPanels, np = std::min<int64_t>(kItemPanels, P - p0);
      const int64_t col0 = E == Epilogue::kSiluPairs ? g * kPanel : p0 * kPanel;  // its first output column
      const float* pan[kItemPanels];
      int64_t cols[kItemPanels];
      for (int64_t p = 0; p < kItemPanels; ++p) {
        pan[p] = panel_at(p0 + p);
        cols[p] = p < np ? std::min(kPanel, width - col0 - (E == Epilogue::kSiluPairs ? 0 : p * kPanel)) : 0;
      }
      // This thread's next item's panels (its next group), pulled toward L2 during the first row
      // block: the later blocks re-read this item's panels from L1/L2 while those arrive.
      const float* next[kItemPanels];
      const int64_t next_p0 = ((item + 1) % groups) * kItemPanels;
      for (int64_t p = 0; p < kItemPanels; ++p) next[p] = panel_at(next_p0 + p);
      const float* const* ahead = item + 1 < end ? next : nullptr;
      const auto [r_begin, r_end] = part(M, chunks, item / groups);
      const int64_t blocks = (r_end - r_begin + kRows - 1) / kRows;
      for (int64_t b = 0; b < blocks; ++b) {
        const auto [b_begin, b_end] = part(r_end - r_begin, blocks, b);
        const int64_t r0 = r_begin + b_begin, R = b_end - b_begin;
        float* out = yp + r0 * ldy + col0;
        const float* const* pre = b == 0 ? ahead : nullptr;
        const float* s = scale == nullptr ? nullptr : scale + r0;
        if (np == kItemPanels) rows_block<kItemPanels, E>(R, xp + r0 * K, K, pan, out, ldy, cols, pre, s);
        else if constexpr (E != Epilogue::kSiluPairs) rows_block<1, E>(R, xp + r0 * K, K, pan, out, ldy, cols, pre, s);
      }
    }
  });
}

}  // namespace

at::Tensor pack_panels(const at::Tensor& w, const std::optional<at::Tensor>& row_scale, bool pairs) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat, "pack_panels takes a float32 [in, out] weight");
  const int64_t K = w.size(0), N = w.size(1);
  TORCH_CHECK(!pairs || N % 2 == 0, "pack_panels: pairs needs [gate | up] halves, got ", N, " columns");
  TORCH_CHECK(!row_scale || (row_scale->dim() == 1 && row_scale->size(0) == K), "pack_panels: row_scale must be [", K, "]");
  // pairs: panel 2i holds gate columns [16i, 16i + 16), panel 2i + 1 the same columns of up.
  const int64_t width = pairs ? N / 2 : N, per_half = (width + kPanel - 1) / kPanel, P = pairs ? 2 * per_half : per_half;
  auto src = w.contiguous();
  at::Tensor scale = row_scale ? row_scale->to(at::kFloat).contiguous() : at::ones({K}, w.options());
  // Zeroed so the last panel's padding columns add nothing; the CPU allocator aligns to 64 bytes,
  // and a panel row is 64 bytes, so every panel row is aligned (checked: the aligned loads rely on it).
  auto out = at::zeros({P, K, kPanel}, w.options());
  TORCH_CHECK(reinterpret_cast<uintptr_t>(out.data_ptr()) % 64 == 0, "pack_panels: panels not 64-byte aligned");
  const float* s = src.data_ptr<float>();
  const float* sc = scale.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t p = 0; p < P; ++p) {
    const int64_t first = pairs ? (p % 2) * width + (p / 2) * kPanel : p * kPanel;  // its first source column
    const int64_t n = std::min(kPanel, width - (pairs ? (p / 2) * kPanel : p * kPanel));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < n; ++j) o[(p * K + k) * kPanel + j] = s[k * N + first + j] * sc[k];
  }
  return out;
}

void panel_gemm(const at::Tensor& x, const at::Tensor& panels, at::Tensor& y, Epilogue epilogue, double norm_eps) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat && x.size(1) == panels.size(1),
              "panel_linear: bad input shape");
  const int64_t M = x.size(0), K = x.size(1), P = panels.size(0);
  const bool pairs = epilogue == Epilogue::kSiluPairs;
  const int64_t width = y.size(1), N = pairs ? 2 * width : width, per_half = pairs ? P / 2 : P;
  TORCH_CHECK(y.dim() == 2 && y.size(0) == M && y.stride(1) == 1 && y.scalar_type() == at::kFloat,
              "panel_linear: bad output shape");
  TORCH_CHECK((!pairs || P % 2 == 0) && width > (per_half - 1) * kPanel && width <= per_half * kPanel,
              "panel_linear: ", P, " panels cannot hold ", width, pairs ? " column pairs" : " columns");
  if (M == 0) return;
  std::vector<float> inv;
  if (norm_eps >= 0) inv = row_scales(x, norm_eps);
  const float* scale = inv.empty() ? nullptr : inv.data();
  const float* xp = x.data_ptr<float>();
  const float* wp = panels.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  switch (epilogue) {
    case Epilogue::kStore: return run_items<Epilogue::kStore>(xp, M, K, wp, P, N, yp, y.stride(0), scale);
    case Epilogue::kAdd: return run_items<Epilogue::kAdd>(xp, M, K, wp, P, N, yp, y.stride(0), scale);
    case Epilogue::kSiluPairs: return run_items<Epilogue::kSiluPairs>(xp, M, K, wp, P, N, yp, y.stride(0), scale);
  }
}

at::Tensor panel_linear(const at::Tensor& x, const at::Tensor& panels, int64_t out_features) {
  auto y = at::empty({x.size(0), out_features}, x.options());
  panel_gemm(x, panels, y, Epilogue::kStore, -1.0);
  return y;
}

}  // namespace chunklab
