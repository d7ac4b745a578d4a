// einslice's max-plus product on the CPU: out[b, m, n] = max_k lhs[b, k, m] + rhs[b, k, n]
// (either side may also come as [b, m, k] / [b, n, k]: the attributes
// lhs_k_last and rhs_k_last).
//
// An XLA FFI handler, compiled on the user's machine on first use
// (einslice/_exec/_native.py) with -march=native, so its vectors are the
// machine's widest. Register-blocked as a float matmul is: a tile of kRows
// output rows by kVectors vectors of columns stays in registers while k runs,
// each step one broadcast, kVectors loads, and kRows * kVectors adds and maxes.
// XLA's elementwise fusions cannot keep such a tile in registers; this runs
// the 1024^2 product 2-3x faster than they do (benchmarks/results/maxplus.md).
//
// Semantics are the semiring's, exactly as einslice's XLA path computes them:
// -inf annihilates (-inf + inf is -inf, the semiring's zero) and NaN
// propagates. Blocks of operands without NaN or +inf (checked as they are
// packed) take the fast path, whose plain add and max give the same results.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;  // 32 registers: 6 x 4 accumulators
constexpr int kRows = 6;
constexpr int kVectors = 4;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;  // 16 registers: 6 x 2 accumulators
constexpr int kRows = 6;
constexpr int kVectors = 2;
#else
constexpr int kVectorBytes = 16;
constexpr int kRows = 4;
constexpr int kVectors = 2;
#endif

template <typename T>
struct Lanes;
template <>
struct Lanes<float> {
  typedef float V __attribute__((vector_size(kVectorBytes)));
  typedef float Unaligned __attribute__((vector_size(kVectorBytes), aligned(4)));
};
template <>
struct Lanes<double> {
  typedef double V __attribute__((vector_size(kVectorBytes)));
  typedef double Unaligned __attribute__((vector_size(kVectorBytes), aligned(8)));
};

template <typename T>
inline typename Lanes<T>::V Load(const T* p) {
  return *reinterpret_cast<const typename Lanes<T>::Unaligned*>(p);
}

template <typename T>
inline void Store(T* p, typename Lanes<T>::V v) {
  *reinterpret_cast<typename Lanes<T>::Unaligned*>(p) = v;
}

// x in every lane: a broadcast (`V{} + x` would add, to keep -0.0's sign).
template <typename T>
inline typename Lanes<T>::V Splat(T x) {
  typedef typename Lanes<T>::V V;
  typedef decltype(V{} < V{}) Index;  // integer lanes of the same width
  V v = V{};
  v[0] = x;
  return __builtin_shuffle(v, Index{});
}

// One output tile: rows [0, rows) of `out` (leading dimension ldo), columns
// [0, cols) with cols <= the tile's width. `lhs` points at column m0 of a
// [K, M] array (stride ldl); `panel` is the right side's packed [K, width].
template <typename T, int R, bool kSafe>
void Tile(const T* lhs, const T* panel, int64_t depth, T* out, int64_t ldo,
          int64_t cols, bool first) {
  using V = typename Lanes<T>::V;
  constexpr int kLanes = kVectorBytes / sizeof(T);
  constexpr int kWidth = kVectors * kLanes;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const V kZero = Splat<T>(-kInf);
  V acc[R][kVectors];
  for (int r = 0; r < R; ++r) {
    if (first || cols != kWidth) {
      for (int v = 0; v < kVectors; ++v) acc[r][v] = kZero;
      for (int64_t c = 0; !first && c < cols; ++c)
        acc[r][c / kLanes][c % kLanes] = out[r * ldo + c];
    } else {
      for (int v = 0; v < kVectors; ++v) acc[r][v] = Load(out + r * ldo + v * kLanes);
    }
  }
  for (int64_t k = 0; k < depth; ++k) {
    V b[kVectors];
    for (int v = 0; v < kVectors; ++v) b[v] = Load(panel + k * kWidth + v * kLanes);
    const T* a = lhs + k * kRows;
    for (int r = 0; r < R; ++r) {
      V ar = Splat(a[r]);
      for (int v = 0; v < kVectors; ++v) {
        V sum = ar + b[v];
        if constexpr (kSafe) {
          // -inf + inf is -inf (the zero annihilates); NaN, once reached, stays.
          sum = (ar == -kInf) & (b[v] == kInf) | (ar == kInf) & (b[v] == -kInf)
                    ? kZero
                    : sum;
          V& a_rv = acc[r][v];
          a_rv = (a_rv != a_rv) | (a_rv >= sum) ? a_rv : sum;
        } else {
          acc[r][v] = acc[r][v] > sum ? acc[r][v] : sum;
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    if (cols == kWidth) {
      for (int v = 0; v < kVectors; ++v) Store(out + r * ldo + v * kLanes, acc[r][v]);
    } else {
      for (int64_t c = 0; c < cols; ++c) out[r * ldo + c] = acc[r][c / kLanes][c % kLanes];
    }
  }
}

template <typename T, bool kSafe>
void Rows(int rows, const T* lhs, const T* panel, int64_t depth, T* out,
          int64_t ldo, int64_t cols, bool first) {
  switch (rows) {
#define EINSLICE_ROWS(R)                                                  \
  case R:                                                                 \
    if constexpr (R <= kRows)                                             \
      Tile<T, R, kSafe>(lhs, panel, depth, out, ldo, cols, first);          \
    break;
    EINSLICE_ROWS(1)
    EINSLICE_ROWS(2)
    EINSLICE_ROWS(3)
    EINSLICE_ROWS(4)
    EINSLICE_ROWS(5)
    EINSLICE_ROWS(6)
#undef EINSLICE_ROWS
  }
}

// Whether x[0, n) holds NaN or +inf (then the safe path runs), in vectors:
// a scalar loop took as long as a fifth of the product it guarded.
template <typename T>
bool NeedsSafe(const T* x, int64_t n) {
  using V = typename Lanes<T>::V;
  constexpr int kLanes = kVectorBytes / sizeof(T);
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const V inf = Splat<T>(kInf);
  decltype(V{} < V{}) bad{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V v = Load(x + i);
    bad |= (v != v) | (v == inf);
  }
  bool any = false;
  for (int j = 0; j < kLanes; ++j) any |= bad[j] != 0;
  for (; i < n; ++i) any |= (x[i] != x[i]) | (x[i] == kInf);
  return any;
}

// Runs work(item) for every item in [0, items): on the calling thread and on
// up to threads - 1 tasks of XLA's intra-op thread pool, whose threads are
// awake (a fresh std::thread took up to a millisecond to start here, as long
// as a 256 x 1024 x 256 product). Returns when every item is done; a task
// that starts after the last item was taken touches only the counters.
template <typename Work, typename Schedule>
void Share(int64_t items, int64_t threads, Schedule&& schedule, const Work& work) {
  struct Counters {
    std::atomic<int64_t> next{0}, done{0};
  };
  auto counters = std::make_shared<Counters>();
  const Work* shared = &work;
  auto run = [counters, items, shared]() {
    for (int64_t item; (item = counters->next.fetch_add(1)) < items;) {
      (*shared)(item);
      counters->done.fetch_add(1);
    }
  };
  for (int64_t t = 1; t < std::min(threads, items); ++t) schedule(run);
  run();
  while (counters->done.load() < items) std::this_thread::yield();
}

// Below this many pairs (m * n * k) one thread does it all.
constexpr int64_t kThreadedPairs = int64_t{1} << 21;
// Blocking, as a float matmul's (the sizes for float; double's take as many
// bytes): a work item is kBlockRows rows by kBlockPanels panels of the
// output; per block of kDepth contracted entries, its left rows are packed
// [tile][k][kRows] (96 KB, in L2) and its right panels [panel][k][width]
// (256 KB, in L2; one panel, 32 KB, in L1 while the tiles pass over it).
constexpr int64_t kBlockRows = 32 * kRows;
constexpr int64_t kBlockPanels = 8;
constexpr int64_t kDepthBytes = 512;

// Packing buffers kept between calls: a fresh one is fresh pages, whose
// first touch cost a third of a 256 x 1024 x 256 product's time.
template <typename T>
class Buffers {
 public:
  std::vector<T> Take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<T> buffer;
    if (!free_.empty()) {
      buffer = std::move(free_.back());
      free_.pop_back();
    }
    buffer.resize(std::max(buffer.size(), size));
    return buffer;
  }
  void Give(std::vector<T> buffer) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(buffer));
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<T>> free_;
};

// `lhs_k_last`: lhs is [batch, m, depth] (else [batch, depth, m]); likewise
// `rhs_k_last` for rhs: the caller passes each side as it lies, no transpose.
// `threads`: how many may share it; schedule(task) runs a task on another.
template <typename T, typename Schedule>
void MaxPlus(const T* lhs, const T* rhs, T* out, int64_t batch, int64_t depth,
             int64_t m, int64_t n, bool lhs_k_last, bool rhs_k_last,
             int64_t threads, Schedule&& schedule) {
  constexpr int kLanes = kVectorBytes / sizeof(T);
  constexpr int64_t kWidth = kVectors * kLanes;
  constexpr int64_t kDepth = kDepthBytes / sizeof(T);
  constexpr T kInf = std::numeric_limits<T>::infinity();
  if (batch == 0 || m == 0 || n == 0) return;
  if (depth == 0) {  // an empty max: the semiring's zero
    std::fill(out, out + batch * m * n, -kInf);
    return;
  }
  const int64_t panels = (n + kWidth - 1) / kWidth;
  const int64_t column_items = (panels + kBlockPanels - 1) / kBlockPanels;
  if (batch * m * n * depth < kThreadedPairs) threads = 1;
  // Rows per item: at most kBlockRows, as evenly split as the items can be
  // shared among the threads (a 256^2 product on two threads: items of 132
  // and 124 rows, not 192 and 64, which left one thread idle a third of it).
  const int64_t columns = batch * column_items;
  int64_t splits = (m + kBlockRows - 1) / kBlockRows;
  if (columns * splits < 8 * threads)
    while ((columns * splits) % threads != 0 && splits < m) ++splits;
  int64_t block_rows = (m + splits - 1) / splits;
  block_rows = std::min(kBlockRows, (block_rows + kRows - 1) / kRows * kRows);
  const int64_t row_items = (m + block_rows - 1) / block_rows;
  const int64_t items = batch * row_items * column_items;
  auto work = [&](int64_t item) {
    static Buffers<T> buffers;
    std::vector<T> left_block = buffers.Take(kBlockRows * kDepth);
    std::vector<T> right_block = buffers.Take(kBlockPanels * kDepth * kWidth);
    {
      const int64_t b = item / (row_items * column_items);
      const int64_t r0 = item / column_items % row_items * block_rows;
      const int64_t p0 = item % column_items * kBlockPanels;
      const int64_t r1 = std::min(m, r0 + block_rows);
      const int64_t p1 = std::min(panels, p0 + kBlockPanels);
      const T* left = lhs + b * depth * m;
      const T* right = rhs + b * depth * n;
      T* result = out + b * m * n;
      // The safe path from the first block of operands that holds NaN or +inf
      // on (checked as packed, while in cache): a NaN accumulated stays.
      bool safe = false;
      for (int64_t k0 = 0; k0 < depth; k0 += kDepth) {
        const int64_t kd = std::min(kDepth, depth - k0);
        for (int64_t r = r0; r < r1; r += kRows) {  // [tile][k][kRows]
          T* tile = left_block.data() + (r - r0) * kd;
          const int64_t rows = std::min<int64_t>(kRows, r1 - r);
          if (lhs_k_last) {
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t k = 0; k < kd; ++k)
                tile[k * kRows + i] = left[(r + i) * depth + k0 + k];
          } else {
            for (int64_t k = 0; k < kd; ++k)
              std::memcpy(tile + k * kRows, left + (k0 + k) * m + r, rows * sizeof(T));
          }
          for (int64_t k = 0; rows < kRows && k < kd; ++k)  // unused: not stale NaNs
            std::fill(tile + k * kRows + rows, tile + (k + 1) * kRows, T{0});
        }
        for (int64_t p = p0; p < p1; ++p) {  // [panel][k][width], padded with -inf
          T* panel = right_block.data() + (p - p0) * kd * kWidth;
          const int64_t c0 = p * kWidth, cols = std::min(kWidth, n - c0);
          if (rhs_k_last) {
            for (int64_t c = 0; c < cols; ++c)
              for (int64_t k = 0; k < kd; ++k)
                panel[k * kWidth + c] = right[(c0 + c) * depth + k0 + k];
          } else {
            for (int64_t k = 0; k < kd; ++k)
              std::memcpy(panel + k * kWidth, right + (k0 + k) * n + c0, cols * sizeof(T));
          }
          for (int64_t k = 0; cols < kWidth && k < kd; ++k)
            std::fill(panel + k * kWidth + cols, panel + (k + 1) * kWidth, -kInf);
        }
        safe = safe || NeedsSafe(left_block.data(), (r1 - r0 + kRows - 1) / kRows * kRows * kd) ||
               NeedsSafe(right_block.data(), (p1 - p0) * kd * kWidth);
        for (int64_t p = p0; p < p1; ++p) {
          const T* panel = right_block.data() + (p - p0) * kd * kWidth;
          const int64_t c0 = p * kWidth, cols = std::min(kWidth, n - c0);
          for (int64_t r = r0; r < r1; r += kRows) {
            const int rows = static_cast<int>(std::min<int64_t>(kRows, r1 - r));
            const T* tile = left_block.data() + (r - r0) * kd;
            T* at = result + r * n + c0;
            if (safe)
              Rows<T, true>(rows, tile, panel, kd, at, n, cols, k0 == 0);
            else
              Rows<T, false>(rows, tile, panel, kd, at, n, cols, k0 == 0);
          }
        }
      }
    }
    buffers.Give(std::move(left_block));
    buffers.Give(std::move(right_block));
  };
  Share(items, threads, schedule, work);
}

template <ffi::DataType kType>
ffi::Error MaxPlusImpl(ffi::ThreadPool pool, ffi::Buffer<kType> lhs,
                       ffi::Buffer<kType> rhs, ffi::ResultBuffer<kType> out,
                       bool lhs_k_last, bool rhs_k_last) {
  auto ld = lhs.dimensions(), rd = rhs.dimensions();
  if (ld.size() < 2 || ld.size() != rd.size())
    return ffi::Error::InvalidArgument("max_plus: operands must have equal ranks >= 2");
  const size_t rank = ld.size();
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (ld[i] != rd[i]) return ffi::Error::InvalidArgument("max_plus: batch dimensions differ");
    batch *= ld[i];
  }
  const int64_t depth = ld[rank - (lhs_k_last ? 1 : 2)];
  const int64_t m = ld[rank - (lhs_k_last ? 2 : 1)], n = rd[rank - (rhs_k_last ? 2 : 1)];
  if (rd[rank - (rhs_k_last ? 1 : 2)] != depth)
    return ffi::Error::InvalidArgument("max_plus: contracted dimensions differ");
  auto schedule = [&pool](auto task) { pool.Schedule(std::move(task)); };
  MaxPlus(lhs.typed_data(), rhs.typed_data(), out->typed_data(), batch, depth, m, n,
          lhs_k_last, rhs_k_last, std::max<int64_t>(1, pool.num_threads()), schedule);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(EinsliceMaxPlusF32, MaxPlusImpl<ffi::F32>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<bool>("lhs_k_last")
                                  .Attr<bool>("rhs_k_last"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(EinsliceMaxPlusF64, MaxPlusImpl<ffi::F64>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Attr<bool>("lhs_k_last")
                                  .Attr<bool>("rhs_k_last"));

// The same product for numpy arrays (einslice's host walk, through ctypes):
// `itemsize` 4 (float) or 8 (double), C-contiguous operands laid out as the
// attributes above say, `threads` at most. Returns 0, or 1 for another itemsize.
extern "C" __attribute__((visibility("default"))) int EinsliceMaxPlusHost(
    int itemsize, const void* lhs, const void* rhs, void* out, int64_t batch,
    int64_t depth, int64_t m, int64_t n, int lhs_k_last, int rhs_k_last, int threads) {
  auto schedule = [](auto task) { std::thread(std::move(task)).detach(); };
  if (itemsize == 4)
    MaxPlus(static_cast<const float*>(lhs), static_cast<const float*>(rhs),
            static_cast<float*>(out), batch, depth, m, n, lhs_k_last, rhs_k_last,
            std::max(1, threads), schedule);
  else if (itemsize == 8)
    MaxPlus(static_cast<const double*>(lhs), static_cast<const double*>(rhs),
            static_cast<double*>(out), batch, depth, m, n, lhs_k_last, rhs_k_last,
            std::max(1, threads), schedule);
  else
    return 1;
  return 0;
}
