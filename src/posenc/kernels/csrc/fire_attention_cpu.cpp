// Attention with FIRE's score bias computed inside a fused CPU kernel (forward, float32).
//
//   out_r = Σ_c softmax_c(scale · q_r·k_c + b_h(r, c)) v_c
//   b_h(r, c) = slope[h, m] · x + intercept[h, m],   x = ψ(|o|) · A_r,   o = a - b + r - c,
//   m = #{kinks < x}
//
// FIRE (Li et al. 2023, arXiv:2310.04418): ψ(|o|) = log(c|o| + 1), A_r = 1 / ψ(max(L, a + r)),
// and the MLP 1 -> hidden -> H is the piecewise-linear function it is (kinks shared by the
// heads, one line per head and piece: posenc.functional.fire_mlp_pieces). Queries sit at
// consecutive positions a + r, keys at b + c. Flash-attention tiling (Dao et al. 2022): per
// (batch, head, query block) the score tile q·k^T comes from BLAS, the bias is added in the pass
// that scales the tile and takes its row maxima, an online softmax rescales the accumulator,
// p·v goes to BLAS. No (T, L) tensor exists: memory is O(tile) per thread.
//
// The bias along a tile row is piecewise in c: x grows with |o|, so for each query the kinks
// become thresholds on |o| (computed once per call), and a row splits into runs of one piece,
// each a fused multiply-add over the contiguous ψ table. Causal masking is by index (query r
// sees keys c <= L - T + r); fully masked tiles are skipped.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "simd.h"


extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc);

namespace {

constexpr int64_t kBlockQ = 128;   // queries per tile
constexpr int64_t kBlockKV = 512;  // keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Row-major C (M, N) = A (M, K) op(B) + beta C, through column-major BLAS: op(B) = B^T for
// B (N, K) (trans_b "T", the scores q k^T), B itself for B (K, N) ("N", the values p v).
void gemm(const char* trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  const float one = 1.0f;
  sgemm_(trans_b, "N", &m, &n, &k, &one, B, &la, A, &lb, &beta, C, &lc);
}

namespace V = posenc_simd;

// s[j] = s[j] * scale + (sa * g[j] + ic) for j in [0, n); returns max(running, max_j s[j]).
inline float bias_run(float* s, const float* g, int64_t n, float scale, float sa, float ic,
                      float running) {
  int64_t j = 0;
#if POSENC_SIMD_AVX512 || POSENC_SIMD_AVX2 || POSENC_SIMD_NEON
  if (n >= V::kLanes) {
    V::vf vmax = V::set1(running);
    const V::vf vs = V::set1(scale), va = V::set1(sa), vi = V::set1(ic);
    for (; j + V::kLanes <= n; j += V::kLanes) {
      const V::vf v = V::fmadd(V::load(s + j), vs, V::fmadd(va, V::load(g + j), vi));
      V::store(s + j, v);
      vmax = V::max(vmax, v);
    }
    running = V::reduce_max(vmax);
  }
#endif
  for (; j < n; ++j) {
    s[j] = s[j] * scale + (sa * g[j] + ic);
    running = std::max(running, s[j]);
  }
  return running;
}

// s[j] = exp(s[j] - mx) for j in [0, n); returns the sum.
inline float exp_run(float* s, int64_t n, float mx) {
  int64_t j = 0;
  float sum = 0.0f;
#if POSENC_SIMD_AVX512 || POSENC_SIMD_AVX2 || POSENC_SIMD_NEON
  if (n >= V::kLanes) {
    V::vf vsum = V::set1(0.0f);
    const V::vf vm = V::set1(mx);
    for (; j + V::kLanes <= n; j += V::kLanes) {
      const V::vf e = V::exp(V::sub(V::load(s + j), vm));
      V::store(s + j, e);
      vsum = V::add(vsum, e);
    }
    sum = V::reduce_add(vsum);
  }
#endif
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  return sum;
}

struct Problem {
  const float *q, *k, *v;
  float* out;
  int64_t B, H, Hkv, T, L, D, K;
  int64_t qs[3], ks[3], vs[3];  // strides of (batch, head, row)
  int64_t shift;                // a - b: offset o = shift + r - c
  bool causal;
  float scale;
  const float* g;         // (T + L - 1,): g[c - r + T - 1] = ψ(|o|)
  const float* inv_norm;  // (T,): A_r
  const int32_t* thr;     // (T, K): piece m at |o| = #{k : thr[r, k] <= |o|}
  const float *slope, *icpt;  // (H, K + 1)
};

// Scores of query row r over keys [c0, c0 + n) (s holds q·k): bias, scale, row max.
float bias_row(const Problem& p, int64_t h, int64_t r, int64_t c0, int64_t n, float* s,
               float running) {
  const int32_t* thr = p.thr + r * p.K;
  const float* slope = p.slope + h * (p.K + 1);
  const float* icpt = p.icpt + h * (p.K + 1);
  const float a = p.inv_norm[r];
  const float* g = p.g + (c0 - r + p.T - 1);  // g[j] for key c0 + j
  int64_t j = 0;
  while (j < n) {
    const int64_t o = p.shift + r - (c0 + j), m = o >= 0 ? o : -o;
    const int64_t piece = std::upper_bound(thr, thr + p.K, m) - thr;
    int64_t len;
    if (o > 0) {  // |o| falls as c grows: the piece holds down to its lower threshold (and o = 1)
      const int64_t lowest = std::max<int64_t>(piece > 0 ? thr[piece - 1] : 0, 1);
      len = m - lowest + 1;
    } else {  // |o| grows: the piece holds up to the next threshold
      len = piece < p.K ? thr[piece] - m : n - j;
    }
    len = std::min(std::max<int64_t>(len, 1), n - j);
    running = bias_run(s + j, g + j, len, p.scale, slope[piece] * a, icpt[piece], running);
    j += len;
  }
  return running;
}

void attend_block(const Problem& p, int64_t b, int64_t h, int64_t r0, float* S, float* mx,
                  float* sum) {
  const int64_t nq = std::min(kBlockQ, p.T - r0), hk = h / (p.H / p.Hkv);
  const float* q = p.q + b * p.qs[0] + h * p.qs[1] + r0 * p.qs[2];
  const float* k = p.k + b * p.ks[0] + hk * p.ks[1];
  const float* v = p.v + b * p.vs[0] + hk * p.vs[1];
  float* out = p.out + ((b * p.H + h) * p.T + r0) * p.D;
  const int64_t visible = p.causal ? p.L - p.T + r0 + nq : p.L;  // keys the last query sees
  std::fill(mx, mx + nq, kNegInf);
  std::fill(sum, sum + nq, 0.0f);
  for (int64_t c0 = 0; c0 < visible; c0 += kBlockKV) {
    const int64_t nk = std::min(kBlockKV, visible - c0);
    gemm("T", nq, nk, p.D, q, p.qs[2], k + c0 * p.ks[2], p.ks[2], 0.0f, S, kBlockKV);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t r = r0 + i;
      float* s = S + i * kBlockKV;
      const int64_t seen = p.causal ? std::min(nk, p.L - p.T + r + 1 - c0) : nk;
      float row_max = kNegInf;
      if (seen > 0) row_max = bias_row(p, h, r, c0, seen, s, row_max);
      const float new_max = std::max(mx[i], row_max);
      const float row_sum = seen > 0 ? exp_run(s, seen, new_max) : 0.0f;
      if (seen < nk) std::fill(s + std::max<int64_t>(seen, 0), s + nk, 0.0f);
      const float alpha = std::exp(mx[i] - new_max);  // 0 on the first tile (mx = -inf)
      sum[i] = sum[i] * alpha + row_sum;
      mx[i] = new_max;
      if (c0 > 0 && alpha != 1.0f) {
        float* o = out + i * p.D;
        for (int64_t d = 0; d < p.D; ++d) o[d] *= alpha;
      }
    }
    gemm("N", nq, p.D, nk, S, kBlockKV, v + c0 * p.vs[2], p.vs[2], c0 > 0 ? 1.0f : 0.0f, out,
         p.D);
  }
  for (int64_t i = 0; i < nq; ++i) {
    const float inv = 1.0f / sum[i];
    float* o = out + i * p.D;
    for (int64_t d = 0; d < p.D; ++d) o[d] *= inv;
  }
}

// Per query row and kink: the smallest |o| with ψ(|o|) · A_r > kink (psi ascending; M if none).
void thresholds(const float* psi, int64_t M, const float* inv_norm, const float* kinks, int64_t T,
                int64_t K, int32_t* thr) {
  at::parallel_for(0, T, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float a = inv_norm[r];
      for (int64_t k = 0; k < K; ++k) {
        const float* it = std::partition_point(
            psi, psi + M, [&](float g) { return !(g * a > kinks[k]); });
        thr[r * K + k] = static_cast<int32_t>(it - psi);
      }
    }
  });
}

void check_f32(const at::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat, "fire_attention: ", name,
              " must be a float32 CPU tensor, got ", t.scalar_type(), " on ", t.device());
  TORCH_CHECK(t.dim() == dim, "fire_attention: ", name, " must have ", dim, " dimensions, got ",
              t.dim());
}

// q (B, H, T, D); k, v (B, Hkv, L, D); psi (M,) = ψ(0 .. M-1) with M > max |o|; inv_norm (T,);
// kinks (K,) ascending; slopes, intercepts (H, K + 1). Returns (B, H, T, D).
at::Tensor fire_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& psi, const at::Tensor& inv_norm,
                          const at::Tensor& kinks, const at::Tensor& slopes,
                          const at::Tensor& intercepts, int64_t shift, bool causal,
                          double scale) {
  check_f32(q, "q", 4);
  check_f32(k, "k", 4);
  check_f32(v, "v", 4);
  for (const auto* t : {&psi, &inv_norm, &kinks}) check_f32(*t, "psi/inv_norm/kinks", 1);
  check_f32(slopes, "slopes", 2);
  check_f32(intercepts, "intercepts", 2);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), L = k.size(2), K = kinks.size(0), M = psi.size(0);
  TORCH_CHECK(k.size(0) == B && v.sizes() == k.sizes() && k.size(3) == D,
              "fire_attention: k and v must be (B, Hkv, L, D) matching q (B, H, T, D)");
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0, "fire_attention: ", H, " query heads are not a multiple of ",
              Hkv, " key heads");
  TORCH_CHECK(!causal || L >= T, "fire_attention: causal needs at least as many keys as queries");
  TORCH_CHECK(inv_norm.size(0) == T && slopes.size(0) == H && slopes.size(1) == K + 1 &&
                  intercepts.sizes() == slopes.sizes(),
              "fire_attention: inv_norm (T,), slopes and intercepts (H, K + 1) expected");
  const int64_t max_abs = std::max(std::abs(shift + T - 1), std::abs(shift - (L - 1)));
  TORCH_CHECK(M > max_abs, "fire_attention: psi covers |o| < ", M, ", offsets reach ", max_abs);
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1,
              "fire_attention: unit stride in the feature dimension expected");
  auto out = at::empty({B, H, T, D}, q.options());
  if (B * H * T == 0 || L == 0) return out.zero_();
  const auto psi_c = psi.contiguous(), norm_c = inv_norm.contiguous(), kinks_c = kinks.contiguous();
  const auto sl = slopes.contiguous(), ic = intercepts.contiguous();
  // g[u] = ψ(|o|) for u = c - r + T - 1, i.e. o = shift + T - 1 - u: one contiguous run per row
  std::vector<float> g(T + L - 1);
  const float* ps = psi_c.data_ptr<float>();
  for (int64_t u = 0; u < T + L - 1; ++u) g[u] = ps[std::abs(shift + T - 1 - u)];
  std::vector<int32_t> thr(std::max<int64_t>(T * K, 1));
  thresholds(ps, M, norm_c.data_ptr<float>(), kinks_c.data_ptr<float>(), T, K, thr.data());
  Problem p{q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(),
            B, H, Hkv, T, L, D, K,
            {q.stride(0), q.stride(1), q.stride(2)}, {k.stride(0), k.stride(1), k.stride(2)},
            {v.stride(0), v.stride(1), v.stride(2)},
            shift, causal, static_cast<float>(scale), g.data(), norm_c.data_ptr<float>(),
            thr.data(), sl.data_ptr<float>(), ic.data_ptr<float>()};
  const int64_t qblocks = (T + kBlockQ - 1) / kBlockQ;
  at::parallel_for(0, B * H * qblocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> S(kBlockQ * kBlockKV), mx(kBlockQ), sum(kBlockQ);
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bh = w / qblocks, r0 = (w % qblocks) * kBlockQ;
      attend_block(p, bh / H, bh % H, r0, S.data(), mx.data(), sum.data());
    }
  });
  return out;
}

// The ISA the vector loops were built for: "avx512", "avx2", "neon" or "scalar".
std::string isa() { return V::kIsa; }

}  // namespace

TORCH_LIBRARY(posenc_fire_attention_cpu, m) {
  m.def(
      "fire_attention(Tensor q, Tensor k, Tensor v, Tensor psi, Tensor inv_norm, Tensor kinks, "
      "Tensor slopes, Tensor intercepts, int shift, bool causal, float scale) -> Tensor");
  m.impl("fire_attention", c10::DispatchKey::CPU, &fire_attention);
  m.def("isa() -> str", &isa);
}
