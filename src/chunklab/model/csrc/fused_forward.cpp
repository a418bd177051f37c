// TinyGPT's whole forward pass as one call from Python (the engine's fast path).
//
// The eager model issues ~40 ATen ops per layer from Python; at one decode token
// that dispatch, not arithmetic, is most of a step. Here the layer loop runs in
// C++, the matmuls run through MKL (at::mm), oneDNN (prepacked weights) or, at
// decode batch sizes, panel_linear (the per-machine choice is
// model/linear_library.py's), and everything between them is a few fused loops:
// RMSNorm, RoPE + KV-cache write, SiLU-mul, paged decode attention that reads each
// K/V block in place (no gather, no mask tensor), and paged causal attention for
// prefill chunks (prefill_attention.cpp; ATen's SDPA where asked). On panel_linear's path the
// RMSNorms, the residual adds and SiLU-mul run inside the GEMMs' own parallel regions
// (panel_gemm's epilogues): at 64-row chunks each separate pass cost a region or an ATen op
// more than its arithmetic.
//
// Contract (float32, CPU, contiguous):
//   input_ids [T] int64; the batch is sequences laid out one after another, the
//   first num_decodes of them one token each (decodes), the rest prefill chunks.
//   block_tables [S, max_blocks] int32 (padding never read), starts [S] int64
//   (tokens already in the cache), num_tokens [S] int64 (this step's tokens).
//   k_pool [L, Hkv, num_blocks, D, block_size], v_pool [L, Hkv, num_blocks, block_size, D]: per
//   block and KV head, K transposed and V row by row (KVBlocks in kernels.h).
//   weights: embed, then per layer (attn_norm, wqkv [C, (H+2Hkv)D], wo, mlp_norm,
//   w_gate_up [C, 2F], w_down), then final_norm.  rope_cos/sin [max_seq, D].
//   packed, panels: per layer (wqkv, wo, w_gate_up, w_down) prepacked for oneDNN and for
//   panel_linear, each empty unless the plan uses that library. The panels of wqkv and
//   w_gate_up carry their RMSNorm's gain (pack_panels' row_scale), w_gate_up's packed as
//   gate/up pairs. library: this call's
//   linear layers run through MKL (0), oneDNN (1) or panel_linear (2). prefill_attention:
//   prefill chunks attend through ATen's SDPA (0) or paged_prefill_attention (1; where its
//   prefill_kernel_supports the shape, else SDPA).
//   sample_rows: the rows that sample (every decode, the last row of a prompt's final chunk);
//   scratch: a float32 tensor this call may resize and reuse for its activations (see below).
//   Returns the hidden states after the final norm of sample_rows only, [len(sample_rows), C]:
//   the other rows feed nothing after the last layer (a chunk that does not end its prompt
//   samples nothing), so their final norm is not computed.
#include <torch/extension.h>

#include <cstring>

#include "kernels.h"

using namespace chunklab;

namespace {

// A prefill chunk for SDPA: rows [row, row + n) at positions [start, start + n).
struct Segment {
  int64_t row, n, start;
  const int32_t* table;  // its sequence's block table (read for a chunk after a cached prefix)
  at::Tensor mask;       // [n, start + n] additive, lower-right causal (undefined for a first chunk)
};

at::Tensor segment_attention(const at::Tensor& qkv, const Segment& seg, const KVBlocks& kv, const Shape& s) {
  const int64_t qd = s.H * s.D, kd = s.Hkv * s.D;
  auto rows = qkv.narrow(0, seg.row, seg.n);
  auto q = rows.narrow(1, 0, qd).view({seg.n, s.H, s.D}).transpose(0, 1).unsqueeze(0);  // [1, H, n, D]
  at::Tensor k, v;
  if (seg.mask.defined()) {
    std::tie(k, v) = gather_context(kv, seg.table, seg.start + seg.n);  // [Hkv, ctx, D]
  } else {
    k = rows.narrow(1, qd, kd).view({seg.n, s.Hkv, s.D}).transpose(0, 1);
    v = rows.narrow(1, qd + kd, kd).view({seg.n, s.Hkv, s.D}).transpose(0, 1);
  }
  k = k.unsqueeze(0);  // [1, Hkv, ctx, D]
  v = v.unsqueeze(0);
  const bool causal = !seg.mask.defined();
  auto out = at::scaled_dot_product_attention(q, k, v, causal ? std::optional<at::Tensor>() : seg.mask, 0.0,
                                              causal, std::nullopt, /*enable_gqa=*/true);
  return out.squeeze(0).transpose(0, 1);  // [n, H, D]
}

// oneDNN builds (JIT-compiles, ~1 ms) and caches a primitive per distinct row count, each
// holding ~0.2-0.9 MB, in two caches of 1,024 entries (oneDNN's and ideep's). Serving
// sees every row count from 1 to the budget, so unpadded it grows by hundreds of MB
// and pays a build on every new size. Rows are padded up to a bucket instead: exact
// up to 32, then 16 buckets per octave (at most 1/16 = 6.25% extra rows), so a run
// builds at most ~16 primitives per octave per weight shape.
int64_t onednn_rows(int64_t rows) {
  if (rows <= 32) return rows;
  int64_t octave = 1;
  while (octave * 2 <= rows) octave *= 2;
  const int64_t granule = octave / 16;
  return (rows + granule - 1) / granule * granule;
}

// Rows of the output projection and MLP run together (fused_forward's layer loop). Measured on
// an Intel Xeon VM (2 threads), TinyGPT's MLP in six layers, weights cycling: 1,536 rows at
// once 64.4 ms, in tiles of 512 rows 51.6 ms; 4,096 rows 189.6 against 140.9 ms. Untiled, a
// 4,096-row step's [rows, 2F] activations (32 MiB) go out to memory and back; in tiles of 512
// (4 MiB) they stay in cache. Tiles of 256 and 128 lost again to the GEMMs' smaller blocks.
constexpr int64_t kRowTile = 512;

// A step's activations: the residual stream x [T, C], attention's output [T, H D], qkv [T, (H+2Hkv) D]
// and one row tile's MLP activations [min(T, kRowTile), F], carved out of one buffer per call.
// Allocated per layer, a 64-row chunk's paid ~20 us a layer in fresh pages (first touch): measured
// on an Intel Xeon VM (family 6 model 167, 2 threads), a 1,536-token prompt served in 24 chunks
// of 64, 15 alternated rounds in one process, 0.969x the time (one pass of 1,536 rows 0.978x)
// with the activations in the caller's scratch and the final norm of the sampling rows only. Steps of up to kRowTile rows reuse `scratch`
// (grown once, then held: ~3.8 MB for TinyGPT); longer ones allocate theirs per call, where
// a first touch is a small share of the step and holding a budget-sized buffer is not.
struct Activations {
  at::Tensor x, attn, qkv, act;
};

Activations activations(at::Tensor& scratch, int64_t T, int64_t C, int64_t attn_cols, int64_t qkv_cols, int64_t F) {
  const int64_t tile = std::min(kRowTile, T), need = T * (C + attn_cols + qkv_cols) + tile * F;
  at::Tensor buffer;
  if (T <= kRowTile) {
    TORCH_CHECK(scratch.scalar_type() == at::kFloat && scratch.dim() == 1, "scratch must be a 1-D float32 tensor");
    if (scratch.numel() < need) scratch.resize_({kRowTile * (C + attn_cols + qkv_cols + F)});
    buffer = scratch;
  } else {
    buffer = at::empty({need}, scratch.options().dtype(at::kFloat));
  }
  int64_t offset = 0;
  auto take = [&](int64_t rows, int64_t cols) {
    auto t = buffer.narrow(0, offset, rows * cols).view({rows, cols});
    offset += rows * cols;
    return t;
  };
  Activations a;
  a.x = take(T, C);
  a.attn = take(T, attn_cols);
  a.qkv = take(T, qkv_cols);
  a.act = take(tile, F);
  return a;
}

// The library a linear layer runs through (model/linear_library.py chooses per batch size).
enum Library : int64_t { kMkl = 0, kOnednn = 1, kPanels = 2 };

// y = x @ w through MKL; through oneDNN's linear on the same weight prepacked (rows padded
// to onednn_rows; the pad rows are zero and their outputs dropped: a row's result never
// reads another row); or through panel_linear on its panel-packed copy (small batches).
// mkldnn::_linear_pointwise has no C++ API in the wheel's headers: called boxed through
// the dispatcher (a few microseconds, 24 calls a step).
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, Library library, const at::Tensor* packed,
                  const at::Tensor* panels) {
  if (library == kPanels) return panel_linear(x, *panels, w.size(1));
  if (library == kMkl) return at::mm(x, w);
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  const int64_t rows = x.size(0), padded = onednn_rows(rows);
  at::Tensor in = x;
  if (padded != rows) {
    in = at::empty({padded, x.size(1)}, x.options());
    in.narrow(0, 0, rows).copy_(x);
    in.narrow(0, rows, padded - rows).zero_();
  }
  torch::jit::Stack stack{in, *packed, c10::IValue(), std::string("none"),
                          c10::List<std::optional<at::Scalar>>(), c10::IValue(std::string(""))};
  op.callBoxed(&stack);
  auto y = stack[0].toTensor();
  return padded == rows ? y : y.narrow(0, 0, rows);  // the leading rows of a row-major [padded, N]: contiguous
}

}  // namespace

at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& block_tables, const std::vector<int64_t>& starts,
                   const std::vector<int64_t>& num_tokens, int64_t num_decodes, const std::vector<at::Tensor>& weights,
                   at::Tensor k_pool, at::Tensor v_pool, const at::Tensor& rope_cos, const at::Tensor& rope_sin,
                   int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size, double eps,
                   const std::vector<at::Tensor>& packed, const std::vector<at::Tensor>& panels,
                   int64_t library, int64_t prefill_attention, const std::vector<int64_t>& sample_rows,
                   at::Tensor scratch) {
  TORCH_CHECK(input_ids.dim() == 1 && block_tables.scalar_type() == at::kInt, "bad metadata");
  TORCH_CHECK(k_pool.scalar_type() == at::kFloat && v_pool.scalar_type() == at::kFloat && k_pool.dim() == 5,
              "the fused forward takes a float32 KV pool [L, Hkv, num_blocks, ...] (KVBlocks)");
  const Shape s{num_heads, num_kv_heads, head_dim, block_size};
  const int64_t L = k_pool.size(0), T = input_ids.size(0), S = static_cast<int64_t>(starts.size());
  const int64_t max_blocks = block_tables.size(1);
  TORCH_CHECK(static_cast<int64_t>(weights.size()) == 2 + 6 * L, "expected ", 2 + 6 * L, " weight tensors");
  const auto lib = static_cast<Library>(library);
  TORCH_CHECK(library >= kMkl && library <= kPanels, "unknown linear library ", library);
  TORCH_CHECK(lib != kOnednn || static_cast<int64_t>(packed.size()) == 4 * L, "onednn needs ", 4 * L, " packed weights");
  TORCH_CHECK(lib != kPanels || static_cast<int64_t>(panels.size()) == 4 * L, "panels needs ", 4 * L, " packed weights");
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const bool paged_prefill = prefill_attention == 1 && prefill_kernel_supports(s);

  int64_t rows_in_steps = 0;
  for (int64_t n : num_tokens) rows_in_steps += n;
  TORCH_CHECK(num_decodes >= 0 && num_decodes <= S, num_decodes, " decodes in a step of ", S, " sequences");
  TORCH_CHECK(block_tables.size(0) >= S, "block_tables has ", block_tables.size(0), " rows for ", S, " sequences");
  TORCH_CHECK(static_cast<int64_t>(num_tokens.size()) == S && rows_in_steps == T, "num_tokens (", num_tokens.size(),
              " sequences) sum to ", rows_in_steps, "; starts has ", S, " and input_ids ", T);
  const int64_t R = static_cast<int64_t>(sample_rows.size());
  bool every_row = R == T;  // a decode-only step samples every row, in order
  for (int64_t i = 0; i < R; ++i) {
    TORCH_CHECK(sample_rows[i] >= 0 && sample_rows[i] < T, "sample row ", sample_rows[i], " outside [0, ", T, ")");
    every_row = every_row && sample_rows[i] == i;
  }
  // Per-token positions and slots; per-segment context slots and masks (shared by every layer).
  std::vector<int64_t> positions(T), slots(T), context_lens(num_decodes);
  std::vector<Segment> segments;     // prefill chunks for SDPA
  std::vector<PrefillChunk> chunks;  // or for the paged kernel
  int64_t row = 0;
  for (int64_t i = 0; i < S; ++i) {
    for (int64_t j = 0; j < num_tokens[i]; ++j, ++row) {
      const int64_t pos = starts[i] + j;
      TORCH_CHECK(pos < rope_cos.size(0), "position ", pos, " is past the RoPE table (", rope_cos.size(0), " positions)");
      TORCH_CHECK(pos / block_size < max_blocks, "position ", pos, " is past its block table (", max_blocks, " blocks)");
      const int32_t block = tables[i * max_blocks + pos / block_size];
      TORCH_CHECK(block >= 0 && block < k_pool.size(2), "block ", block, " is outside the pool (", k_pool.size(2), ")");
      positions[row] = pos;
      slots[row] = slot_of(tables + i * max_blocks, pos, block_size);
    }
    if (i < num_decodes) {
      context_lens[i] = starts[i] + 1;
      continue;
    }
    if (paged_prefill) {
      chunks.push_back({i, row - num_tokens[i], num_tokens[i], starts[i]});
      continue;
    }
    Segment seg{row - num_tokens[i], num_tokens[i], starts[i], tables + i * max_blocks, {}};
    if (seg.start > 0) {
      const int64_t ctx = seg.start + seg.n;
      auto allowed = at::ones({seg.n, ctx}, at::kBool).tril(seg.start);
      seg.mask = at::zeros({seg.n, ctx}, at::kFloat).masked_fill_(allowed.logical_not(), -INFINITY);
    }
    segments.push_back(std::move(seg));
  }

  const int64_t C = weights[0].size(1), F = weights[6].size(0);  // embed [V, C]; layer 0's w_down [F, C]
  auto [x, attn, qkv_out, act_tile] = activations(scratch, T, C, num_heads * head_dim, weights[2].size(1), F);
  at::index_select_out(x, weights[0], 0, input_ids);  // [T, C]
  for (int64_t layer = 0; layer < L; ++layer) {
    const at::Tensor* w = &weights[1 + 6 * layer];
    const at::Tensor* pk = lib == kOnednn ? &packed[4 * layer] : nullptr;  // wqkv, wo, w_gate_up, w_down
    const at::Tensor* pp = lib == kPanels ? &panels[4 * layer] : nullptr;
    auto lin = [=](const at::Tensor& in, const at::Tensor& weight, int i) {
      return linear(in, weight, lib, pk == nullptr ? nullptr : pk + i, pp == nullptr ? nullptr : pp + i);
    };
    auto k_layer = k_pool[layer], v_layer = v_pool[layer];
    const KVBlocks kv = kv_blocks(k_layer, v_layer, s);
    at::Tensor qkv = qkv_out;  // [T, (H + 2Hkv) D]
    if (lib == kPanels) {  // RMSNorm inside the GEMM: its gain is in the panels (FusedForward packs them so)
      panel_gemm(x, pp[0], qkv, Epilogue::kStore, eps);
    } else if (lib == kMkl) {
      at::mm_out(qkv, rms_norm(x, w[0], eps), w[1]);
    } else {
      qkv = lin(rms_norm(x, w[0], eps), w[1], 0);  // oneDNN's op returns its own tensor
    }
    rope_and_cache_write(qkv, rope_cos, rope_sin, positions, slots, kv, s);
    if (num_decodes > 0) paged_decode_attention(qkv, kv, tables, max_blocks, context_lens, attn, s);
    if (!chunks.empty()) paged_prefill_attention(qkv, kv, tables, max_blocks, chunks, attn, s);
    for (const auto& seg : segments)
      attn.narrow(0, seg.row, seg.n).view({seg.n, num_heads, head_dim}).copy_(segment_attention(qkv, seg, kv, s));
    // Output projection and MLP, row-wise, so run kRowTile rows at a time: the [rows, 2F]
    // gate-up activations then stay in cache between their GEMM, silu_mul and the down GEMM.
    // x is this call's own residual stream: added to in place.
    for (int64_t r = 0; r < T; r += kRowTile) {
      const int64_t n = std::min(kRowTile, T - r);
      auto xt = x.narrow(0, r, n);
      auto at = attn.narrow(0, r, n);
      if (lib == kPanels) {  // the residual adds, RMSNorm and SiLU-mul inside the GEMMs: 3 parallel regions, no other pass
        panel_gemm(at, pp[1], xt, Epilogue::kAdd, -1.0);
        auto act = act_tile.narrow(0, 0, n);  // the leading rows: contiguous
        panel_gemm(xt, pp[2], act, Epilogue::kSiluPairs, eps);
        panel_gemm(act, pp[3], xt, Epilogue::kAdd, -1.0);
      } else if (lib == kMkl) {  // MKL adds into xt itself (beta = 1)
        xt.addmm_(at, w[2]);
        xt.addmm_(silu_mul(at::mm(rms_norm(xt, w[3], eps), w[4])), w[5]);
      } else {
        xt.add_(lin(at, w[2], 1));
        xt.add_(lin(silu_mul(lin(rms_norm(xt, w[3], eps), w[4], 2)), w[5], 3));
      }
    }
  }
  if (every_row) return rms_norm(x, weights.back(), eps);
  auto picked = at::empty({R, C}, x.options());
  const float* from = x.data_ptr<float>();
  float* to = picked.data_ptr<float>();
  for (int64_t i = 0; i < R; ++i) std::memcpy(to + i * C, from + sample_rows[i] * C, C * sizeof(float));
  return rms_norm(picked, weights.back(), eps);
}

// The vector paths this build compiled (the attention kernels pick theirs at compile time).
std::string vector_isa() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#else
  return "generic";
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("vector_isa", &vector_isa, "avx512, avx2 or generic: the vector paths this build's kernels take");
  m.def("forward", &forward, "TinyGPT forward over a paged KV pool (float32, CPU)");
  m.def("pack_panels", &pack_panels, "a [in, out] float32 weight in panel_linear's packed form", py::arg("w"),
        py::arg("row_scale") = py::none(), py::arg("pairs") = false);
  m.def(
      "panel_gemm",
      [](const at::Tensor& x, const at::Tensor& panels, at::Tensor y, int64_t epilogue, double norm_eps) {
        TORCH_CHECK(epilogue >= 0 && epilogue <= 2, "unknown epilogue ", epilogue);
        panel_gemm(x, panels, y, static_cast<Epilogue>(epilogue), norm_eps);
      },
      "y = epilogue(x @ w): 0 store, 1 add, 2 silu(gate) * up; rows RMS-normalised first when norm_eps >= 0",
      py::arg("x"), py::arg("panels"), py::arg("y"), py::arg("epilogue"), py::arg("norm_eps") = -1.0);
  m.def("panel_linear", &panel_linear, "x @ w for a few rows of x, w in pack_panels' form (out_features given)");
  m.def("onednn_rows", &onednn_rows, "the row count a oneDNN linear of `rows` rows runs at (padded to a bucket)");
}
