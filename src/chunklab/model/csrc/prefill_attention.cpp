// Paged causal attention for prefill chunks: a chunk's queries against its sequence's
// cached prefix and itself, read from the paged pool, with no [n, ctx] mask tensor and no
// [n, ctx] score matrix (flash-style: online softmax over 64-key tiles).
//
// Before this kernel each chunk gathered its context with index_select and ran ATen's
// SDPA with an additive mask, and a first chunk ran causal SDPA. Measured on an AMD EPYC
// (Zen 5, AVX-512, 2 threads), SDPA took 55% of a 1,536-token prefill at ~97 GFLOP/s.
//
// Two phases per call:
//  1. Tiles: each (chunk, KV head) sees its context as tiles of kTile keys, K [D][stride]
//     (kTile of each row's stride floats used) and V [kTile][D]. The pool holds K transposed
//     per block and V row by row, so where block_size is a multiple of kTile a full tile is read
//     in place (stride = block_size); only a context's partial last tile is copied, its keys
//     past the context zeroed. Other block sizes copy every tile (stride = kTile). Before, every
//     tile was copied, each chunk re-copying its whole context in every layer: on an AMD EPYC
//     (Zen 5, 2 threads), a 1,536-token prompt in 24 chunks of 64, engines alternated in one
//     process, 93.2 ms in place against 101.3 copied (103.2 vs 104.9 in a second process).
//  2. Attend: a work item is kR query rows of one KV head: rows are (position, query head
//     of the group), position-major, so the G heads that share a K/V row share its loads.
//     Scores come out of broadcast-FMAs against the transposed tile (one FMA: a tile's keys
//     for one row), P.V out of broadcast-FMAs against V rows; kR rows x D accumulators stay
//     in registers for the whole context. Items run longest first off a shared counter
//     (causal rows near the end of a prompt read ~all of it; the first ones, a few keys).
//
// The softmax runs in base 2 (log2(e) folded into q's scale; exp2 through AVX-512's roundscale
// and scalef, a degree-5 polynomial between), over kPerStep = 8 tiles per max update. With e^x
// (Cephes' polynomial, ~2x the instructions) over 4 tiles, perf put the softmax at 38% of this
// kernel's samples on an AMD EPYC (Zen 5, 2 threads), scores 31% and P.V 28%. The change took
// TinyGPT's fused forward over a 1,536-token prompt from 71.3 to 67.1 ms (median over 30
// alternated pairs of the two builds in one process, median per-pair ratio 0.941), and the
// same prompt in 24 chunks of 64 from 77.8 to 73.0 ms (0.927).
//
// The running max moves lazily (kSlack): one check per step covers every row, where before each
// row reduced its max across lanes, compared and branched between its scores and exponentials.
// perf on an Intel Xeon VM (family 6 model 167, AVX-512, 2 threads) had put the softmax at ~25%
// of this kernel's samples, scores and P.V at ~36% each. With it: the clamp one vmaxps (not
// compare + blend), AVX512DQ's reduce for x - round(x), no mask in steps away from the causal
// edge, items claimed four at a time (kClaim). All together, against the build before, on that
// Xeon (medians of alternated rounds of both builds in one process, 2026-12-04): the fused
// forward over a 1,536-token prompt 0.964 of its time (78.8 vs 85.2 ms, 14 of 15 rounds
// faster), the same prompt in 24 chunks of 64 0.956 (90.2 vs 93.8 ms, 11 of 11).
#include "kernels.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <limits>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace chunklab {
namespace {

constexpr int64_t kPerStep = 8;  // tiles per softmax update
// Items a thread claims at once off the shared counter. One atomic add per item cost ~1% of a
// 1,536-token prefill (perf, Intel Xeon VM, 2 threads: the counter's cache line crossing cores on
// every ~8 us item). The last 2 x kClaim items a thread go one by one: in a prompt's items, sorted
// longest first, the tail is short, but a 64-token chunk's items all read its whole context, and
// a thread claiming four of them last left the other idle up to four items' time, in every layer.
// Measured on an Intel Xeon VM (family 6 model 167, 2 threads), a 1,536-token prompt served in 24
// chunks of 64, 15 alternated rounds in one process, twice: 0.988x and 0.974x the time (13 and 12
// of 15 rounds faster), the prompt in one pass 1.012x and 1.006x (4 and 7 of 15 faster).
constexpr int64_t kClaim = 4;
constexpr float kSlack = 8.f;     // log2 units a score may exceed the running max by (numerators <= 256)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// 2^f for f in [-0.5, 0.5]: a degree-5 fit on Chebyshev nodes, relative error <= 2.5e-7
// (float32 Horner, checked on 200,001 points).
template <typename V>
inline V exp2_fraction(V f) {
  V p = f * 1.3400433e-3f + 9.6760374e-3f;
  p = p * f + 5.5503272e-2f;
  p = p * f + 2.4022107e-1f;
  p = p * f + 6.9314718e-1f;
  return p * f + 1.0000001f;
}

// The vector a tile of keys fills: 16 floats (one zmm) with AVX-512; elsewhere 8 (one ymm).
// The accumulators, kR * D / kLanes vectors, must fit the register file (32 zmm; 16 ymm):
// measured on an AMD EPYC (Zen 5) with this file built for Zen 3 (no AVX-512), 16-float
// vectors there (split in two, spilled) took ~1.1 s for a 1,536-token prefill against
// ~0.17 s for SDPA; 8-float ones run even with SDPA (0.19-0.20 s each, ATen and oneDNN held
// to AVX2 too), where with AVX-512 this kernel runs ~2x SDPA's rate. On a Zen 3 (AVX2 only,
// 2 threads, one layer alone) scoring several tiles together (kTT) took a 1,536-token prompt
// from 23.6 to 19.5 ms a layer (51 -> 62 GFLOP/s), a 64-token chunk at 1,472 from 1.62 to
// 1.41 ms: on par with SDPA there, not ahead of it.
#ifdef __AVX512F__
typedef f16v Vec;
typedef i16v IVec;
constexpr int64_t kLanes = 16, kAccVectors = 16, kChains = 16;
// 2^x as 2^f * 2^n, n = x's nearest integer, f = x - n in [-0.5, 0.5] (AVX512DQ's reduce gives f
// in one instruction; elsewhere roundscale and a subtraction), 2^f from a polynomial, 2^n through
// scalef. x is clamped at -125: no subnormal results.
inline Vec exp2_parts(Vec x, __m512& n) {
  x = Vec(_mm512_max_ps(x, Vec{} - 125.f));  // one vmaxps, not compare + blend
#ifdef __AVX512DQ__
  const Vec f = Vec(_mm512_reduce_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  n = __m512(x - f);
#else
  n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const Vec f = x - Vec(n);
#endif
  return exp2_fraction(f);
}
// 2^x where x != -inf, 0 where x = -inf (a masked key: scalef zeroes its lane).
inline Vec vexp2(Vec x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, Vec{} + kNegInf, _CMP_NEQ_OQ);
  __m512 n;
  const Vec p = exp2_parts(x, n);
  return Vec(_mm512_maskz_scalef_ps(keep, __m512(p), n));
}
// 2^x for x > -inf: a step with no masked key (none at the causal edge) skips vexp2's mask.
inline Vec vexp2_finite(Vec x) {
  __m512 n;
  const Vec p = exp2_parts(x, n);
  return Vec(_mm512_scalef_ps(__m512(p), n));
}
#else
typedef f8v Vec;
typedef i8v IVec;
constexpr int64_t kLanes = 8, kAccVectors = 8, kChains = 8;
inline Vec vexp2(Vec x) {
  const IVec keep = x != kNegInf;
  x = x > -125.f ? x : Vec{} - 125.f;
  const IVec n = __builtin_convertvector(x + 128.5f, IVec) - 128;  // x + 128.5 > 0: truncation is floor
  const IVec bits = (n + 127) << 23;                                 // 2^n
  const Vec y = exp2_fraction(x - __builtin_convertvector(n, Vec)) * reinterpret_cast<const Vec&>(bits);
  return keep ? y : Vec{};
}
inline Vec vexp2_finite(Vec x) { return vexp2(x); }  // the mask here is one select: not worth a copy
#endif
inline float exp2_1(float x) { return vexp2(Vec{} + x)[0]; }
// A loaded K or V vector, kept in a register for every row that uses it. Left to itself GCC folded
// the load into each row's FMA (AVX2, D = 32, 2 rows: 10 loads per 8 FMAs in the scores). The empty
// asm takes and gives back the value in a vector register, so the load cannot be folded.
// in_memory: p's object escapes to an empty asm, so GCC keeps it in memory there instead of
// promoting it back to registers (attend_rows' state between steps).
// Both for AVX2 only. Measured with panel_linear's AVX2 pair halves (same change) on a 2-core AMD
// EPYC VM (family 23 model 1, AVX2, 2 threads), 2026-12-04, both builds alternated in one process,
// 9 rounds, median per-round ratios new/old: one 1,536-token prefill 0.968 (454 vs 471 ms), 24
// chunks of 64 0.940 (493 vs 526 ms; every round faster), decode of 8 x 1,200 tokens 0.990. On
// AVX-512 builds (32 registers, 8 rows an item) both are no-ops and GCC keeps `st` where it likes:
// compiled for x86-64-v4, the file's FMAs are 217 before and after, 111 and 113 of them reading
// memory; not timed, no AVX-512 machine was at hand.
// AVX2 only, not generic builds either: there (x86-64-v2, SSE) a Vec is two xmm registers, and
// "+x" cannot hold it (GCC: impossible constraint in asm).
inline Vec in_register(Vec v) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  asm("" : "+x"(v));
#endif
  return v;
}
inline void in_memory(void* p) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  asm volatile("" : : "r"(p) : "memory");
#else
  (void)p;
#endif
}
typedef float VecU __attribute__((vector_size(sizeof(Vec)), aligned(4)));
constexpr int64_t kTile = kLanes;  // keys per tile: one vector of scores per row

template <int64_t kDV>  // kDV = D / kLanes vectors per head row
constexpr int64_t rows_per_item() { return kAccVectors / kDV > 0 ? kAccVectors / kDV : 1; }

struct Tiles {
  const float* const* k;  // per tile: K [D][stride], its keys in the first kTile floats of each row
  const float* const* v;  // per tile: V [kTile][D]
  int64_t stride;
};

// Copies tile `tile` of head h's context [0, ctx) to k [D][stride] and v [kTile][D], zeroing the
// keys past ctx: a partial last tile, or every tile where blocks do not hold whole tiles.
void copy_tile(const KVBlocks& kv, const int32_t* table, int64_t h, int64_t ctx, int64_t tile, int64_t stride,
               float* k, float* v) {
  const int64_t D = kv.D, first = tile * kTile, n = std::min<int64_t>(kTile, ctx - first);
  for (int64_t j = 0; j < kTile; ++j)
    for (int64_t d = 0; d < D; ++d) {
      k[d * stride + j] = j < n ? kv.k_at(table, first + j, h, d) : 0.f;
      v[j * D + d] = j < n ? kv.v_at(table, first + j, h, d) : 0.f;
    }
}

// Scores of kR rows against kT consecutive tiles from `tile` on, masked at the causal
// edge, into p[r][slot..slot + kT). kR * kT accumulators are independent FMA chains: with
// few rows per item (AVX2: 2 rows at D = 32) one tile at a time leaves the FMA units
// waiting on latency, so several tiles go together (kTT below).
template <int64_t kDV, int64_t kR, int64_t kT>
inline void scores(const float (*q)[kDV * kLanes], const Tiles& g, int64_t tile, const int64_t* pos,
                   int64_t first, float (*p)[kPerStep][kTile], int64_t slot) {
  constexpr int64_t D = kDV * kLanes;
  Vec s[kR][kT] = {};
  for (int64_t d = 0; d < D; ++d)
    for (int64_t t = 0; t < kT; ++t) {
      const Vec k = in_register(*reinterpret_cast<const VecU*>(g.k[tile + t] + d * g.stride));  // unaligned: pool or scratch
      for (int64_t r = 0; r < kR; ++r) s[r][t] += q[r][d] * k;
    }
  IVec lane;
  for (int64_t j = 0; j < kLanes; ++j) lane[j] = static_cast<int32_t>(j);
  for (int64_t t = 0; t < kT; ++t) {
    const int64_t base = (tile + t) * kTile;
    if (base + kTile - 1 > first) {  // the causal edge: some key here is after some row
      const IVec key = lane + static_cast<int32_t>(base);
      for (int64_t r = 0; r < kR; ++r) s[r][t] = key > static_cast<int32_t>(pos[r]) ? Vec{} + kNegInf : s[r][t];
    }
    for (int64_t r = 0; r < kR; ++r) *reinterpret_cast<Vec*>(p[r][slot + t]) = s[r][t];
  }
}

// One item: kR rows whose queries are q_rows[r], at positions pos[r] (non-decreasing),
// written to out_rows[r] (nullptr: a padding row, not written).
template <int64_t kDV, int64_t kR>
void attend_rows(const float* const* q_rows, float* const* out_rows, const int64_t* pos, const Tiles& g) {
  constexpr int64_t D = kDV * kLanes;
  // Scores in log2 units (log2(e) folded into q's scale): softmax then needs 2^x, cheaper than e^x.
  const float scale = 1.44269504088896341f / std::sqrt(static_cast<float>(D));
  alignas(64) float q[kR][D];
  for (int64_t r = 0; r < kR; ++r)
    for (int64_t d = 0; d < D; ++d) q[r][d] = q_rows[r][d] * scale;
  // Between steps the P.V accumulators and the softmax denominators (by lane) live in `st`, loaded
  // into registers for the P.V loop only, so the scores have the register file to themselves. With
  // them held in registers throughout, AVX2's 16 registers left too few for the scores: GCC read
  // every K and V vector from memory once per row (10 loads per 8 FMAs at D = 32, 2 rows).
  struct {
    alignas(64) float acc[kR][D];
    alignas(64) float l[kR][kLanes];
  } st = {};
  float m[kR];
  for (int64_t r = 0; r < kR; ++r) m[r] = kNegInf;
  // tiles scored together: about kChains independent FMA chains (kR * kTT), at most kPerStep
  constexpr int64_t kTT = std::min<int64_t>(kPerStep, kR >= kChains ? 1 : kChains / kR);
  const int64_t keys = pos[kR - 1] + 1, first = pos[0];
  alignas(64) float p[kR][kPerStep][kTile];  // scores, then softmax numerators
  for (int64_t t0 = 0; t0 * kTile < keys; t0 += kPerStep) {
    const int64_t nt = std::min<int64_t>(kPerStep, (keys - t0 * kTile + kTile - 1) / kTile);
    int64_t t = 0;
    for (; t + kTT <= nt; t += kTT) scores<kDV, kR, kTT>(q, g, t0 + t, pos, first, p, t);
    for (; t < nt; ++t) scores<kDV, kR, 1>(q, g, t0 + t, pos, first, p, t);
    // The running max m moves lazily: only when some row has a score more than kSlack above
    // its m (always on the first step, m = -inf; key 0 precedes every row). Otherwise numerators
    // stay <= 2^kSlack and what is summed so far needs no correction. One check covers every row:
    // the common step pays a vector max per tile and one horizontal max, not a horizontal max,
    // a compare and a branch per row between its scores and its exponentials.
    Vec mx[kR];
    for (int64_t r = 0; r < kR; ++r) {
      mx[r] = *reinterpret_cast<const Vec*>(p[r][0]);
      for (int64_t t = 1; t < nt; ++t) mx[r] = vmax(mx[r], *reinterpret_cast<const Vec*>(p[r][t]));
    }
    // The first step sets every row's max (key 0 precedes every row, so it is finite). After it m
    // is finite, and a masked lane (-inf) of mx only lowers `over`: never -inf - -inf = NaN.
    bool may_move = t0 == 0;  // some row's max may move this step
    if (!may_move) {
      Vec over = mx[0] - (m[0] + kSlack);
      for (int64_t r = 1; r < kR; ++r) over = vmax(over, mx[r] - (m[r] + kSlack));
      may_move = max_lanes(over) > 0.f;
    }
    // What is summed so far, scaled to the row's new max: 1 where it stays, 0 on the first step.
    float correction[kR];
    bool moved = false;  // some correction is not 1: the accumulators need it
    for (int64_t r = 0; r < kR; ++r) correction[r] = 1.f;
    if (may_move)
      for (int64_t r = 0; r < kR; ++r) {
        const float row_max = max_lanes(mx[r]);
        if (row_max <= m[r] + kSlack) continue;
        correction[r] = exp2_1(m[r] - row_max);
        m[r] = row_max;
        moved = true;
      }
    auto numerators = [&](auto exp2v) {
      for (int64_t r = 0; r < kR; ++r) {
        const Vec row_max = Vec{} + m[r];
        Vec l = *reinterpret_cast<const Vec*>(st.l[r]) * correction[r];
        for (int64_t t = 0; t < nt; ++t) {
          Vec& x = *reinterpret_cast<Vec*>(p[r][t]);
          x = exp2v(x - row_max);
          l += x;
        }
        *reinterpret_cast<Vec*>(st.l[r]) = l;
      }
    };
    if ((t0 + nt) * kTile - 1 > first)  // scores() masked keys past some row here: -inf, so 0
      numerators([](Vec x) { return vexp2(x); });
    else
      numerators([](Vec x) { return vexp2_finite(x); });
    Vec acc[kR][kDV];
    for (int64_t r = 0; r < kR; ++r)
      for (int64_t c = 0; c < kDV; ++c) {
        acc[r][c] = *reinterpret_cast<const Vec*>(st.acc[r] + c * kLanes);
        if (moved) acc[r][c] *= correction[r];
      }
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t j = 0; j < kTile; ++j) {
        const float* vr = g.v[t0 + t] + j * D;
        for (int64_t c = 0; c < kDV; ++c) {
          const Vec v = in_register(*reinterpret_cast<const VecU*>(vr + c * kLanes));
          for (int64_t r = 0; r < kR; ++r) acc[r][c] += p[r][t][j] * v;
        }
      }
    for (int64_t r = 0; r < kR; ++r)
      for (int64_t c = 0; c < kDV; ++c) *reinterpret_cast<Vec*>(st.acc[r] + c * kLanes) = acc[r][c];
    in_memory(&st);
  }
  for (int64_t r = 0; r < kR; ++r) {
    if (out_rows[r] == nullptr) continue;
    const float inv = 1.f / sum_lanes(*reinterpret_cast<const Vec*>(st.l[r]));
    for (int64_t c = 0; c < kDV; ++c)
      *reinterpret_cast<VecU*>(out_rows[r] + c * kLanes) = *reinterpret_cast<const Vec*>(st.acc[r] + c * kLanes) * inv;
  }
}

struct Item {
  int64_t chunk, kvh, first_row, keys;  // rows [first_row, first_row + kR) of (chunk, KV head)
};

template <int64_t kDV>
void run(const at::Tensor& qkv, const KVBlocks& kv, const int32_t* tables, int64_t max_blocks,
         const std::vector<PrefillChunk>& chunks, at::Tensor& out, const Shape& s) {
  constexpr int64_t D = kDV * kLanes, kR = rows_per_item<kDV>();
  const int64_t G = s.H / s.Hkv, W = qkv.size(1), C = static_cast<int64_t>(chunks.size());
  // Phase 1: every (chunk, KV head)'s context as tiles. offsets[c]: where chunk c's tiles start.
  std::vector<int64_t> offsets(C + 1, 0);
  for (int64_t c = 0; c < C; ++c) {
    const int64_t tiles = (chunks[c].start + chunks[c].n + kTile - 1) / kTile;
    offsets[c + 1] = offsets[c] + tiles * s.Hkv;
  }
  const bool in_place = kv.block_size % kTile == 0;
  const int64_t stride = in_place ? kv.block_size : kTile;
  std::vector<const float*> k_tiles(offsets[C]), v_tiles(offsets[C]);
  struct Copy {
    int64_t i, c, h, tile;
  };
  std::vector<Copy> copies;
  for (int64_t c = 0; c < C; ++c) {
    const int64_t ctx = chunks[c].start + chunks[c].n, tiles = (offsets[c + 1] - offsets[c]) / s.Hkv;
    const int32_t* table = tables + chunks[c].seq * max_blocks;
    for (int64_t h = 0; h < s.Hkv; ++h)
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t i = offsets[c] + h * tiles + t, first = t * kTile, bs = kv.block_size;
        if (in_place && first + kTile <= ctx) {
          k_tiles[i] = kv.k_run(table[first / bs], h) + first % bs;
          v_tiles[i] = kv.v_run(table[first / bs], h) + first % bs * D;
        } else {
          copies.push_back({i, c, h, t});
        }
      }
  }
  const int64_t k_floats = D * stride, v_floats = kTile * D;
  auto buffer = at::empty({static_cast<int64_t>(copies.size()) * (k_floats + v_floats)}, qkv.options());
  float* scratch = buffer.data_ptr<float>();
  at::parallel_for(0, static_cast<int64_t>(copies.size()), 16, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const Copy& cp = copies[j];
      float* k = scratch + j * (k_floats + v_floats);
      float* v = k + k_floats;
      copy_tile(kv, tables + chunks[cp.c].seq * max_blocks, cp.h, chunks[cp.c].start + chunks[cp.c].n, cp.tile,
                stride, k, v);
      k_tiles[cp.i] = k;
      v_tiles[cp.i] = v;
    }
  });
  // Phase 2: items, longest first.
  std::vector<Item> items;
  for (int64_t c = 0; c < C; ++c) {
    const int64_t rows = chunks[c].n * G;
    for (int64_t h = 0; h < s.Hkv; ++h)
      for (int64_t r = 0; r < rows; r += kR)
        items.push_back({c, h, r, chunks[c].start + std::min(rows - 1, r + kR - 1) / G + 1});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.keys > b.keys; });
  const float* qp = qkv.data_ptr<float>();
  float* op = out.data_ptr<float>();
  auto attend = [&](const Item& it) {
    const PrefillChunk& ch = chunks[it.chunk];
    const int64_t tiles = (offsets[it.chunk + 1] - offsets[it.chunk]) / s.Hkv;
    const int64_t first_tile = offsets[it.chunk] + it.kvh * tiles;
    const Tiles g{k_tiles.data() + first_tile, v_tiles.data() + first_tile, stride};
    const float* q_rows[kR];
    float* out_rows[kR];
    int64_t pos[kR];
    for (int64_t r = 0; r < kR; ++r) {
      const int64_t row = std::min(it.first_row + r, ch.n * G - 1);  // padding repeats the last row
      const int64_t i_pos = row / G, head = it.kvh * G + row % G;
      q_rows[r] = qp + (ch.row + i_pos) * W + head * D;
      out_rows[r] = it.first_row + r < ch.n * G ? op + (ch.row + i_pos) * s.H * D + head * D : nullptr;
      pos[r] = ch.start + i_pos;
    }
    attend_rows<kDV, kR>(q_rows, out_rows, pos, g);
  };
  // Claimed kClaim at a time, then the last few one by one: the threads end at most one item apart.
  const int64_t n_items = static_cast<int64_t>(items.size()), threads = std::min<int64_t>(at::get_num_threads(), n_items);
  const int64_t n_grouped = std::max<int64_t>(0, n_items - 2 * kClaim * threads);
  std::atomic<int64_t> next{0}, next_single{n_grouped};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t claim = next.fetch_add(kClaim); claim < n_grouped; claim = next.fetch_add(kClaim))
      for (int64_t i = claim; i < std::min(claim + kClaim, n_grouped); ++i) attend(items[i]);
    for (int64_t i = next_single.fetch_add(1); i < n_items; i = next_single.fetch_add(1)) attend(items[i]);
  });
}

}  // namespace

bool prefill_kernel_supports(const Shape& s) {
  return s.Hkv > 0 && s.H % s.Hkv == 0 && (s.D == 16 || s.D == 32 || s.D == 64 || s.D == 128);
}

void paged_prefill_attention(const at::Tensor& qkv, const KVBlocks& kv, const int32_t* tables, int64_t max_blocks,
                             const std::vector<PrefillChunk>& chunks, at::Tensor& out, const Shape& s) {
  TORCH_CHECK(prefill_kernel_supports(s), "paged_prefill_attention: unsupported head_dim ", s.D);
  if (chunks.empty()) return;
  switch (s.D / kLanes) {
    case 1: return run<1>(qkv, kv, tables, max_blocks, chunks, out, s);
    case 2: return run<2>(qkv, kv, tables, max_blocks, chunks, out, s);
    case 4: return run<4>(qkv, kv, tables, max_blocks, chunks, out, s);
    case 8: return run<8>(qkv, kv, tables, max_blocks, chunks, out, s);
    default: return run<16>(qkv, kv, tables, max_blocks, chunks, out, s);  // D = 128 in 8-float vectors
  }
}

}  // namespace chunklab
