// One float32 vector type for posenc's CPU kernels, whatever the CPU: AVX-512 (16 lanes),
// AVX2 with FMA and F16C (8 lanes), NEON on AArch64 (4 lanes), or none (kLanes = 0: the
// kernels' scalar loops, which the compiler may still vectorise). The ISA is the one the build
// targets (posenc/kernels/native.py picks -march from ATEN_CPU_CAPABILITY), so a kernel built
// with ATEN_CPU_CAPABILITY=avx2 or =default runs these paths on any newer CPU too.
//
// Loads widen bfloat16/float16 to float32; stores round to nearest even and keep NaN (as
// c10::BFloat16 and c10::Half do), so every ISA gives the scalar path's bits. Stores take
// results of arithmetic (quiet NaNs: the AVX2 bfloat16 store relies on it).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#define POSENC_SIMD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define POSENC_SIMD_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define POSENC_SIMD_NEON 1
#endif

namespace posenc_simd {

#if defined(POSENC_SIMD_AVX512)
using vf = __m512;
constexpr int64_t kLanes = 16;
constexpr const char* kIsa = "avx512";
inline vf set1(float x) { return _mm512_set1_ps(x); }
inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline vf load(const c10::BFloat16* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
inline vf load(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline vf load_half(const float* p) {  // kLanes / 2 floats in the low lanes
  return _mm512_castps256_ps512(_mm256_loadu_ps(p));
}
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }    // a b + c
inline vf fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm512_min_ps(a, b); }
inline float reduce_max(vf a) { return _mm512_reduce_max_ps(a); }
inline float reduce_add(vf a) { return _mm512_reduce_add_ps(a); }
inline vf swap_pairs(vf v) { return _mm512_permute_ps(v, 0xB1); }  // (b, a) in each pair
inline vf dup_lo(vf v) {  // (v0, v0, v1, v1, ..., v7, v7)
  return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), v);
}
inline vf dup_hi(vf v) {  // (v8, v8, ..., v15, v15)
  return _mm512_permutexvar_ps(
      _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8), v);
}
inline vf round_nearest(vf v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline vf exp2_int(vf n) {  // 2^n for whole n in [-126, 127]
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
inline vf select_below(vf x, float lo, vf if_below, vf other) {  // x < lo ? if_below : other
  return _mm512_mask_mov_ps(other, _mm512_cmp_ps_mask(x, _mm512_set1_ps(lo), _CMP_LT_OQ),
                            if_below);
}
inline vf keep_nan(vf x, vf y) {  // x where x is NaN, else y
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
// kLanes floats rounded to 16-bit values (bits), kLanes of them.
inline __m256i pack(vf v, const c10::BFloat16*) {
#if defined(__AVX512BF16__)
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
#else
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, lsb), _mm512_set1_epi32(0x7FFF));
  r = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0)));
#endif
}
inline __m256i pack(vf v, const c10::Half*) {
  return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
template <typename T>
inline void store(T* p, vf v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pack(v, p));
}
inline void stream(float* p, vf v) { _mm512_stream_ps(p, v); }
template <typename T>
inline void stream(T* p, vf v) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), pack(v, p));
}
// Two vectors into 2 kLanes consecutive elements; for 16-bit types one store of a whole vector
// register (a 64-byte line here).
template <bool Stream>
inline void store2(float* p, vf lo, vf hi) {
  if constexpr (Stream) { stream(p, lo); stream(p + kLanes, hi); }
  else { store(p, lo); store(p + kLanes, hi); }
}
template <bool Stream, typename T>
inline void store2(T* p, vf lo, vf hi) {
#if defined(__AVX512BF16__)
  const __m512i v = std::is_same_v<T, c10::BFloat16>
      ? reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo))
      : _mm512_inserti64x4(_mm512_castsi256_si512(pack(lo, p)), pack(hi, p), 1);
#else
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(pack(lo, p)), pack(hi, p), 1);
#endif
  if constexpr (Stream) _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
  else _mm512_storeu_si512(p, v);
}
inline void stream_fence() { _mm_sfence(); }
constexpr bool kCanStream = true;

#elif defined(POSENC_SIMD_AVX2)
using vf = __m256;
constexpr int64_t kLanes = 8;
constexpr const char* kIsa = "avx2";
inline vf set1(float x) { return _mm256_set1_ps(x); }
inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline vf load(const c10::BFloat16* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline vf load(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline vf load_half(const float* p) { return _mm256_castps128_ps256(_mm_loadu_ps(p)); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm256_min_ps(a, b); }
inline float reduce_max(vf a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline float reduce_add(vf a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline vf swap_pairs(vf v) { return _mm256_permute_ps(v, 0xB1); }
inline vf dup_lo(vf v) {
  return _mm256_permutevar8x32_ps(v, _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0));
}
inline vf dup_hi(vf v) {
  return _mm256_permutevar8x32_ps(v, _mm256_set_epi32(7, 7, 6, 6, 5, 5, 4, 4));
}
inline vf round_nearest(vf v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline vf exp2_int(vf n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
inline vf select_below(vf x, float lo, vf if_below, vf other) {
  return _mm256_blendv_ps(other, if_below, _mm256_cmp_ps(x, _mm256_set1_ps(lo), _CMP_LT_OQ));
}
inline vf keep_nan(vf x, vf y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
// bfloat16 bits of each lane (nearest even) in 32-bit lanes. A NaN stays NaN without a
// separate test: values reaching a store come out of arithmetic, whose NaNs are quiet (bit 22
// set), and rounding adds at most 0x8000, which cannot clear the mantissa's upper bits.
inline __m256i bf16_bits(vf v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, lsb), _mm256_set1_epi32(0x7FFF)), 16);
}
inline __m128i pack(vf v, const c10::BFloat16*) {
  const __m256i r = bf16_bits(v);  // packus works per 128-bit lane: gather lanes 0-3, 4-7
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
inline __m128i pack(vf v, const c10::Half*) {
  return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
template <typename T>
inline void store(T* p, vf v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), pack(v, p));
}
inline void stream(float* p, vf v) { _mm256_stream_ps(p, v); }
template <typename T>
inline void stream(T* p, vf v) {
  _mm_stream_si128(reinterpret_cast<__m128i*>(p), pack(v, p));
}
template <bool Stream>
inline void store2(float* p, vf lo, vf hi) {
  if constexpr (Stream) { stream(p, lo); stream(p + kLanes, hi); }
  else { store(p, lo); store(p + kLanes, hi); }
}
template <bool Stream, typename T>
inline void store2(T* p, vf lo, vf hi) {
  __m256i v;
  if constexpr (std::is_same_v<T, c10::BFloat16>) {  // one pack for both: lanes lo0-3 hi0-3 lo4-7 hi4-7
    v = _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_bits(lo), bf16_bits(hi)), 0xD8);
  } else {
    v = _mm256_set_m128i(pack(hi, p), pack(lo, p));
  }
  if constexpr (Stream) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
inline void stream_fence() { _mm_sfence(); }
// Not used with AVX2: on this project's AVX2 machine (AMD EPYC, no AVX-512) streaming the
// output of (1, 8, 8192, 64) bf16 took 3.7x the clone floor against 1.24x with cached stores
// (1.79x against 1.19x at (1, 32, 2048, 128)); the AVX-512 machine measured the opposite.
constexpr bool kCanStream = false;

#elif defined(POSENC_SIMD_NEON)
using vf = float32x4_t;
constexpr int64_t kLanes = 4;
constexpr const char* kIsa = "neon";
inline vf set1(float x) { return vdupq_n_f32(x); }
inline vf load(const float* p) { return vld1q_f32(p); }
inline vf load(const c10::BFloat16* p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)), 16));
}
inline vf load(const c10::Half* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
}
inline vf load_half(const float* p) { return vcombine_f32(vld1_f32(p), vdup_n_f32(0.0f)); }
inline vf add(vf a, vf b) { return vaddq_f32(a, b); }
inline vf sub(vf a, vf b) { return vsubq_f32(a, b); }
inline vf mul(vf a, vf b) { return vmulq_f32(a, b); }
inline vf fmadd(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
inline vf fnmadd(vf a, vf b, vf c) { return vfmsq_f32(c, a, b); }
inline vf max(vf a, vf b) { return vmaxq_f32(a, b); }
inline vf min(vf a, vf b) { return vminq_f32(a, b); }
inline float reduce_max(vf a) { return vmaxvq_f32(a); }
inline float reduce_add(vf a) { return vaddvq_f32(a); }
inline vf swap_pairs(vf v) { return vrev64q_f32(v); }
inline vf dup_lo(vf v) { return vzip1q_f32(v, v); }
inline vf dup_hi(vf v) { return vzip2q_f32(v, v); }
inline vf round_nearest(vf v) { return vrndnq_f32(v); }
inline vf exp2_int(vf n) {
  const int32x4_t e = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127));
  return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
inline vf select_below(vf x, float lo, vf if_below, vf other) {
  return vbslq_f32(vcltq_f32(x, vdupq_n_f32(lo)), if_below, other);
}
inline vf keep_nan(vf x, vf y) { return vbslq_f32(vceqq_f32(x, x), y, x); }
inline uint16x4_t pack(vf v, const c10::BFloat16*) {
  const uint32x4_t u = vreinterpretq_u32_f32(v);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  const uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, lsb), vdupq_n_u32(0x7FFF)), 16);
  return vmovn_u32(vbslq_u32(vceqq_f32(v, v), r, vdupq_n_u32(0x7FC0)));
}
inline uint16x4_t pack(vf v, const c10::Half*) {
  return vreinterpret_u16_f16(vcvt_f16_f32(v));
}
inline void store(float* p, vf v) { vst1q_f32(p, v); }
template <typename T>
inline void store(T* p, vf v) {
  vst1_u16(reinterpret_cast<uint16_t*>(p), pack(v, p));
}
template <bool Stream, typename T>
inline void store2(T* p, vf lo, vf hi) {  // no non-temporal stores: Stream is never set here
  store(p, lo);
  store(p + kLanes, hi);
}
inline void stream_fence() {}
constexpr bool kCanStream = false;

#else
constexpr int64_t kLanes = 0;  // no vector type: the kernels' scalar loops do all the work
constexpr const char* kIsa = "scalar";
inline void stream_fence() {}
constexpr bool kCanStream = false;
#endif

#if defined(POSENC_SIMD_AVX512) || defined(POSENC_SIMD_AVX2) || defined(POSENC_SIMD_NEON)
// A line: 2 kLanes consecutive elements of T held as two vectors, lo and hi, whose lanes may
// hold the elements in an order of the ISA's choosing (``load_line``; ``store_line`` writes
// them back in memory order). Elementwise arithmetic does not care; float32 tables are put
// in the same order by ``order_line`` (a line of them) or ``dup_line`` (kLanes angles, each
// for the two elements of its pair). Everywhere the order is memory order, but for bfloat16
// on AVX2: there a widening load costs a shift per vector on top of its shuffle and the
// narrowing store a cross-lane permute, so a line is read by one load and two word unpacks,
// lo = elements (0-3, 8-11), hi = (4-7, 12-15), whose inverse is one ``packus``.
#if defined(POSENC_SIMD_AVX2)
template <typename T>
constexpr bool kUnpackedLine = std::is_same_v<T, c10::BFloat16>;
#else
template <typename T>
constexpr bool kUnpackedLine = false;
#endif

template <typename T>
inline void load_line(const T* p, vf* lo, vf* hi) {
#if defined(POSENC_SIMD_AVX2)
  if constexpr (kUnpackedLine<T>) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i zero = _mm256_setzero_si256();  // bf16 bits into the upper half of each lane
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v));
    return;
  }
#endif
  *lo = load(p);
  *hi = load(p + kLanes);
}

template <bool Stream, typename T>
inline void store_line(T* p, vf lo, vf hi) {
#if defined(POSENC_SIMD_AVX2)
  if constexpr (kUnpackedLine<T>) {  // packus per 128-bit lane: (lo 0-3, hi 0-3 | lo 4-7, hi 4-7)
    const __m256i v = _mm256_packus_epi32(bf16_bits(lo), bf16_bits(hi));
    if constexpr (Stream) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    return;
  }
#endif
  store2<Stream>(p, lo, hi);
}

// A line of float32 (a: elements 0 to kLanes - 1, b: the rest) in ``load_line<T>``'s order.
template <typename T>
inline void order_line(vf a, vf b, vf* lo, vf* hi) {
#if defined(POSENC_SIMD_AVX2)
  if constexpr (kUnpackedLine<T>) {
    *lo = _mm256_permute2f128_ps(a, b, 0x20);  // (a 0-3, b 0-3) = elements (0-3, 8-11)
    *hi = _mm256_permute2f128_ps(a, b, 0x31);  // (a 4-7, b 4-7) = (4-7, 12-15)
    return;
  }
#endif
  *lo = a;
  *hi = b;
}

// kLanes pair angles v, each duplicated into both elements of its pair, for a line of T
// (interleaved pairs) in ``load_line<T>``'s order.
template <typename T>
inline void dup_line(vf v, vf* lo, vf* hi) {
#if defined(POSENC_SIMD_AVX2)
  if constexpr (kUnpackedLine<T>) {  // lo holds pairs (0, 1, 4, 5), hi (2, 3, 6, 7)
    *lo = _mm256_permutevar8x32_ps(v, _mm256_set_epi32(5, 5, 4, 4, 1, 1, 0, 0));
    *hi = _mm256_permutevar8x32_ps(v, _mm256_set_epi32(7, 7, 6, 6, 3, 3, 2, 2));
    return;
  }
#endif
  *lo = dup_lo(v);
  *hi = dup_hi(v);
}

// e^x per lane: 2^n p(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts), p the
// Cephes degree-6 polynomial (about 1 ulp). x below -87.3 (e^x under FLT_MIN, -inf included)
// gives 0, above ln(FLT_MAX) gives FLT_MAX-ish; NaN stays NaN.
inline vf exp(vf x) {
  const vf y = max(x, set1(-87.3f));
  const vf c = min(y, set1(88.3762626647949f));
  const vf n = round_nearest(mul(c, set1(1.44269504088896341f)));
  vf r = fnmadd(n, set1(0.693359375f), c);
  r = fnmadd(n, set1(-2.12194440e-4f), r);
  vf p = set1(1.9875691500e-4f);
  p = fmadd(p, r, set1(1.3981999507e-3f));
  p = fmadd(p, r, set1(8.3334519073e-3f));
  p = fmadd(p, r, set1(4.1665795894e-2f));
  p = fmadd(p, r, set1(1.6666665459e-1f));
  p = fmadd(p, r, set1(5.0000001201e-1f));
  p = fmadd(p, mul(r, r), add(r, set1(1.0f)));
  const vf e = mul(p, exp2_int(n));
  return keep_nan(x, select_below(x, -87.3f, set1(0.0f), e));
}
#endif

}  // namespace posenc_simd
