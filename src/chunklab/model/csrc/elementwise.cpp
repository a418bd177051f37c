// RMSNorm, RoPE + KV-cache write, SiLU-mul: the elementwise chain around the matmuls.
#include "kernels.h"

#include <ATen/Parallel.h>

namespace chunklab {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const int64_t T = x.size(0), C = x.size(1);
  auto out = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, T, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* row = xp + t * C;
      const float inv = inverse_rms(row, C, static_cast<float>(eps));
      float* o = op + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = row[c] * inv * wp[c];
    }
  });
  return out;
}

KVBlocks kv_blocks(at::Tensor& k_cache, at::Tensor& v_cache, const Shape& s) {
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.size(0) == s.Hkv && k_cache.size(2) == s.D &&
                  k_cache.size(3) == s.block_size && k_cache.is_contiguous(),
              "k pool: expected [", s.Hkv, ", num_blocks, ", s.D, ", ", s.block_size, "] contiguous, got ",
              k_cache.sizes());
  TORCH_CHECK(v_cache.dim() == 4 && v_cache.size(1) == k_cache.size(1) && v_cache.size(0) == s.Hkv &&
                  v_cache.size(2) == s.block_size && v_cache.size(3) == s.D && v_cache.is_contiguous(),
              "v pool: expected [", s.Hkv, ", num_blocks, ", s.block_size, ", ", s.D, "] contiguous, got ",
              v_cache.sizes());
  return {k_cache.data_ptr<float>(), v_cache.data_ptr<float>(), s.Hkv, s.D, s.block_size, k_cache.size(1)};
}

void rope_and_cache_write(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                          const std::vector<int64_t>& positions, const std::vector<int64_t>& slots,
                          const KVBlocks& kv, const Shape& s) {
  const int64_t T = qkv.size(0), W = qkv.size(1), half = s.D / 2, bs = s.block_size;
  float* base = qkv.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  at::parallel_for(0, T, 32, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = base + t * W;
      const float* c = cp + positions[t] * s.D;  // the tables repeat: cos[i] == cos[i + half]
      const float* sn = sp + positions[t] * s.D;
      for (int64_t h = 0; h < s.H + s.Hkv; ++h) {
        float* x = row + h * s.D;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = x[i], x2 = x[i + half];
          x[i] = x1 * c[i] - x2 * sn[i];
          x[i + half] = x2 * c[i + half] + x1 * sn[i + half];
        }
      }
      const int64_t block = slots[t] / bs, offset = slots[t] % bs;
      for (int64_t h = 0; h < s.Hkv; ++h) {
        const float* k = row + (s.H + h) * s.D;
        const float* v = row + (s.H + s.Hkv + h) * s.D;
        float* kr = kv.k_run(block, h) + offset;  // column `offset` of [D][block_size]
        for (int64_t d = 0; d < s.D; ++d) kr[d * bs] = k[d];
        std::copy(v, v + s.D, kv.v_run(block, h) + offset * s.D);
      }
    }
  });
}

std::pair<at::Tensor, at::Tensor> gather_context(const KVBlocks& kv, const int32_t* table, int64_t ctx) {
  const int64_t D = kv.D, bs = kv.block_size;
  auto k = at::empty({kv.Hkv, ctx, D}, at::kFloat), v = at::empty({kv.Hkv, ctx, D}, at::kFloat);
  float* kp = k.data_ptr<float>();
  float* vp = v.data_ptr<float>();
  at::parallel_for(0, kv.Hkv * ((ctx + bs - 1) / bs), 4, [&](int64_t begin, int64_t end) {
    const int64_t blocks = (ctx + bs - 1) / bs;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t h = i / blocks, b = i % blocks, n = std::min(bs, ctx - b * bs);
      const float* kr = kv.k_run(table[b], h);
      const float* vr = kv.v_run(table[b], h);
      float* ko = kp + (h * ctx + b * bs) * D;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < D; ++d) ko[j * D + d] = kr[d * bs + j];
      std::copy(vr, vr + n * D, vp + (h * ctx + b * bs) * D);
    }
  });
  return {k, v};
}

at::Tensor silu_mul(const at::Tensor& gate_up) {
  const int64_t T = gate_up.size(0), F = gate_up.size(1) / 2;
  auto out = at::empty({T, F}, gate_up.options());
  const float* gp = gate_up.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* g = gp + t * 2 * F;
      const float* u = g + F;
      float* o = op + t * F;
      int64_t i = 0;
      for (; i + 16 <= F; i += 16) {
        const f16v gv = *reinterpret_cast<const f16v_u*>(g + i), uv = *reinterpret_cast<const f16v_u*>(u + i);
        *reinterpret_cast<f16v_u*>(o + i) = gv / (1.f + exp16(-gv)) * uv;
      }
      for (; i < F; ++i) o[i] = g[i] / (1.f + exp1(-g[i])) * u[i];
    }
  });
  return out;
}

}  // namespace chunklab
