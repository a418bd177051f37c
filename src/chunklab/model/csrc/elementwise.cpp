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
      float ss = 0.f;
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < C; ++c) ss += row[c] * row[c];
      const float inv = 1.f / std::sqrt(ss / C + static_cast<float>(eps));
      float* o = op + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = row[c] * inv * wp[c];
    }
  });
  return out;
}

void rope_and_cache_write(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                          const std::vector<int64_t>& positions, const std::vector<int64_t>& slots,
                          at::Tensor& k_cache, at::Tensor& v_cache, const Shape& s) {
  const int64_t T = qkv.size(0), W = qkv.size(1), half = s.D / 2, kv_row = s.Hkv * s.D;
  float* base = qkv.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* kc = k_cache.data_ptr<float>();
  float* vc = v_cache.data_ptr<float>();
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
      std::copy(row + s.H * s.D, row + s.H * s.D + kv_row, kc + slots[t] * kv_row);
      std::copy(row + (s.H + s.Hkv) * s.D, row + (s.H + s.Hkv) * s.D + kv_row, vc + slots[t] * kv_row);
    }
  });
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
