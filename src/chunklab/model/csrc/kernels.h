// The fused kernels between TinyGPT's matmuls (float32, CPU). See fused_forward.cpp.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace chunklab {

struct Shape {
  int64_t H, Hkv, D, block_size;  // query heads, KV heads, head dim, tokens per KV block
};

// The pool slot of position pos of a sequence whose block table is `table`.
inline int64_t slot_of(const int32_t* table, int64_t pos, int64_t block_size) {
  return static_cast<int64_t>(table[pos / block_size]) * block_size + pos % block_size;
}

// One layer of the fused forward's KV pool, blocked: within a block, each KV head's keys are
// stored transposed and its values row by row,
//   k [Hkv, num_blocks, D, block_size]   (a head's K of one block: D rows of block_size keys)
//   v [Hkv, num_blocks, block_size, D]
// so a (block, KV head) is two contiguous runs of D * block_size floats. Decode then scores a
// query against block_size keys with one broadcast-FMA per d (no horizontal sums) and reads
// whole 2 KiB runs (TinyGPT) instead of 128-byte halves of 256-byte slot rows. Measured on an
// Intel Xeon (AVX-512, 2 threads), decode attention at 8 x 1,600 tokens, six layers: 2.53 ms
// slot-major against 1.37 ms blocked (model/kv_layout.py converts for tests).
struct KVBlocks {
  float* k;
  float* v;
  int64_t Hkv, D, block_size, num_blocks;
  int64_t run() const { return D * block_size; }  // floats per (head, block) run
  // head-major: one head's blocks are consecutive runs, so blocks allocated in order stream
  float* k_run(int64_t block, int64_t h) const { return k + (h * num_blocks + block) * run(); }
  float* v_run(int64_t block, int64_t h) const { return v + (h * num_blocks + block) * run(); }
  // element d of head h's key (value) at position pos
  float& k_at(const int32_t* table, int64_t pos, int64_t h, int64_t d) const {
    return k_run(table[pos / block_size], h)[d * block_size + pos % block_size];
  }
  float& v_at(const int32_t* table, int64_t pos, int64_t h, int64_t d) const {
    return v_run(table[pos / block_size], h)[(pos % block_size) * D + d];
  }
};

// A layer's pools as KVBlocks (checks the shapes above).
KVBlocks kv_blocks(at::Tensor& k_cache, at::Tensor& v_cache, const Shape& s);

// 16 floats, lowered by GCC to one AVX-512 register or two AVX2 ones.
typedef float f16v __attribute__((vector_size(64)));
typedef float f16v_u __attribute__((vector_size(64), aligned(4)));  // for unaligned loads/stores
typedef int32_t i16v __attribute__((vector_size(64)));
// 8 floats: one AVX2 register (the decode kernel's AVX2 path, panel_linear).
typedef float f8v __attribute__((vector_size(32)));
typedef float f8v_u __attribute__((vector_size(32), aligned(4)));
typedef int32_t i8v __attribute__((vector_size(32)));

inline f16v load16(const float* p) { return *reinterpret_cast<const f16v_u*>(p); }
inline f16v vmax(f16v a, f16v b) { return a > b ? a : b; }

template <int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, int a9, int a10, int a11,
          int a12, int a13, int a14, int a15>
inline f16v pick(f16v x, f16v y) {
  return __builtin_shuffle(x, y, i16v{a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15});
}

// The max (sum) of v's 16 lanes, in four shuffle steps rather than 15 lane extracts.
inline float max_lanes(f16v v) {
  v = vmax(v, pick<8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7>(v, v));
  v = vmax(v, pick<4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11>(v, v));
  v = vmax(v, pick<2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13>(v, v));
  v = vmax(v, pick<1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14>(v, v));
  return v[0];
}

inline float sum_lanes(f16v v) {
  v += pick<8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7>(v, v);
  v += pick<4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11>(v, v);
  v += pick<2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13>(v, v);
  v += pick<1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14>(v, v);
  return v[0];
}

// exp(x), ~2 ulp over float range (Cephes' expf polynomial); exp(-87) ~ 1.6e-38 stands in
// for exp(-inf) = 0. Plain arithmetic so it vectorises: a scalar libm call per element
// made the first decode kernel slower than the eager path it replaced.
template <typename V, typename I>
inline V exp_poly(V x, V lo, V hi) {
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const V t = x * 1.44269504088896341f + 128.5f;  // > 0, so truncation is floor
  const I ni = __builtin_convertvector(t, I) - 128;
  const V n = __builtin_convertvector(ni, V);
  const V r = x - n * 0.693359375f + n * 2.12194440e-4f;
  V p = r * 1.9875691500E-4f + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  const I bits = (ni + 127) << 23;  // 2^n
  return p * reinterpret_cast<const V&>(bits);
}

inline f16v exp16(f16v x) { return exp_poly<f16v, i16v>(x, f16v{} - 87.0f, f16v{} + 88.0f); }
inline f8v exp8(f8v x) { return exp_poly<f8v, i8v>(x, f8v{} - 87.0f, f8v{} + 88.0f); }

// The max (sum) of an 8-lane vector's lanes, in three shuffle steps (AVX2 paths).
inline f8v vmax(f8v a, f8v b) { return a > b ? a : b; }

template <int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7>
inline f8v pick(f8v x) {
  return __builtin_shuffle(x, i8v{a0, a1, a2, a3, a4, a5, a6, a7});
}

inline float max_lanes(f8v v) {
  v = vmax(v, pick<4, 5, 6, 7, 0, 1, 2, 3>(v));
  v = vmax(v, pick<2, 3, 0, 1, 6, 7, 4, 5>(v));
  v = vmax(v, pick<1, 0, 3, 2, 5, 4, 7, 6>(v));
  return v[0];
}

inline float sum_lanes(f8v v) {
  v += pick<4, 5, 6, 7, 0, 1, 2, 3>(v);
  v += pick<2, 3, 0, 1, 6, 7, 4, 5>(v);
  v += pick<1, 0, 3, 2, 5, 4, 7, 6>(v);
  return v[0];
}

inline float exp1(float x) {
  const f16v v = exp16(f16v{} + x);
  return v[0];
}

// 1 / sqrt(mean(row^2) + eps): RMSNorm's scale of one row of C floats.
inline float inverse_rms(const float* row, int64_t C, float eps) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < C; ++c) ss += row[c] * row[c];
  return 1.f / std::sqrt(ss / C + eps);
}

// out[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * w
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);

// Rotates q and k heads of qkv [T, (H+2Hkv)D] in place (rotate-half RoPE) and writes
// each token's k and v to its slot (block * block_size + offset) of this layer's pool.
void rope_and_cache_write(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                          const std::vector<int64_t>& positions, const std::vector<int64_t>& slots,
                          const KVBlocks& kv, const Shape& s);

// act[t] = silu(gate[t]) * up[t] for gate_up [T, 2F] = [gate | up]
at::Tensor silu_mul(const at::Tensor& gate_up);

// Decode rows 0..B-1 of qkv, one per sequence, against their paged contexts
// [0, context_lens[b]); writes out [B, H*D] rows. tables: [B, max_blocks] block ids.
void paged_decode_attention(const at::Tensor& qkv, const KVBlocks& kv, const int32_t* tables, int64_t max_blocks,
                            const std::vector<int64_t>& context_lens, at::Tensor& out, const Shape& s);

// A prefill chunk of sequence `seq` (its row of the block tables): batch rows [row, row + n)
// at positions [start, start + n).
struct PrefillChunk {
  int64_t seq, row, n, start;
};

// Whether paged_prefill_attention takes this shape (else the caller runs SDPA).
bool prefill_kernel_supports(const Shape& s);

// Causal attention of each chunk's rows of qkv against positions [0, start + n) of its
// sequence, read from the paged cache, which already holds this step's K/V (written by
// rope_and_cache_write); writes the chunks' rows of out [T, H*D].
void paged_prefill_attention(const at::Tensor& qkv, const KVBlocks& kv, const int32_t* tables, int64_t max_blocks,
                             const std::vector<PrefillChunk>& chunks, at::Tensor& out, const Shape& s);

// Positions [0, ctx) of one sequence's K and V, gathered for ATen's SDPA: two [Hkv, ctx, D] tensors.
std::pair<at::Tensor, at::Tensor> gather_context(const KVBlocks& kv, const int32_t* table, int64_t ctx);

// Small-batch linear layers (panel_linear.cpp): w [in, out] repacked once into column panels;
// row_scale [in] multiplies w's rows first (an RMSNorm gain folded in); pairs: w is [gate | up]
// and gate panel i sits beside up panel i (for kSiluPairs).
at::Tensor pack_panels(const at::Tensor& w, const std::optional<at::Tensor>& row_scale = std::nullopt,
                       bool pairs = false);
at::Tensor panel_linear(const at::Tensor& x, const at::Tensor& panels, int64_t out_features);

// What panel_gemm does with x @ w before it leaves registers: y = it, y += it (a residual
// stream), or y = silu(gate) * up of a pairs-packed [gate | up] weight (y is [M, F]).
enum class Epilogue : int64_t { kStore = 0, kAdd = 1, kSiluPairs = 2 };

// y (given; rows may be strided) = epilogue(x' @ w), x' = x with each row divided by its rms
// when norm_eps >= 0 (RMSNorm; its gain is in the panels, packed with row_scale), else x.
void panel_gemm(const at::Tensor& x, const at::Tensor& panels, at::Tensor& y, Epilogue epilogue, double norm_eps);

}  // namespace chunklab
