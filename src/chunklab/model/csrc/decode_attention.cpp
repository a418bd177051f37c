// Paged decode attention: one query token per sequence against its cached context,
// read in place from the blocked pool (KVBlocks in kernels.h; no gather, no mask tensor).
//
// Work item = (sequence, KV head): its G = H / Hkv query heads share every K/V row, so
// each block's K and V runs of that head are read once. Keys go one vector (L keys) at a
// time: K is stored transposed within a block, so the L scores of a query head are L lanes
// of one accumulator, built by D broadcast-FMAs (q[d] times keys' d-th elements), with no
// horizontal sums; the softmax is online (running max and sum per head, rescaled only when
// the max grows).
//
// Before, the pool was slot-major ([slot][Hkv][D]) and the 16 dot products of a head came
// out of a transpose-and-add tree of 30 shuffles; measured on an Intel Xeon (AVX-512, 2
// threads), six layers at 8 x 1,600 tokens took 2.53 ms that way, 1.37 ms this way.
#include "kernels.h"

#include <ATen/Parallel.h>

#include <cstring>
#include <limits>
#include <type_traits>

namespace chunklab {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline f16v vexp(f16v x) { return exp16(x); }
inline f8v vexp(f8v x) { return exp8(x); }

template <typename V>
inline V load(const float* p) {  // unaligned
  V x;
  std::memcpy(&x, p, sizeof(V));
  return x;
}

// Pulls a block's K and V runs of head h toward cache, all at once (an item's first block).
inline void prefetch_block(const KVBlocks& kv, int64_t block, int64_t h) {
  const char* k = reinterpret_cast<const char*>(kv.k_run(block, h));
  const char* v = reinterpret_cast<const char*>(kv.v_run(block, h));
  for (int64_t o = 0; o < kv.run() * 4; o += 64) {
    __builtin_prefetch(k + o);
    __builtin_prefetch(v + o);
  }
}

// The next block's K and V runs, pulled toward cache a slice at a time by the kernel's score
// loop: at key row d of this block, prefetch_slice(d) asks for row d's bytes of the next K run
// and the same offset of the next V run (both runs are D x block_size floats). Blocks lie
// anywhere in the pool, so the hardware prefetcher cannot run ahead of an item's loop over
// them. Before, the 64 prefetches of the next block were issued together at a block's start;
// they filled the core's miss queue, and the kernel then stalled on its own loads (perf
// annotate of a capped AVX2 run: 32% of the item's samples on one K load, 10% on the
// prefetches). Measured on the AMD EPYC Zen 4 VM (2 threads), six layers of decode attention at
// 8 x 1,600 tokens, one process, variants alternated, 8 rounds: blocks in order 0.99 -> 0.80 ms
// (AVX-512) and 1.21 -> 0.84 ms (AVX2 build), blocks in random order 2.05 -> 1.53 and 2.39 ->
// 1.66 ms. In order, 0.80 ms reads the 39 MB of K and V at ~49 GB/s (the perf stage's
// streaming read on this VM: 52 GB/s).
// Two or three blocks ahead instead of one measured the same or slower.
struct NextBlock {
  const float* k = nullptr;  // nullptr: this is the context's last block
  const float* v = nullptr;
  int64_t block_size = 0;
  void prefetch_slice(int64_t d) const {
    if (k == nullptr) return;
    for (int64_t o = d * block_size; o < (d + 1) * block_size; o += 16) {  // 16 floats: one line
      __builtin_prefetch(k + o);
      __builtin_prefetch(v + o);
    }
  }
};

// Calls f(k_run, v_run, n, next) on each block of the context [0, ctx) in order (n: the block's
// keys inside the context; next: the following block, for the kernel to prefetch as it goes).
template <typename F>
inline void for_each_block(const KVBlocks& kv, int64_t h, const int32_t* table, int64_t ctx, F&& f) {
  const int64_t bs = kv.block_size, blocks = (ctx + bs - 1) / bs;
  if (blocks > 0) prefetch_block(kv, table[0], h);
  for (int64_t b = 0; b < blocks; ++b) {
    NextBlock next;
    if (b + 1 < blocks) next = {kv.k_run(table[b + 1], h), kv.v_run(table[b + 1], h), bs};
    f(kv.k_run(table[b], h), kv.v_run(table[b], h), std::min(bs, ctx - b * bs), next);
  }
}

// One work item: G query heads (q_row, contiguous) of KV head h against positions [0, ctx).
// V: the vector type (L = 16 or 8 floats); needs D % L == 0 and block_size % L == 0.
template <typename V, int64_t kG, int64_t kD>
void decode_item(const float* q_row, const KVBlocks& kv, int64_t h, const int32_t* table, int64_t ctx,
                 float* out_row) {
  using I = decltype(V{} < V{});
  constexpr int64_t L = sizeof(V) / sizeof(float), kDV = kD / L;
  const float scale = 1.f / std::sqrt(static_cast<float>(kD));
  alignas(64) float q[kG][kD];
  for (int64_t g = 0; g < kG; ++g)
    for (int64_t d = 0; d < kD; ++d) q[g][d] = q_row[g * kD + d] * scale;
  V acc[kG][kDV] = {}, l[kG] = {};  // l: softmax denominators, by lane
  float m[kG];
  for (int64_t g = 0; g < kG; ++g) m[g] = kNegInf;
  I lane;
  for (int64_t j = 0; j < L; ++j) lane[j] = static_cast<int32_t>(j);
  alignas(64) float p[kG][L];  // one vector's softmax numerators
  const int64_t bs = kv.block_size;
  for_each_block(kv, h, table, ctx, [&](const float* kr, const float* vr, int64_t n, const NextBlock& next) {
    for (int64_t t0 = 0; t0 < n; t0 += L) {
      const int64_t nt = std::min(L, n - t0);  // keys of this vector inside the context
      V s[kG] = {};
      for (int64_t d = 0; d < kD; ++d) {
        if (t0 == 0) next.prefetch_slice(d);
        const V k = load<V>(kr + d * bs + t0);
        for (int64_t g = 0; g < kG; ++g) s[g] += q[g][d] * k;
      }
      const I valid = lane < static_cast<int32_t>(nt);
      for (int64_t g = 0; g < kG; ++g) {
        const V x = valid ? s[g] : V{} + kNegInf;
        const float new_max = std::max(m[g], max_lanes(x));
        const V e = valid ? vexp(x - new_max) : V{};
        if (new_max > m[g]) {  // rescale what is summed so far (~0 on the first keys: m = -inf)
          const float correction = exp1(m[g] - new_max);
          l[g] *= correction;
          for (int64_t c = 0; c < kDV; ++c) acc[g][c] *= correction;
          m[g] = new_max;
        }
        l[g] += e;
        std::memcpy(p[g], &e, sizeof(V));
      }
      for (int64_t j = 0; j < nt; ++j)
        for (int64_t c = 0; c < kDV; ++c) {
          const V v = load<V>(vr + (t0 + j) * kD + c * L);
          for (int64_t g = 0; g < kG; ++g) acc[g][c] += p[g][j] * v;
        }
    }
  });
  for (int64_t g = 0; g < kG; ++g) {
    const float inv = 1.f / sum_lanes(l[g]);
    for (int64_t c = 0; c < kDV; ++c) {
      const V o = acc[g][c] * inv;
      std::memcpy(out_row + g * kD + c * L, &o, sizeof(V));
    }
  }
}

// The AVX2 item (8-float vectors, 16 registers): the same contract as decode_item, 16 keys a step.
// decode_item's G x D / L P.V accumulators (16 for TinyGPT: G = 4, D = 32) are the whole AVX2
// register file; GCC kept five of them on the stack, loaded and stored around an FMA on every
// key, and moved all 16 to and from the stack around every 8 keys. Here they live in `acc`
// (memory) and each step runs kCB of each head's vectors in registers over all its 16 keys
// (G x kCB <= 8), so they move once per 16 keys and no FMA waits on a store. Two key vectors a
// step also give the scores 2 x G independent FMA chains (not G) and the softmax one lane max
// and one rescale check per 16 keys (not per 8). Needs block_size % 16 == 0. Measured on a
// 2-core AVX2 AMD EPYC VM (family 23 model 1), decode steps of 8 x ~1,600 tokens with this
// item and decode_item swapped step by step in one engine, three runs of 100 steps each:
// medians 7.10-7.12 ms against 7.67-7.81 ms (0.909-0.926x). With every key read twice, the
// second time from cache, the step grew by ~3.0 ms before: the item is compute-bound there.
template <int64_t kG, int64_t kD>
void decode_item_avx2(const float* q_row, const KVBlocks& kv, int64_t h, const int32_t* table, int64_t ctx,
                      float* out_row) {
  using V = f8v;
  using I = i8v;
  constexpr int64_t L = 8, kDV = kD / L, kS = 2 * L;
  constexpr int64_t kCB = std::max<int64_t>(1, std::min<int64_t>(kDV, 8 / kG));
  static_assert(kDV % kCB == 0, "a head's D / L vectors in whole blocks of kCB");
  const float scale = 1.f / std::sqrt(static_cast<float>(kD));
  alignas(64) float q[kG][kD];
  for (int64_t g = 0; g < kG; ++g)
    for (int64_t d = 0; d < kD; ++d) q[g][d] = q_row[g * kD + d] * scale;
  alignas(64) float acc[kG][kD] = {};  // read and written as aligned V (kD % 8 == 0)
  alignas(64) float p[kG][kS];  // one step's softmax numerators
  V l[kG] = {};                 // softmax denominators, by lane
  float m[kG];
  for (int64_t g = 0; g < kG; ++g) m[g] = kNegInf;
  I lane;
  for (int64_t j = 0; j < L; ++j) lane[j] = static_cast<int32_t>(j);
  const int64_t bs = kv.block_size;
  for_each_block(kv, h, table, ctx, [&](const float* kr, const float* vr, int64_t n, const NextBlock& next) {
    for (int64_t t0 = 0; t0 < n; t0 += kS) {
      const int64_t nt = std::min(kS, n - t0);  // keys of this step inside the context
      // Keys past nt (still inside the block) are scored but masked below, as in decode_item.
      V s0[kG] = {}, s1[kG] = {};
      for (int64_t d = 0; d < kD; ++d) {
        if (t0 == 0) next.prefetch_slice(d);
        const V k0 = load<V>(kr + d * bs + t0), k1 = load<V>(kr + d * bs + t0 + L);
        for (int64_t g = 0; g < kG; ++g) {
          s0[g] += q[g][d] * k0;
          s1[g] += q[g][d] * k1;
        }
      }
      const I valid0 = lane < static_cast<int32_t>(nt), valid1 = lane < static_cast<int32_t>(nt - L);
      for (int64_t g = 0; g < kG; ++g) {
        const V x0 = valid0 ? s0[g] : V{} + kNegInf, x1 = valid1 ? s1[g] : V{} + kNegInf;
        const float new_max = std::max(m[g], max_lanes(x0 > x1 ? x0 : x1));
        if (new_max > m[g]) {  // rescale what is summed so far (~0 on the first keys: m = -inf)
          const float correction = exp1(m[g] - new_max);
          l[g] *= correction;
          for (int64_t d = 0; d < kD; ++d) acc[g][d] *= correction;
          m[g] = new_max;
        }
        const V e0 = valid0 ? vexp(x0 - new_max) : V{}, e1 = valid1 ? vexp(x1 - new_max) : V{};
        l[g] += e0 + e1;
        std::memcpy(p[g], &e0, sizeof(V));
        std::memcpy(p[g] + L, &e1, sizeof(V));
      }
      // Masked keys have p = 0; a full step's 16 keys are a constant count the compiler unrolls.
      auto pv = [&](auto keys) {
        for (int64_t c0 = 0; c0 < kDV; c0 += kCB) {
          V a[kG][kCB];
          for (int64_t g = 0; g < kG; ++g)
            for (int64_t c = 0; c < kCB; ++c) a[g][c] = *reinterpret_cast<const V*>(acc[g] + (c0 + c) * L);
          for (int64_t j = 0; j < keys; ++j)
            for (int64_t c = 0; c < kCB; ++c) {
              const V v = load<V>(vr + (t0 + j) * kD + (c0 + c) * L);
              for (int64_t g = 0; g < kG; ++g) a[g][c] += p[g][j] * v;
            }
          for (int64_t g = 0; g < kG; ++g)
            for (int64_t c = 0; c < kCB; ++c) *reinterpret_cast<V*>(acc[g] + (c0 + c) * L) = a[g][c];
        }
      };
      if (nt == kS) pv(std::integral_constant<int64_t, kS>{});
      else pv(nt);
    }
  });
  for (int64_t g = 0; g < kG; ++g) {
    const float inv = 1.f / sum_lanes(l[g]);
    for (int64_t d = 0; d < kD; ++d) out_row[g * kD + d] = acc[g][d] * inv;
  }
}

// Any shape: scalar loops (head dims and block sizes no vector kernel takes, G > 8).
void decode_item_scalar(const float* q_row, int64_t G, const KVBlocks& kv, int64_t h, const int32_t* table,
                        int64_t ctx, float* out_row) {
  const int64_t D = kv.D;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  std::vector<float> scores(ctx);
  for (int64_t g = 0; g < G; ++g) {
    const float* qg = q_row + g * D;
    float mx = kNegInf;
    for (int64_t pos = 0; pos < ctx; ++pos) {
      float dot = 0.f;
      for (int64_t d = 0; d < D; ++d) dot += qg[d] * kv.k_at(table, pos, h, d);
      scores[pos] = dot * scale;
      mx = std::max(mx, scores[pos]);
    }
    float* o = out_row + g * D;
    std::fill(o, o + D, 0.f);
    float sum = 0.f;
    for (int64_t pos = 0; pos < ctx; ++pos) {
      const float w = std::exp(scores[pos] - mx);
      sum += w;
      for (int64_t d = 0; d < D; ++d) o[d] += w * kv.v_at(table, pos, h, d);
    }
    for (int64_t d = 0; d < D; ++d) o[d] /= sum;
  }
}

using ItemFn = void (*)(const float*, const KVBlocks&, int64_t, const int32_t*, int64_t, float*);

template <typename V, int64_t kG>
ItemFn for_head_dim(int64_t D) {
  switch (D) {
    case 16: return decode_item<V, kG, 16>;
    case 32: return decode_item<V, kG, 32>;
    case 64: return decode_item<V, kG, 64>;
    case 128: return decode_item<V, kG, 128>;
    default: return nullptr;
  }
}

template <typename V>
ItemFn vector_kernel(int64_t G, int64_t D, int64_t block_size) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  if (D % L != 0 || block_size % L != 0) return nullptr;
  switch (G) {
    case 1: return for_head_dim<V, 1>(D);
    case 2: return for_head_dim<V, 2>(D);
    case 4: return for_head_dim<V, 4>(D);
    case 8: return for_head_dim<V, 8>(D);
    default: return nullptr;
  }
}

template <int64_t kG>
ItemFn avx2_for_head_dim(int64_t D) {
  switch (D) {
    case 16: return decode_item_avx2<kG, 16>;
    case 32: return decode_item_avx2<kG, 32>;
    case 64: return decode_item_avx2<kG, 64>;
    case 128: return decode_item_avx2<kG, 128>;
    default: return nullptr;
  }
}

ItemFn avx2_kernel(int64_t G, int64_t D, int64_t block_size) {
  if (block_size % 16 != 0) return nullptr;
  switch (G) {
    case 1: return avx2_for_head_dim<1>(D);
    case 2: return avx2_for_head_dim<2>(D);
    case 4: return avx2_for_head_dim<4>(D);
    case 8: return avx2_for_head_dim<8>(D);
    default: return nullptr;
  }
}

// The widest vector kernel this build has for the shape; nullptr: the scalar loops.
// 16-float vectors only with AVX-512 (elsewhere one is two registers, and its lane max and
// sum lower to lane extracts). Without AVX-512, decode_item_avx2 where blocks hold whole
// steps of 16 keys, else 8-float decode_item (block sizes of 8).
ItemFn decode_kernel(int64_t G, int64_t D, int64_t block_size) {
#ifdef __AVX512F__
  if (ItemFn f = vector_kernel<f16v>(G, D, block_size)) return f;
#else
  if (ItemFn f = avx2_kernel(G, D, block_size)) return f;
#endif
  return vector_kernel<f8v>(G, D, block_size);
}

}  // namespace

void paged_decode_attention(const at::Tensor& qkv, const KVBlocks& kv, const int32_t* tables, int64_t max_blocks,
                            const std::vector<int64_t>& context_lens, at::Tensor& out, const Shape& s) {
  const int64_t B = static_cast<int64_t>(context_lens.size()), W = qkv.size(1), G = s.H / s.Hkv, D = s.D;
  const float* qp = qkv.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const ItemFn kernel = decode_kernel(G, D, s.block_size);
  // KV-head-major items: the threads' contiguous ranges then hold every sequence's context
  // (for Hkv = threads, exactly an even split) instead of a few long sequences on one thread.
  at::parallel_for(0, B * s.Hkv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t h = item / B, b = item % B;
      const float* q_row = qp + b * W + h * G * D;  // this KV head's G query heads, contiguous
      float* out_row = op + b * s.H * D + h * G * D;
      const int32_t* table = tables + b * max_blocks;
      if (kernel != nullptr)
        kernel(q_row, kv, h, table, context_lens[b], out_row);
      else
        decode_item_scalar(q_row, G, kv, h, table, context_lens[b], out_row);
    }
  });
}

}  // namespace chunklab
