// y = x @ w.T (+ bias) for a few rows of x and a bf16 or int4 weight, with AVX2 + FMA (issue 23).
//
// On CPUs without native bf16 dot products, eager bf16 GEMMs are compute-bound from two rows
// on. This kernel widens each 16-element block of a weight row to fp32 once (its even and odd
// elements, a shift and a mask: no shuffle) and multiplies it into every row of x (fp32,
// rearranged to match) in registers, so M rows read the weight once. The weight is prefetched
// PREFETCH elements ahead: without it a step's weights streamed from memory well below its rate
// (results/cpu_kernels_avx2_restricted_zen5). Each output is the same 8-lane fp32
// accumulation in the same order for any M, so the result for a row does not depend on how
// many rows are in the call (batch invariant). int4_linear does the same for
// group-quantized 4-bit weights (the int4 draft), where torch's own int4 kernel is
// compute-bound on AVX2 (~5 GB/s of weights).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "rows.h"

namespace {

using specbench::bf16_to_float;
using specbench::hsum;

// 16 bf16 -> their even elements (0, 2, .., 14) and odd ones (1, 3, .., 15) as fp32, without a
// shuffle: each 32-bit lane holds an even bf16 in its low half and an odd one in its high half.
inline void load_bf16_pairs(const uint16_t* p, __m256& even, __m256& odd) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(raw, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
}

// x (M, K) -> the same rows with each whole 16-block split into its even then odd elements,
// matching load_bf16_pairs; a K tail (K % 16) stays in place.
std::vector<float> split_even_odd(const float* x, int64_t M, int64_t K) {
  std::vector<float> out(M * K);
  const int64_t K16 = K & ~int64_t(15);
  for (int64_t m = 0; m < M; ++m) {
    const float* src = x + m * K;
    float* dst = out.data() + m * K;
    for (int64_t k = 0; k < K16; k += 16)
      for (int j = 0; j < 8; ++j) dst[k + j] = src[k + 2 * j], dst[k + 8 + j] = src[k + 2 * j + 1];
    for (int64_t k = K16; k < K; ++k) dst[k] = src[k];
  }
  return out;
}

constexpr int64_t PREFETCH = 4096;  // bf16 elements ahead of the load

// R weight rows (n .. n+R) times MR rows of split x (m0 ..): y[m, n + r]. Each output keeps one
// 8-lane accumulator (each 16-block's even elements, then its odd ones), summed in the same
// order for any R and MR: R * MR accumulators (two weight rows x up to six rows of x = 12), and
// each load of x feeds R FMAs.
template <int R, int MR>
void block(const float* x, const uint16_t* w, float* y, int64_t K, int64_t N, int64_t n,
           int64_t m0) {
  __m256 acc[R][MR];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MR; ++m) acc[r][m] = _mm256_setzero_ps();
  const int64_t K16 = K & ~int64_t(15);
  for (int64_t k = 0; k < K16; k += 16) {
    __m256 even[R], odd[R];
    for (int r = 0; r < R; ++r) {
      const uint16_t* wr = w + (n + r) * K + k;
      if ((k & 31) == 0) _mm_prefetch(reinterpret_cast<const char*>(wr + PREFETCH), _MM_HINT_T0);
      load_bf16_pairs(wr, even[r], odd[r]);
    }
    for (int m = 0; m < MR; ++m) {
      const float* xk = x + (m0 + m) * K + k;
      const __m256 xe = _mm256_loadu_ps(xk);
      for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(even[r], xe, acc[r][m]);
      const __m256 xo = _mm256_loadu_ps(xk + 8);
      for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(odd[r], xo, acc[r][m]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MR; ++m) {
      float s = hsum(acc[r][m]);
      for (int64_t k = K16; k < K; ++k) s += bf16_to_float(w[(n + r) * K + k]) * x[(m0 + m) * K + k];
      y[(m0 + m) * N + n + r] = s;
    }
}

// R weight rows times all M rows of x, MAXM rows of x per register block
template <int R, int MAXM>
void rows(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N,
          int64_t n) {
  specbench::for_x_rows<MAXM>(M, [&](auto mr, int64_t m0) {
    block<R, decltype(mr)::value>(x, w, y, K, N, n, m0);
  });
}

// int4 weights, groups of 32 inputs: w[n, 32 g + j] = q * scale[n, g] + low[n, g], with
// packed[n, 16 g + j] = q[n, 32 g + j] | q[n, 32 g + 16 + j] << 4 (j < 16). Each row of x is
// quantized per group to int8 (xq * dx, |xq| <= 127, as llama.cpp's q8 activations), so a
// group's dot product is one byte multiply-add (maddubs): sum_j q xq * dx * scale; the low term
// uses the exact fp32 group sums of x: sum_g low * xsum.
inline __m256i unpack_codes(const uint8_t* p) {
  // 16 bytes of nibble pairs -> 32 codes: bytes 0..15 the low nibbles, 16..31 the high ones
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// sum_i a[i] * b[i], 8 lanes at a time and the tail in order
inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  const int64_t n8 = n & ~int64_t(7);
  for (int64_t i = 0; i < n8; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum(acc);
  for (int64_t i = n8; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <int R, int MR>
void int4_block(const int8_t* xq, const float* dx, const float* xsum, const uint8_t* w,
                const float* scale, const float* low, float* y, int64_t K, int64_t N, int64_t n,
                int64_t m0) {
  // R weight rows (n .. n+R) times MR rows of x (m0 ..): y[m, n + r]
  const int64_t G = K / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][MR];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MR; ++m) acc[r][m] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m256i codes[R];
    __m256 s[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* wr = w + (n + r) * (K / 2) + g * 16;
      if ((g & 3) == 0) _mm_prefetch(reinterpret_cast<const char*>(wr + 2 * PREFETCH), _MM_HINT_T0);
      if ((g & 15) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(scale + (n + r) * G + g + PREFETCH / 4), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(low + (n + r) * G + g + PREFETCH / 4), _MM_HINT_T0);
      }
      codes[r] = unpack_codes(wr);
      s[r] = _mm256_set1_ps(scale[(n + r) * G + g]);
    }
    for (int m = 0; m < MR; ++m) {
      const int64_t row = (m0 + m) * G + g;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + row * 32));
      const __m256 d = _mm256_set1_ps(dx[row]);
      for (int r = 0; r < R; ++r) {
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(codes[r], xv), ones);  // 8 x i32
        acc[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(s[r], d), acc[r][m]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MR; ++m) {
      y[(m0 + m) * N + n + r] = hsum(acc[r][m]) + dot(low + (n + r) * G, xsum + (m0 + m) * G, G);
    }
}

template <int R>
void int4_rows(const int8_t* xq, const float* dx, const float* xsum, const uint8_t* w,
               const float* scale, const float* low, float* y, int64_t M, int64_t K, int64_t N,
               int64_t n) {
  constexpr int MAXM = R == 2 ? 4 : 8;  // accumulators + codes + scales in 16 registers
  specbench::for_x_rows<MAXM>(M, [&](auto mr, int64_t m0) {
    int4_block<R, decltype(mr)::value>(xq, dx, xsum, w, scale, low, y, K, N, n, m0);
  });
}

// Each 32-value group of x -> int8 codes xq and a scale dx (x ~= xq * dx), and its exact sum
void quantize_rows(const float* x, int64_t groups, int8_t* xq, float* dx, float* xsum) {
  for (int64_t i = 0; i < groups; ++i) {
    const float* v = x + i * 32;
    float amax = 0.0f, sum = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j])), sum += v[j];
    const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) xq[i * 32 + j] = static_cast<int8_t>(std::nearbyint(v[j] * inv));
    dx[i] = d, xsum[i] = sum;
  }
}

}  // namespace

// x: (M, K) fp32 contiguous; weight: (N, K) bf16 contiguous; returns (M, N) fp32
at::Tensor bf16_linear(const at::Tensor& x, const at::Tensor& weight) {
  specbench::check_linear(x, at::kFloat, weight);
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  auto y = at::empty({M, N}, x.options());
  const std::vector<float> xs = split_even_odd(x.data_ptr<float>(), M, K);
  const float* xp = xs.data();
  const auto* wp = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
  // 4 weight rows for one row of x (4 independent accumulators), else 2 with up to 6 rows of
  // x per register block (12 accumulators)
  if (M == 1)
    specbench::for_weight_rows<4>(N, [&](int64_t n, auto r) {
      rows<decltype(r)::value, 1>(xp, wp, yp, M, K, N, n);
    });
  else
    specbench::for_weight_rows<2>(N, [&](int64_t n, auto r) {
      rows<decltype(r)::value, 6>(xp, wp, yp, M, K, N, n);
    });
  return y;
}

// x: (M, K) fp32; packed: (N, K / 2) uint8; scale, low: (N, K / 32) fp32; returns (M, N) fp32
at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scale,
                       const at::Tensor& low) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x: (M, K) fp32");
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0);
  TORCH_CHECK(K % 32 == 0, "int4_linear: K must be a whole number of 32-input groups");
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == at::kByte && packed.is_contiguous() &&
                  packed.size(1) * 2 == K,
              "packed: (N, K / 2) uint8, two codes a byte");
  for (const at::Tensor* t : {&scale, &low})
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous() && t->dim() == 2 &&
                    t->size(0) == N && t->size(1) == K / 32,
                "scale, low: (N, K / 32) fp32");
  const int64_t G = K / 32;
  std::vector<int8_t> xq(M * K);
  std::vector<float> dx(M * G), xsum(M * G);  // (M, G) each
  quantize_rows(x.data_ptr<float>(), M * G, xq.data(), dx.data(), xsum.data());
  auto y = at::empty({M, N}, x.options());
  const float *sp = scale.data_ptr<float>(), *lp = low.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  float* yp = y.data_ptr<float>();
  const int8_t* xqp = xq.data();
  const float *dxp = dx.data(), *xsp = xsum.data();
  const auto weight_rows = [&](int64_t n, auto r) {
    int4_rows<decltype(r)::value>(xqp, dxp, xsp, wp, sp, lp, yp, M, K, N, n);
  };
  if (M <= 4) specbench::for_weight_rows<2>(N, weight_rows);  // 2 weight rows per block
  else specbench::for_weight_rows<1>(N, weight_rows);
  return y;
}

TORCH_LIBRARY(specbench, m) {
  m.def("bf16_linear(Tensor x, Tensor weight) -> Tensor");
  m.def("int4_linear(Tensor x, Tensor packed, Tensor scale, Tensor low) -> Tensor");
}

TORCH_LIBRARY_IMPL(specbench, CPU, m) {
  m.impl("bf16_linear", &bf16_linear);
  m.impl("int4_linear", &int4_linear);
}
