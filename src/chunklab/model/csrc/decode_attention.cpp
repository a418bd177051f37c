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

namespace chunklab {
namespace {

constexpr int64_t kMaxG = 16;  // query heads per KV head the vector kernel takes
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline f16v load(const float* p) { return *reinterpret_cast<const f16v_u*>(p); }

template <int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, int a9, int a10, int a11,
          int a12, int a13, int a14, int a15>
inline f16v pick(f16v x, f16v y) {
  return __builtin_shuffle(x, y, i16v{a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15});
}

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

inline f16v vmax(f16v a, f16v b) { return a > b ? a : b; }

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
      q[g][c] = load(q_row + g * D + c * 16) * scale;
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
        f16v dot = q[g][0] * load(krow[j]);
        for (int64_t c = 1; c < kC; ++c) dot += q[g][c] * load(krow[j] + c * 16);
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
        const f16v v = load(vrow[j] + c * 16);
        for (int64_t g = 0; g < G; ++g) acc[g][c] += p[g][j] * v;
      }
  }
  for (int64_t g = 0; g < G; ++g) {
    const float denominator = sum_lanes(l[g]);
    for (int64_t c = 0; c < kC; ++c) *reinterpret_cast<f16v_u*>(out_row + g * D + c * 16) = acc[g][c] / denominator;
  }
}

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
