// One decode call of an int4 Llama-family model in one C++ function (issues 23, 24).
//
// The 0.5B int4 draft's step is ~10 ms of int4 matmuls and ~4.5 ms of everything else: about a
// thousand small aten ops (norms, rotary, casts, attention, residuals), each a dispatch from
// Python. Here the layer loop runs in C++: RMSNorm, the fused q/k/v, gate/up and the other int4
// matmuls (int4_linear, the row kernel), rotary embedding, the KV cache write and attention over
// the cached positions, SiLU, residuals, the final norm and the head. Activations stay fp32
// between the matmuls (the Python path rounds them to the model's dtype after each op); keys
// and values are written to the cache in bf16, as the Python path writes them. A draft's
// numerics only move acceptance: speculative sampling stays exact whatever the draft computes.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "rows.h"

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scale,
                       const at::Tensor& low);  // bf16_gemm.cpp

namespace {

constexpr int64_t LAYER_PARAMS = 15;  // per layer, in int4_step.py's order
constexpr int64_t HEAD_PARAMS = 4;    // final norm, head packed / scale / low

// out[t] = x[t] / rms(x[t]) * w, rows of n
void rms_norm(const float* x, const float* w, float* out, int64_t rows, int64_t n, float eps) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* v = x + t * n;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += v[i] * v[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
    for (int64_t i = 0; i < n; ++i) out[t * n + i] = v[i] * inv * w[i];
  }
}

// Rotary embedding in place on `heads` vectors of dim D at one position (half-split rotation)
void rotate(float* v, int64_t heads, int64_t D, const float* cos, const float* sin) {
  const int64_t half = D / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* x = v + h * D;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      x[i] = a * cos[i] - b * sin[i];
      x[i + half] = b * cos[i + half] + a * sin[i + half];
    }
  }
}

// sum_i a[i] * bf16 b[i], D a multiple of 8
inline float dot_bf16(const float* a, const c10::BFloat16* b, int64_t D) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < D; i += 8) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const __m256 wb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), wb, acc);
  }
  return specbench::hsum(acc);
}

// One query head over positions 0..L-1 of its kv head: out = softmax(q.k * scaling) @ v
void attend(const float* q, const c10::BFloat16* keys, const c10::BFloat16* values, int64_t L,
            int64_t D, float scaling, float* out) {
  std::vector<float> p(L);
  float top = -INFINITY;
  for (int64_t l = 0; l < L; ++l) top = std::max(top, p[l] = dot_bf16(q, keys + l * D, D) * scaling);
  float total = 0.0f;
  for (int64_t l = 0; l < L; ++l) total += p[l] = std::exp(p[l] - top);
  for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
  for (int64_t l = 0; l < L; ++l) {
    const float w = p[l] / total;
    const c10::BFloat16* v = values + l * D;
    for (int64_t d = 0; d < D; ++d) out[d] += w * static_cast<float>(v[d]);
  }
}

at::Tensor linear(const at::Tensor& x, const at::Tensor* p) {  // p: packed, scale, low
  return int4_linear(x, p[0], p[1], p[2]);
}

}  // namespace

// x: (T, hidden) fp32 embeddings of T new tokens after `start` cached positions; cos, sin:
// (T, D) fp32; params: LAYER_PARAMS per layer then HEAD_PARAMS; keys, values: per layer
// (1, kv heads, capacity, D) bf16 with capacity >= start + T. Returns (keep, V) fp32 logits of
// the last `keep` positions; writes the new keys and values into the cache.
at::Tensor int4_decode(const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin,
                       at::TensorList params, at::TensorList keys, at::TensorList values,
                       int64_t start, int64_t heads, int64_t kv_heads, double eps,
                       double scaling, int64_t keep) {
  const int64_t layers = keys.size(), T = x_in.size(0), hidden = x_in.size(1);
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && x_in.is_contiguous(), "x: (T, hidden) fp32");
  TORCH_CHECK(static_cast<int64_t>(params.size()) == layers * LAYER_PARAMS + HEAD_PARAMS &&
                  static_cast<int64_t>(values.size()) == layers,
              "int4_decode: params must hold 15 tensors per layer and 4 for the head");
  const int64_t D = cos.size(1), group = heads / kv_heads, L = start + T;
  TORCH_CHECK(D % 8 == 0 && heads % kv_heads == 0 && keep >= 1 && keep <= T, "int4_decode: shapes");
  at::Tensor x = x_in.clone();
  at::Tensor h = at::empty({T, hidden}, x.options());
  at::Tensor attn = at::empty({T, heads * D}, x.options());
  float *xp = x.data_ptr<float>(), *hp = h.data_ptr<float>(), *ap = attn.data_ptr<float>();
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  const float fe = static_cast<float>(eps), fs = static_cast<float>(scaling);
  for (int64_t i = 0; i < layers; ++i) {
    const at::Tensor* p = params.data() + i * LAYER_PARAMS;
    TORCH_CHECK(keys[i].size(2) >= L && keys[i].scalar_type() == at::kBFloat16, "cache too small");
    rms_norm(xp, p[0].data_ptr<float>(), hp, T, hidden, fe);
    at::Tensor qkv = linear(h, p + 1);  // (T, (heads + 2 kv_heads) D)
    if (p[4].numel()) qkv.add_(p[4]);
    const int64_t width = qkv.size(1);
    float* qp = qkv.data_ptr<float>();
    auto* kc = keys[i].data_ptr<c10::BFloat16>();
    auto* vc = values[i].data_ptr<c10::BFloat16>();
    const int64_t cap = keys[i].size(2);
    for (int64_t t = 0; t < T; ++t) {
      float* row = qp + t * width;
      rotate(row, heads + kv_heads, D, cp + t * D, sp + t * D);  // q and k heads
      for (int64_t g = 0; g < kv_heads; ++g)
        for (int64_t d = 0; d < D; ++d) {
          kc[(g * cap + start + t) * D + d] = c10::BFloat16(row[(heads + g) * D + d]);
          vc[(g * cap + start + t) * D + d] = c10::BFloat16(row[(heads + kv_heads + g) * D + d]);
        }
    }
    at::parallel_for(0, T * heads, 1, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t t = j / heads, head = j % heads, g = head / group;
        attend(qp + t * width + head * D, kc + g * cap * D, vc + g * cap * D, start + t + 1, D,
               fs, ap + t * heads * D + head * D);
      }
    });
    x.add_(linear(attn, p + 5));
    rms_norm(xp, p[8].data_ptr<float>(), hp, T, hidden, fe);
    at::Tensor gu = linear(h, p + 9);  // (T, 2 inter): gate then up
    const int64_t inter = gu.size(1) / 2;
    at::Tensor act = at::empty({T, inter}, x.options());
    const float* gp = gu.data_ptr<float>();
    float* actp = act.data_ptr<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < inter; ++j) {
        const float g = gp[t * 2 * inter + j];
        actp[t * inter + j] = g / (1.0f + std::exp(-g)) * gp[t * 2 * inter + inter + j];
      }
    x.add_(linear(act, p + 12));
  }
  const at::Tensor* head = params.data() + layers * LAYER_PARAMS;
  at::Tensor last = at::empty({keep, hidden}, x.options());
  rms_norm(xp + (T - keep) * hidden, head[0].data_ptr<float>(), last.data_ptr<float>(), keep,
           hidden, fe);
  return linear(last, head + 1);
}

TORCH_LIBRARY_FRAGMENT(specbench, m) {
  m.def(
      "int4_decode(Tensor x, Tensor cos, Tensor sin, Tensor[] params, Tensor(a!)[] keys, "
      "Tensor(b!)[] values, int start, int heads, int kv_heads, float eps, float scaling, "
      "int keep) -> Tensor");
}

TORCH_LIBRARY_IMPL(specbench, CPU, m) { m.impl("int4_decode", &int4_decode); }
