// Paged decode attention: one query token per sequence against its cached context,
// read in place from the paged pool (no gather into a padded copy, no mask tensor).
//
// Work item = (sequence, KV head): its G = H / Hkv query heads share every K/V row,
// so each row is read once per KV head. Keys go 16 at a time: the 16 dot products
// of a head come out of one transpose-and-add tree as one 16-float vector, and the
// softmax is online (running max and sum per head, rescaled once per 16 keys).
#include "kernels.h"

#include <ATen/Parallel.h>

#include <limits>

// Where the CPU has AVX2 but not AVX-512, the 16-lane kernel's two-input shuffles have no
// single instruction (a 16-float vector is two ymm registers) and GCC lowers them to lane
// extracts: measured on an AMD EPYC (Zen 3), decode attention at 8 x 1,600 tokens took
// ~21 ms a step, ~1.8 GB/s of KV. There an 8-lane kernel built on hadd runs instead.
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>
#define CHUNKLAB_DECODE_AVX2 1
#endif

namespace chunklab {
namespace {

constexpr int64_t kMaxG = 16;  // query heads per KV head the vector kernel takes
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Lane j of the result = the sum of t[j]'s 16 lanes. Destroys t.
inline f16v sum_lanes16(f16v* t) {
  for (int i = 0; i < 8; ++i)  // lanes alternate keys 2i, 2i+1; 2 terms each
    t[i] = pick<0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30>(t[2 * i], t[2 * i + 1]) +
           pick<1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31>(t[2 * i], t[2 * i + 1]);
  for (int i = 0; i < 4; ++i)  // period 4: keys 4i..4i+3; 4 terms each
    t[i] = pick<0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29>(t[2 * i], t[2 * i + 1]) +
           pick<2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31>(t[2 * i], t[2 * i + 1]);
  for (int i = 0; i < 2; ++i)  // period 8; 8 terms each
    t[i] = pick<0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27>(t[2 * i], t[2 * i + 1]) +
           pick<4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31>(t[2 * i], t[2 * i + 1]);
  return pick<0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23>(t[0], t[1]) +
         pick<8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31>(t[0], t[1]);
}

struct Pool {
  const float* k;
  const float* v;
  int64_t kv_row;  // floats per slot (Hkv * D)
};

// kC = D / 16 vectors per head row.
template <int64_t kC>
void decode_item_vec(const float* q_row, int64_t G, const Pool& pool, const int32_t* table, int64_t block_size,
                     int64_t ctx, int64_t head_offset, float* out_row) {
  constexpr int64_t D = kC * 16;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  f16v q[kMaxG][kC], acc[kMaxG][kC], p[kMaxG], l[kMaxG];  // l: softmax denominators, by lane
  float m[kMaxG];
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t c = 0; c < kC; ++c) {
      q[g][c] = load16(q_row + g * D + c * 16) * scale;
      acc[g][c] = f16v{};
    }
    m[g] = kNegInf;
    l[g] = f16v{};
  }
  const i16v lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const float* krow[16];
  const float* vrow[16];
  for (int64_t p0 = 0; p0 < ctx; p0 += 16) {
    const int64_t n = std::min<int64_t>(16, ctx - p0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = p0 + j;
      const int64_t slot = slot_of(table, pos, block_size);
      krow[j] = pool.k + slot * pool.kv_row + head_offset;
      vrow[j] = pool.v + slot * pool.kv_row + head_offset;
    }
    for (int64_t g = 0; g < G; ++g) {
      f16v t[16];
      for (int64_t j = 0; j < 16; ++j) {
        if (j >= n) {
          t[j] = f16v{};
          continue;
        }
        f16v dot = q[g][0] * load16(krow[j]);
        for (int64_t c = 1; c < kC; ++c) dot += q[g][c] * load16(krow[j] + c * 16);
        t[j] = dot;
      }
      f16v scores = sum_lanes16(t);
      scores = lane < static_cast<int32_t>(n) ? scores : f16v{} + kNegInf;
      const float new_max = std::max(m[g], max_lanes(scores));
      p[g] = exp16(scores - new_max);
      p[g] = lane < static_cast<int32_t>(n) ? p[g] : f16v{};
      const float correction = exp1(m[g] - new_max);  // ~0 on the first keys (m = -inf)
      l[g] = l[g] * correction + p[g];
      for (int64_t c = 0; c < kC; ++c) acc[g][c] *= correction;
      m[g] = new_max;
    }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < kC; ++c) {
        const f16v v = load16(vrow[j] + c * 16);
        for (int64_t g = 0; g < G; ++g) acc[g][c] += p[g][j] * v;
      }
  }
  for (int64_t g = 0; g < G; ++g) {
    const float denominator = sum_lanes(l[g]);
    for (int64_t c = 0; c < kC; ++c) *reinterpret_cast<f16v_u*>(out_row + g * D + c * 16) = acc[g][c] / denominator;
  }
}

#ifdef CHUNKLAB_DECODE_AVX2
inline __m256 exp8(__m256 x) { return (__m256)chunklab::exp8((f8v)x); }  // same bits, GCC vector casts

// Lane j of the result = the sum of t[j]'s 8 lanes (two hadd levels, then the 128-bit halves).
inline __m256 sum_lanes8(const __m256* t) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(t[0], t[1]), _mm256_hadd_ps(t[2], t[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(t[4], t[5]), _mm256_hadd_ps(t[6], t[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

inline float max8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

constexpr int64_t kAhead = 16;  // keys prefetched ahead of the ones being scored

// The same work item as decode_item_vec, 8 keys at a time in 8-lane registers. kC = D / 8.
template <int64_t kC>
void decode_item_avx2(const float* q_row, int64_t G, const Pool& pool, const int32_t* table, int64_t block_size,
                      int64_t ctx, int64_t head_offset, float* out_row) {
  constexpr int64_t D = kC * 8;
  const __m256 scale = _mm256_set1_ps(1.f / std::sqrt(static_cast<float>(D)));
  __m256 q[kMaxG][kC], acc[kMaxG][kC], l[kMaxG];  // l: softmax denominators, by lane
  alignas(32) float p[kMaxG][8];                  // this block's softmax numerators
  float m[kMaxG];
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t c = 0; c < kC; ++c) {
      q[g][c] = _mm256_mul_ps(_mm256_loadu_ps(q_row + g * D + c * 8), scale);
      acc[g][c] = _mm256_setzero_ps();
    }
    m[g] = kNegInf;
    l[g] = _mm256_setzero_ps();
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  const float* krow[8];
  const float* vrow[8];
  for (int64_t p0 = 0; p0 < ctx; p0 += 8) {
    const int64_t n = std::min<int64_t>(8, ctx - p0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t slot = slot_of(table, p0 + j, block_size);
      krow[j] = pool.k + slot * pool.kv_row + head_offset;
      vrow[j] = pool.v + slot * pool.kv_row + head_offset;
    }
    // A block of 16 slots is one 4 KiB page of a layer's pool and blocks lie anywhere, so the
    // hardware prefetcher retrains on every block; without this, measured, the kernel waited
    // on DRAM for ~3/4 of its time at 8 x 1,600 tokens. kAhead keys ~ 0.5 us of work ahead.
    for (int64_t pos = p0 + kAhead; pos < std::min(ctx, p0 + kAhead + 8); ++pos) {
      const int64_t slot = slot_of(table, pos, block_size);
      const char* kp = reinterpret_cast<const char*>(pool.k + slot * pool.kv_row + head_offset);
      const char* vp = reinterpret_cast<const char*>(pool.v + slot * pool.kv_row + head_offset);
      for (int64_t b = 0; b < D * 4; b += 64) {
        _mm_prefetch(kp + b, _MM_HINT_T0);
        _mm_prefetch(vp + b, _MM_HINT_T0);
      }
    }
    const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane));
    for (int64_t g = 0; g < G; ++g) {
      __m256 t[8];
      for (int64_t j = 0; j < 8; ++j) {
        if (j >= n) {
          t[j] = _mm256_setzero_ps();
          continue;
        }
        __m256 dot = _mm256_mul_ps(q[g][0], _mm256_loadu_ps(krow[j]));
        for (int64_t c = 1; c < kC; ++c) dot = _mm256_fmadd_ps(q[g][c], _mm256_loadu_ps(krow[j] + c * 8), dot);
        t[j] = dot;
      }
      const __m256 scores = _mm256_blendv_ps(neg_inf, sum_lanes8(t), valid);
      const float new_max = std::max(m[g], max8(scores));
      const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(scores, _mm256_set1_ps(new_max))), valid);
      if (new_max > m[g]) {  // rescale what is summed so far; ~0 on the first keys (m = -inf)
        const __m256 correction = exp8(_mm256_set1_ps(m[g] - new_max));
        l[g] = _mm256_mul_ps(l[g], correction);
        for (int64_t c = 0; c < kC; ++c) acc[g][c] = _mm256_mul_ps(acc[g][c], correction);
      }
      l[g] = _mm256_add_ps(l[g], e);
      _mm256_store_ps(p[g], e);
      m[g] = new_max;
    }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < kC; ++c) {
        const __m256 v = _mm256_loadu_ps(vrow[j] + c * 8);
        for (int64_t g = 0; g < G; ++g) acc[g][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][j]), v, acc[g][c]);
      }
  }
  for (int64_t g = 0; g < G; ++g) {
    const __m256 inv = _mm256_set1_ps(1.f / sum8(l[g]));
    for (int64_t c = 0; c < kC; ++c) _mm256_storeu_ps(out_row + g * D + c * 8, _mm256_mul_ps(acc[g][c], inv));
  }
}
#endif  // CHUNKLAB_DECODE_AVX2

// Any head dim: scalar loops (the micro test model, unusual shapes).
void decode_item_scalar(const float* q_row, int64_t G, int64_t D, const Pool& pool, const int32_t* table,
                        int64_t block_size, int64_t ctx, int64_t head_offset, float* out_row) {
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  std::vector<float> scores(ctx);
  for (int64_t g = 0; g < G; ++g) {
    const float* qg = q_row + g * D;
    float mx = kNegInf;
    for (int64_t pos = 0; pos < ctx; ++pos) {
      const int64_t slot = slot_of(table, pos, block_size);
      const float* k = pool.k + slot * pool.kv_row + head_offset;
      float dot = 0.f;
      for (int64_t d = 0; d < D; ++d) dot += qg[d] * k[d];
      scores[pos] = dot * scale;
      mx = std::max(mx, scores[pos]);
    }
    float* o = out_row + g * D;
    std::fill(o, o + D, 0.f);
    float sum = 0.f;
    for (int64_t pos = 0; pos < ctx; ++pos) {
      const int64_t slot = slot_of(table, pos, block_size);
      const float* v = pool.v + slot * pool.kv_row + head_offset;
      const float w = std::exp(scores[pos] - mx);
      sum += w;
      for (int64_t d = 0; d < D; ++d) o[d] += w * v[d];
    }
    for (int64_t d = 0; d < D; ++d) o[d] /= sum;
  }
}

}  // namespace

void paged_decode_attention(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const int32_t* tables, int64_t max_blocks, const std::vector<int64_t>& context_lens,
                            at::Tensor& out, const Shape& s) {
  const int64_t B = static_cast<int64_t>(context_lens.size()), W = qkv.size(1), G = s.H / s.Hkv, D = s.D;
  const Pool pool{k_cache.data_ptr<float>(), v_cache.data_ptr<float>(), s.Hkv * D};
  const float* qp = qkv.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // KV-head-major items: the threads' contiguous ranges then hold every sequence's context
  // (for Hkv = threads, exactly an even split) instead of a few long sequences on one thread.
  at::parallel_for(0, B * s.Hkv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t kvh = item / B, b = item % B;
      const float* q_row = qp + b * W + kvh * G * D;  // this KV head's G query heads, contiguous
      float* out_row = op + b * s.H * D + kvh * G * D;
      const int32_t* table = tables + b * max_blocks;
      const int64_t ctx = context_lens[b], offset = kvh * D;
      if (G > kMaxG) {
        decode_item_scalar(q_row, G, D, pool, table, s.block_size, ctx, offset, out_row);
        continue;
      }
#ifdef CHUNKLAB_DECODE_AVX2
      switch (D) {
        case 8: decode_item_avx2<1>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); continue;
        case 16: decode_item_avx2<2>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); continue;
        case 24: decode_item_avx2<3>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); continue;
        case 32: decode_item_avx2<4>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); continue;
        case 64: decode_item_avx2<8>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); continue;
        case 128: decode_item_avx2<16>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); continue;
        default: break;
      }
#endif
      switch (D) {
        case 16: decode_item_vec<1>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); break;
        case 32: decode_item_vec<2>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); break;
        case 64: decode_item_vec<4>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); break;
        case 128: decode_item_vec<8>(q_row, G, pool, table, s.block_size, ctx, offset, out_row); break;
        default: decode_item_scalar(q_row, G, D, pool, table, s.block_size, ctx, offset, out_row);
      }
    }
  });
}

}  // namespace chunklab
