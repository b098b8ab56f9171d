// RoPE on CPU in one pass: read x once, rotate in float32 registers, write once.
//
//   half layout (GPT-NeoX):        (a, b) = (x[i], x[i + P])
//   interleaved layout (GPT-J):    (a, b) = (x[2i], x[2i + 1])
//   a' = a cos θ_i - σ b sin θ_i,  b' = b cos θ_i + σ a sin θ_i     (σ = +1 forward, -1 backward)
//
// Su et al. 2021, RoFormer (arXiv:2104.09864). `out` may be `x` itself (in place): every
// iteration loads its pair before storing it, so exact aliasing is safe. Rows are
// (B, H, T) with arbitrary strides, the last dimension unit-stride; cos/sin are float32
// (..., T, P) tensors broadcast against x right-aligned (no copies). q and k go through one
// parallel region, in blocks of positions and heads (``plan_blocks``). Vector code for AVX-512,
// AVX2 and NEON through simd.h, scalar loops otherwise. Built on first use by
// posenc/kernels/rope_cpp.py.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "simd.h"

namespace {

namespace V = posenc_simd;

template <typename T>
inline float load(const T* p) { return static_cast<float>(*p); }
template <typename T>
inline void store(T* p, float v) { *p = static_cast<T>(v); }  // c10 types round to nearest even

#if POSENC_SIMD_AVX512 || POSENC_SIMD_AVX2
template <bool Stream, typename T>
inline void put(T* p, V::vf v) {
  if constexpr (Stream) V::stream(p, v);
  else V::store(p, v);
}
#elif POSENC_SIMD_NEON
template <bool Stream, typename T>
inline void put(T* p, V::vf v) { V::store(p, v); }
#endif

// Rows of nh heads at one position: x[g] (2P,) -> out[g] (2P,) for g < nh, angles from c, s
// (P,), each table vector loaded once for all nh rows; then `tail` features copied. Backward
// rotates by -θ; Stream: non-temporal vector stores (only when every store is aligned). Vector
// loops of V::kLanes (0 without a vector ISA: scalar only), then scalar pairs.
template <typename T, bool Interleaved, bool Backward, bool Stream>
__attribute__((always_inline)) inline void rope_rows(const T* const* x, T* const* out, int nh,
                                                     const float* c, const float* s, int64_t P,
                                                     int64_t tail) {
  constexpr float sign = Backward ? -1.0f : 1.0f;
  int64_t i = 0;
  if constexpr (Interleaved) {
#if POSENC_SIMD_AVX512 || POSENC_SIMD_AVX2 || POSENC_SIMD_NEON
    constexpr int64_t L = V::kLanes;
    // kLanes / 2 pairs per vector: their angles duplicated into both lanes of the pair; the
    // swapped pair (b, a) times (-σ s, σ s)
    alignas(64) float sg_lanes[L];
    for (int64_t l = 0; l < L; ++l) sg_lanes[l] = l % 2 ? sign : -sign;
    const V::vf sg = V::load(sg_lanes);
    for (; i + L <= P; i += L) {  // L pairs: one line (``simd.h``: its lanes' order)
      V::vf c0, c1, s0, s1;
      V::dup_line<T>(V::load(c + i), &c0, &c1);
      V::dup_line<T>(V::load(s + i), &s0, &s1);
      s0 = V::mul(s0, sg);
      s1 = V::mul(s1, sg);
      for (int g = 0; g < nh; ++g) {
        V::vf v0, v1;
        V::load_line(x[g] + 2 * i, &v0, &v1);
        const V::vf y0 = V::fmadd(v0, c0, V::mul(V::swap_pairs(v0), s0));
        const V::vf y1 = V::fmadd(v1, c1, V::mul(V::swap_pairs(v1), s1));
        V::store_line<Stream>(out[g] + 2 * i, y0, y1);
      }
    }
    for (; i + L / 2 <= P; i += L / 2) {
      const V::vf cc = V::dup_lo(V::load_half(c + i));
      const V::vf ss = V::mul(V::dup_lo(V::load_half(s + i)), sg);
      for (int g = 0; g < nh; ++g) {
        const V::vf v = V::load(x[g] + 2 * i);
        put<Stream>(out[g] + 2 * i, V::fmadd(v, cc, V::mul(V::swap_pairs(v), ss)));
      }
    }
#endif
    for (; i < P; ++i) {
      const float cc = c[i], ss = sign * s[i];
      for (int g = 0; g < nh; ++g) {
        const float a = load(x[g] + 2 * i), b = load(x[g] + 2 * i + 1);
        store(out[g] + 2 * i, a * cc - b * ss);
        store(out[g] + 2 * i + 1, b * cc + a * ss);
      }
    }
  } else {
#if POSENC_SIMD_AVX512 || POSENC_SIMD_AVX2 || POSENC_SIMD_NEON
    constexpr int64_t L = V::kLanes;
    // a' = a c - σ b s, b' = b c + σ a s
    const auto rot = [](V::vf a, V::vf b, V::vf cc, V::vf ss, V::vf* a2, V::vf* b2) {
      if constexpr (Backward) {
        *a2 = V::fmadd(b, ss, V::mul(a, cc));
        *b2 = V::fnmadd(a, ss, V::mul(b, cc));
      } else {
        *a2 = V::fnmadd(b, ss, V::mul(a, cc));
        *b2 = V::fmadd(a, ss, V::mul(b, cc));
      }
    };
    for (; i + 2 * L <= P; i += 2 * L) {  // 2L pairs: one line per half (``simd.h``)
      V::vf c0, c1, s0, s1;
      V::order_line<T>(V::load(c + i), V::load(c + i + L), &c0, &c1);
      V::order_line<T>(V::load(s + i), V::load(s + i + L), &s0, &s1);
      for (int g = 0; g < nh; ++g) {
        V::vf xa0, xa1, xb0, xb1, a0, a1, b0, b1;
        V::load_line(x[g] + i, &xa0, &xa1);
        V::load_line(x[g] + i + P, &xb0, &xb1);
        rot(xa0, xb0, c0, s0, &a0, &b0);
        rot(xa1, xb1, c1, s1, &a1, &b1);
        V::store_line<Stream>(out[g] + i, a0, a1);
        V::store_line<Stream>(out[g] + i + P, b0, b1);
      }
    }
    for (; i + L <= P; i += L) {
      const V::vf cc = V::load(c + i), ss = V::load(s + i);
      for (int g = 0; g < nh; ++g) {
        V::vf a2, b2;
        rot(V::load(x[g] + i), V::load(x[g] + i + P), cc, ss, &a2, &b2);
        put<Stream>(out[g] + i, a2);
        put<Stream>(out[g] + i + P, b2);
      }
    }
#endif
    for (; i < P; ++i) {
      const float cc = c[i], ss = sign * s[i];
      for (int g = 0; g < nh; ++g) {
        const float a = load(x[g] + i), b = load(x[g] + i + P);
        store(out[g] + i, a * cc - b * ss);
        store(out[g] + i + P, b * cc + a * ss);
      }
    }
  }
  if (tail > 0)
    for (int g = 0; g < nh; ++g)
      if (out[g] != x[g]) std::memcpy(out[g] + 2 * P, x[g] + 2 * P, tail * sizeof(T));
}

struct Job {
  const void* x;
  void* out;
  const float* c;
  const float* s;
  int64_t B, H, T, P, tail;
  int64_t TB, G, blocks;  // positions and heads per block (``plan_blocks``); blocks per job
  int64_t xs[3], os[3], cs[3], ss[3];  // strides of the (B, H, T) dimensions
};

// Blocks: G heads of one batch row over TB positions. The G heads are rotated side by side,
// position by position, when they share cos/sin (G = 4; else 1): each table vector is loaded
// once for all of them. TB positions hold up to 1 MiB of tables (whole heads up to T * P = 128
// Ki pairs), so each head's rows are read in one long run, which keeps the prefetcher going.
// Against the two plans before it (outputs under 16 MiB: 16 KiB of tables, every head inside
// the block, head after head; larger: one head per block, 1 MiB), the same kernel built both
// ways and timed interleaved in one process on this project's 2-core EPYC (medians, as a
// multiple of the clone or copy floor timed beside them; one-off timings, not the benchmark):
// - out of place (4, 8, 1024, 64) bf16 1.50-1.62 -> 1.12-1.27, (1, 8, 8192, 64) fp32 1.00 ->
//   0.85, (1, 32, 2048, 128) bf16 1.00-1.08 -> 0.87-0.93; (1, 32, 2048, 128) fp32 and
//   (1, 32, 512, 128) bf16 equal;
// - in place (1, 32, 2048, 128) bf16 979 -> 448 µs, (1, 8, 8192, 64) fp32 604 -> 349 µs,
//   (4, 8, 1024, 64) fp32 245 -> 113 µs;
// - groups of 2 gained less; of 8, out of place (1, 32, 2048, 128) bf16 took 1.10x the clone
//   (0.87 with 4); groups of 4 in 16 KiB blocks, 1.33x at (4, 8, 1024, 64) bf16.
constexpr int64_t kGroup = 4;
constexpr int64_t kTableBytes = 1024 * 1024;

// Blocks [begin, end) of one job: for each block, its positions in order, G heads at each.
template <typename T, bool Interleaved, bool Backward, bool Stream>
void run_blocks(const Job& j, int64_t begin, int64_t end) {
  const T* x = static_cast<const T*>(j.x);
  T* out = static_cast<T*>(j.out);
  const int64_t tblocks = (j.T + j.TB - 1) / j.TB, hblocks = (j.H + j.G - 1) / j.G;
  const T* xr[kGroup];
  T* orow[kGroup];
  for (int64_t u = begin; u < end; ++u) {  // u = (b, position block, head group), groups fastest
    const int64_t h0 = (u % hblocks) * j.G, v = u / hblocks;
    const int64_t b = v / tblocks, t0 = (v % tblocks) * j.TB, t1 = std::min(j.T, t0 + j.TB);
    const int nh = static_cast<int>(std::min(j.G, j.H - h0));
    for (int g = 0; g < nh; ++g) {
      xr[g] = x + b * j.xs[0] + (h0 + g) * j.xs[1] + t0 * j.xs[2];
      orow[g] = out + b * j.os[0] + (h0 + g) * j.os[1] + t0 * j.os[2];
    }
    const float* cr = j.c + b * j.cs[0] + h0 * j.cs[1] + t0 * j.cs[2];  // the group's own
    const float* sr = j.s + b * j.ss[0] + h0 * j.ss[1] + t0 * j.ss[2];  // (G > 1: shared)
    for (int64_t t = t0; t < t1; ++t) {
      rope_rows<T, Interleaved, Backward, Stream>(xr, orow, nh, cr, sr, j.P, j.tail);
      for (int g = 0; g < nh; ++g) {
        xr[g] += j.xs[2];
        orow[g] += j.os[2];
      }
      cr += j.cs[2];
      sr += j.ss[2];
    }
  }
}

template <typename T, bool Interleaved, bool Backward, bool Stream>
void run_all(const std::vector<Job>& jobs, int64_t total) {
  const Job& j0 = jobs[0];
  // a block holds min(T, TB) positions: a decode step (T = 1) runs on the calling thread
  const int64_t rows = std::min(j0.H, j0.G) * std::min(j0.T, j0.TB);
  const int64_t pairs_per_block = std::max<int64_t>(1, rows * j0.P);
  const int64_t grain = std::max<int64_t>(1, 16384 / pairs_per_block);
  at::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    int64_t base = 0;
    for (const Job& j : jobs) {
      const int64_t lo = std::max(begin, base) - base, hi = std::min(end, base + j.blocks) - base;
      if (lo < hi) run_blocks<T, Interleaved, Backward, Stream>(j, lo, hi);
      base += j.blocks;
    }
    if constexpr (Stream) V::stream_fence();  // order the streamed stores before the join
  });
}

// Outputs of at least 16 MiB (all jobs together) are streamed past the cache when every vector
// store is aligned, on Intel CPUs: reading each line for ownership before overwriting it
// doubles the write traffic (``posenc bench rope``: the fast path against its clone floor).
// Smaller outputs stay in the cache that the next reader (and the clone floor) would use: at
// 8 MiB in all, the rope suite measured streaming slower than cached stores. Not for outputs
// of 32 MiB or more each: glibc maps those fresh, the page faults leave zeroed lines in the
// cache, and streaming over them was slower in one-off timings on this machine. Not on AMD:
// on a Zen 3 EPYC (AVX2) the same kernel built with streaming took 3.0x the clone floor at
// (1, 32, 2048, 128) bf16 and 1.36x at (4, 8, 1024, 64) fp32, against 0.89x and 0.79x with
// cached stores (interleaved, one process; issue 40). On the Zen 4 EPYC (AVX-512)
// out of place took 4.2x its own in-place time at (1, 32, 2048, 128) bf16 (streamed), against
// 1.1-1.2x at the bf16 shapes that were not (and 1.2x at (4, 8, 1024, 64) fp32, streamed).
constexpr int64_t kStreamBytes = int64_t{16} << 20;
constexpr int64_t kFreshMapBytes = int64_t{32} << 20;

// Whether non-temporal stores may pay on this CPU: Intel's (see above).
bool stream_vendor() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
#else
  return true;
#endif
}

// Rotated bytes each job writes (tails, copied through, not counted).
template <typename T>
int64_t out_bytes(const Job& j) {
  return j.B * j.H * j.T * 2 * j.P * static_cast<int64_t>(sizeof(T));
}

// Whether the outputs (``bytes`` in all) take non-temporal stores.
template <typename T>
bool streamable(const std::vector<Job>& jobs, bool interleaved, int64_t bytes) {
  if constexpr (!V::kCanStream) {
    (void)jobs;
    (void)interleaved;
    (void)bytes;
    return false;
  } else {
    // Every vector store must be aligned to its width: a whole vector register (``store_line``;
    // float32 always), or half of one for the single stores of 16-bit types. Rows start
    // aligned; in the half layout the second half's stores are aligned only when P is a
    // multiple of 2 kLanes (16-bit) or kLanes (float32).
    constexpr int64_t align = V::kLanes * 4;
    constexpr int64_t half_step = sizeof(T) == 4 ? V::kLanes : 2 * V::kLanes;
    if (bytes < kStreamBytes || !stream_vendor()) return false;
    for (const Job& j : jobs) {
      if (j.out == j.x || j.tail != 0) return false;
      const bool aligned_halves = j.P % half_step == 0 || j.P == V::kLanes;
      if (interleaved ? j.P % (V::kLanes / 2) != 0 : !aligned_halves) return false;
      if (reinterpret_cast<std::uintptr_t>(j.out) % align != 0) return false;
      for (int d = 0; d < 3; ++d)
        if ((j.os[d] * static_cast<int64_t>(sizeof(T))) % align != 0) return false;
      if (out_bytes<T>(j) >= kFreshMapBytes) return false;
    }
    return true;
  }
}

template <typename T, bool Stream>
void dispatch_dir(const std::vector<Job>& jobs, int64_t total, bool backward, bool interleaved) {
  if (interleaved) {
    if (backward) run_all<T, true, true, Stream>(jobs, total);
    else run_all<T, true, false, Stream>(jobs, total);
  } else {
    if (backward) run_all<T, false, true, Stream>(jobs, total);
    else run_all<T, false, false, Stream>(jobs, total);
  }
}

// Cuts every job into blocks; returns the blocks of all jobs.
int64_t plan_blocks(std::vector<Job>& jobs) {
  int64_t total = 0;
  for (Job& j : jobs) {
    j.TB = std::max<int64_t>(1, kTableBytes / (8 * std::max<int64_t>(1, j.P)));
    j.G = j.cs[1] == 0 && j.ss[1] == 0 ? kGroup : 1;  // tables shared by the heads
    const int64_t tblocks = (j.T + j.TB - 1) / j.TB, hblocks = (j.H + j.G - 1) / j.G;
    j.blocks = j.H == 0 || j.T == 0 ? 0 : j.B * tblocks * hblocks;
    total += j.blocks;
  }
  return total;
}

template <typename T>
void dispatch(std::vector<Job>& jobs, bool backward, bool interleaved) {
  int64_t bytes = 0;
  for (const Job& j : jobs) bytes += out_bytes<T>(j);
  const bool stream = streamable<T>(jobs, interleaved, bytes);
  const int64_t total = plan_blocks(jobs);
  if (total == 0) return;
  if (stream) dispatch_dir<T, true>(jobs, total, backward, interleaved);
  else dispatch_dir<T, false>(jobs, total, backward, interleaved);
}

// Strides of t's dimensions right-aligned to `ndim` (B, H, T, feature) slots; a dimension that
// t lacks or broadcasts (size 1 against a larger x) gets stride 0.
std::array<int64_t, 4> aligned_strides(const at::Tensor& t, at::IntArrayRef x_sizes) {
  std::array<int64_t, 4> st{0, 0, 0, 0};
  const int64_t off = 4 - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t xd = d + off - (4 - static_cast<int64_t>(x_sizes.size()));
    const bool broadcast = t.size(d) == 1 && xd >= 0 && x_sizes[xd] != 1;
    st[d + off] = broadcast ? 0 : t.stride(d);
  }
  return st;
}

Job make_job(const at::Tensor& x, const at::Tensor& o, const at::Tensor& c, const at::Tensor& s,
             at::ScalarType dtype) {
  TORCH_CHECK(x.dim() >= 2 && x.dim() <= 4, "rope: x must have 2 to 4 dimensions (..., T, D), got ",
              x.dim());
  TORCH_CHECK(c.dim() >= 1 && c.dim() <= x.dim() && c.sizes() == s.sizes(),
              "rope: cos and sin must share one shape (..., T, P) with at most x's dimensions");
  TORCH_CHECK(x.device().is_cpu() && c.device().is_cpu() && s.device().is_cpu(),
              "rope: CPU tensors expected");
  TORCH_CHECK(x.scalar_type() == dtype && o.scalar_type() == dtype,
              "rope: every x must share one dtype");
  TORCH_CHECK(c.scalar_type() == at::kFloat && s.scalar_type() == at::kFloat,
              "rope: float32 cos/sin expected");
  TORCH_CHECK(x.stride(-1) == 1 && o.stride(-1) == 1 && c.stride(-1) == 1 && s.stride(-1) == 1,
              "rope: unit stride in the last dimension expected");
  const int64_t P = c.size(-1);
  TORCH_CHECK(2 * P <= x.size(-1), "rope: cos/sin have ", P, " pairs but x has ", x.size(-1),
              " features");
  for (int64_t d = 1; d < c.dim(); ++d) {
    const int64_t cs = c.size(-1 - d), xs = x.size(-1 - d);
    TORCH_CHECK(cs == xs || cs == 1, "rope: cos/sin dimension ", -1 - d, " has size ", cs,
                ", x has ", xs);
  }
  std::array<int64_t, 4> xsz{1, 1, 1, 1};
  for (int64_t d = 0; d < x.dim(); ++d) xsz[d + 4 - x.dim()] = x.size(d);
  std::array<int64_t, 4> xst{0, 0, 0, 0}, ost{0, 0, 0, 0};
  for (int64_t d = 0; d < x.dim(); ++d) {
    xst[d + 4 - x.dim()] = x.stride(d);
    ost[d + 4 - x.dim()] = o.stride(d);
  }
  const auto cst = aligned_strides(c, x.sizes()), sst = aligned_strides(s, x.sizes());
  Job j{x.data_ptr(), o.data_ptr(), c.data_ptr<float>(), s.data_ptr<float>(), xsz[0], xsz[1],
        xsz[2], P, x.size(-1) - 2 * P, 1, 1, 0, {}, {}, {}, {}};  // blocks: ``plan_blocks``
  for (int d = 0; d < 3; ++d) {
    j.xs[d] = xst[d]; j.os[d] = ost[d]; j.cs[d] = cst[d]; j.ss[d] = sst[d];
  }
  return j;
}

void launch(std::vector<Job>& jobs, at::ScalarType dtype, double sign, bool interleaved) {
  TORCH_CHECK(sign == 1.0 || sign == -1.0, "rope: sign must be +1 (forward) or -1 (backward)");
  const bool bwd = sign < 0;
  switch (dtype) {
    case at::kFloat: dispatch<float>(jobs, bwd, interleaved); break;
    case at::kBFloat16: dispatch<c10::BFloat16>(jobs, bwd, interleaved); break;
    case at::kHalf: dispatch<c10::Half>(jobs, bwd, interleaved); break;
    default: TORCH_CHECK(false, "rope: float32, bfloat16 or float16 expected, got ", dtype);
  }
}

// Fresh output pages in huge pages where the system grants them on request (Linux THP
// "madvise" mode; a no-op under "always" or "never"). An output of 32 MiB or more (and, once
// glibc trims its heap, smaller ones too) is new memory every call: each 4 KiB page faults when
// first written, and the kernel zeroes it. At (1, 32, 2048, 128) fp32 that was 16,386 faults
// and 48 ms of system time per call against a 4 ms rotation in place (getrusage, 2-core EPYC
// VM, issue 40). Only when the first whole 2 MiB page of the output is not resident yet
// (``mincore``: memory glibc just mapped or grew): recycled heap memory is left as it is.
// Measured at that shape, interleaved in one process (load 12): 1,056 faults and 58 ms a call
// with this advice, 16,386 and 200 ms without, and 16,386 and 175 ms prefaulting the pages
// instead (MADV_POPULATE_WRITE): the cost is the 4 KiB pages themselves, not the traps.
constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
constexpr int64_t kAdviseBytes = int64_t{8} << 20;

void advise_fresh(const at::Tensor& out) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const int64_t nbytes = out.numel() * static_cast<int64_t>(out.element_size());
  if (nbytes < kAdviseBytes) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(out.data_ptr());
  const std::uintptr_t lo = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const std::uintptr_t hi = (begin + static_cast<std::uintptr_t>(nbytes)) & ~(kHugePage - 1);
  if (hi <= lo) return;
  unsigned char resident = 0;
  static const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || mincore(reinterpret_cast<void*>(lo), static_cast<size_t>(page), &resident) != 0 ||
      (resident & 1))
    return;
  (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);  // advice: failure is fine
#else
  (void)out;
#endif
}

void check_lists(at::TensorList xs, at::TensorList cos, at::TensorList sin) {
  TORCH_CHECK(!xs.empty() && xs.size() == cos.size() && xs.size() == sin.size(),
              "rope: non-empty lists of equal length expected");
}

// Rotated copies of each x (..., T, D) by its cos/sin (..., T, P), broadcast right-aligned;
// features past 2P are copied through.
std::vector<at::Tensor> rope(at::TensorList xs, at::TensorList cos, at::TensorList sin,
                             double sign, bool interleaved) {
  check_lists(xs, cos, sin);
  std::vector<at::Tensor> outs;
  std::vector<Job> jobs;
  for (size_t n = 0; n < xs.size(); ++n) {
    outs.push_back(at::empty(xs[n].sizes(), xs[n].options()));
    advise_fresh(outs.back());
    jobs.push_back(make_job(xs[n], outs.back(), cos[n], sin[n], xs[0].scalar_type()));
  }
  launch(jobs, xs[0].scalar_type(), sign, interleaved);
  return outs;
}

// The ISA the vector loops were built for: "avx512", "avx2", "neon" or "scalar".
std::string isa() { return V::kIsa; }

// The same rotation written into each x (inference).
void rope_(at::TensorList xs, at::TensorList cos, at::TensorList sin, double sign,
           bool interleaved) {
  check_lists(xs, cos, sin);
  std::vector<Job> jobs;
  for (size_t n = 0; n < xs.size(); ++n)
    jobs.push_back(make_job(xs[n], xs[n], cos[n], sin[n], xs[0].scalar_type()));
  launch(jobs, xs[0].scalar_type(), sign, interleaved);
}

}  // namespace

TORCH_LIBRARY(posenc_rope_cpu, m) {
  m.def("rope(Tensor[] xs, Tensor[] cos, Tensor[] sin, float sign, bool interleaved) -> Tensor[]");
  m.def("rope_(Tensor(a!)[] xs, Tensor[] cos, Tensor[] sin, float sign, bool interleaved) -> ()");
  m.def("isa() -> str", &isa);
  m.impl("rope", c10::DispatchKey::CPU, &rope);
  m.impl("rope_", c10::DispatchKey::CPU, &rope_);
}
