// core/tensor.hpp: strided views, owning tensors, and the memory resources behind them.
// A View is a pointer, a shape and element strides; it never owns. A Tensor owns (or keeps alive) its buffer
// through a shared holder, so weights can be zero-copy views into a memory-mapped file. Neither knows which
// memory space the pointer lives in: layers only hand them to a backend.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <numeric>
#include <string>
#include <string_view>
#include <type_traits>

#include "maxtext/core/dtype.hpp"
#include "maxtext/core/error.hpp"
#include "maxtext/core/macros.hpp"

namespace maxtext {

template <int R>
using Shape = std::array<std::int64_t, R>;

template <int R>
constexpr std::int64_t numel(const Shape<R>& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}
template <int R>
constexpr Shape<R> contiguous_strides(const Shape<R>& s) {
  Shape<R> st{};
  std::int64_t acc = 1;
  for (int i = R - 1; i >= 0; --i) {
    st[static_cast<std::size_t>(i)] = acc;
    acc *= s[static_cast<std::size_t>(i)];
  }
  return st;
}

/// Non-owning strided view of R dimensions. Element access (operator()) is for host memory only.
template <class T, int R>
class View {
  static_assert(R >= 1, "View rank must be >= 1");

 public:
  using value_type = T;
  static constexpr int rank = R;

  View() = default;
  MAXTEXT_HD View(T* data, const Shape<R>& shape) : data_(data), shape_(shape), strides_(contiguous_strides<R>(shape)) {}
  MAXTEXT_HD View(T* data, const Shape<R>& shape, const Shape<R>& strides) : data_(data), shape_(shape), strides_(strides) {}
  /// A view of const T from a view of T.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  MAXTEXT_HD View(const View<U, R>& o) : data_(o.data()), shape_(o.shape()), strides_(o.strides()) {}

  MAXTEXT_HD T* data() const { return data_; }
  MAXTEXT_HD const Shape<R>& shape() const { return shape_; }
  MAXTEXT_HD const Shape<R>& strides() const { return strides_; }
  MAXTEXT_HD std::int64_t dim(int i) const { return shape_[static_cast<std::size_t>(i)]; }
  MAXTEXT_HD std::int64_t stride(int i) const { return strides_[static_cast<std::size_t>(i)]; }
  MAXTEXT_HD std::int64_t size() const { return numel<R>(shape_); }
  MAXTEXT_HD bool empty() const { return data_ == nullptr || size() == 0; }
  MAXTEXT_HD explicit operator bool() const { return data_ != nullptr; }

  /// True when the elements are densely packed in row-major order.
  MAXTEXT_HD bool is_contiguous() const {
    std::int64_t acc = 1;
    for (int i = R - 1; i >= 0; --i) {
      if (shape_[static_cast<std::size_t>(i)] != 1 && strides_[static_cast<std::size_t>(i)] != acc) return false;
      acc *= shape_[static_cast<std::size_t>(i)];
    }
    return true;
  }
  /// True when the last axis has unit stride (what most kernels require).
  MAXTEXT_HD bool rows_contiguous() const { return shape_[R - 1] <= 1 || strides_[R - 1] == 1; }

  template <class... I>
  MAXTEXT_HD T& operator()(I... idx) const {
    static_assert(sizeof...(I) == R, "wrong number of indices");
    const std::int64_t ii[] = {static_cast<std::int64_t>(idx)...};
    std::int64_t off = 0;
    for (int d = 0; d < R; ++d) off += ii[d] * strides_[static_cast<std::size_t>(d)];
    return data_[off];
  }

  /// Sub-view with the leading axis fixed at i.
  MAXTEXT_HD auto operator[](std::int64_t i) const {
    static_assert(R >= 2, "operator[] needs rank >= 2");
    Shape<R - 1> s{}, st{};
    for (int d = 1; d < R; ++d) {
      s[static_cast<std::size_t>(d - 1)] = shape_[static_cast<std::size_t>(d)];
      st[static_cast<std::size_t>(d - 1)] = strides_[static_cast<std::size_t>(d)];
    }
    return View<T, R - 1>(data_ + i * strides_[0], s, st);
  }
  /// Sub-view with `axis` restricted to [begin, begin + len).
  MAXTEXT_HD View narrow(int axis, std::int64_t begin, std::int64_t len) const {
    Shape<R> s = shape_;
    s[static_cast<std::size_t>(axis)] = len;
    return View(data_ + begin * strides_[static_cast<std::size_t>(axis)], s, strides_);
  }
  /// Drop `axis` by fixing it at `index`.
  MAXTEXT_HD auto select(int axis, std::int64_t index) const {
    static_assert(R >= 2, "select needs rank >= 2");
    Shape<R - 1> s{}, st{};
    for (int d = 0, o = 0; d < R; ++d) {
      if (d == axis) continue;
      s[static_cast<std::size_t>(o)] = shape_[static_cast<std::size_t>(d)];
      st[static_cast<std::size_t>(o)] = strides_[static_cast<std::size_t>(d)];
      ++o;
    }
    return View<T, R - 1>(data_ + index * strides_[static_cast<std::size_t>(axis)], s, st);
  }
  /// Swap two axes (no data movement).
  MAXTEXT_HD View transpose(int a, int b) const {
    Shape<R> s = shape_, st = strides_;
    std::swap(s[static_cast<std::size_t>(a)], s[static_cast<std::size_t>(b)]);
    std::swap(st[static_cast<std::size_t>(a)], st[static_cast<std::size_t>(b)]);
    return View(data_, s, st);
  }
  /// Reinterpret a contiguous view with another shape of the same element count.
  template <int R2>
  View<T, R2> reshape(const Shape<R2>& s) const {
    MAXTEXT_CHECK(is_contiguous(), ShapeError, "[View::reshape] view is not contiguous: shape ", shape_, " strides ",
                  strides_);
    MAXTEXT_CHECK(numel<R2>(s) == size(), ShapeError, "[View::reshape] element count: expected ", size(),
                  ", found shape ", s);
    return View<T, R2>(data_, s);
  }
  /// Merge the leading R-1 axes: [a, b, ..., n] -> [a*b*..., n]. Needs those axes to be mergeable.
  View<T, 2> flatten_rows() const {
    std::int64_t rows = 1;
    for (int d = 0; d < R - 1; ++d) rows *= shape_[static_cast<std::size_t>(d)];
    for (int d = 0; d + 1 < R - 1; ++d) {
      MAXTEXT_CHECK(shape_[static_cast<std::size_t>(d)] == 1 ||
                        strides_[static_cast<std::size_t>(d)] ==
                            strides_[static_cast<std::size_t>(d + 1)] * shape_[static_cast<std::size_t>(d + 1)],
                    ShapeError, "[View::flatten_rows] leading axes not mergeable: shape ", shape_, " strides ",
                    strides_);
    }
    return View<T, 2>(data_, {rows, shape_[R - 1]}, {R >= 2 ? strides_[static_cast<std::size_t>(R - 2)] : 0, strides_[R - 1]});
  }
  View<const T, R> as_const() const { return View<const T, R>(data_, shape_, strides_); }

 private:
  T* data_ = nullptr;
  Shape<R> shape_{};
  Shape<R> strides_{};
};

/// Where tensor buffers come from. Backends supply their own (device memory, pools); host_memory() is the default.
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  /// True when the CPU may dereference pointers from this resource.
  virtual bool host_accessible() const = 0;
};

/// Host memory aligned to 64 bytes (one cache line, one AVX-512 register).
class HostMemory final : public MemoryResource {
 public:
  static constexpr std::size_t alignment = 64;
  void* allocate(std::size_t bytes) override {
    if (bytes == 0) bytes = alignment;
    return ::operator new(bytes, std::align_val_t(alignment));
  }
  void deallocate(void* p, std::size_t) noexcept override { ::operator delete(p, std::align_val_t(alignment)); }
  bool host_accessible() const override { return true; }
};

inline const std::shared_ptr<MemoryResource>& host_memory() {
  static const std::shared_ptr<MemoryResource> mem = std::make_shared<HostMemory>();
  return mem;
}

/// Owning tensor: a View plus a shared holder keeping the buffer alive. Copies share the buffer.
template <class T, int R>
class Tensor {
 public:
  using value_type = T;
  static constexpr int rank = R;

  Tensor() = default;
  /// Uninitialised storage for `shape` from `mem` (host by default).
  explicit Tensor(const Shape<R>& shape, std::shared_ptr<MemoryResource> mem = host_memory()) {
    const std::int64_t n = numel<R>(shape);
    MAXTEXT_CHECK(n >= 0, ShapeError, "[Tensor] negative extent in shape ", shape);
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
    void* p = mem->allocate(bytes);
    host_ = mem->host_accessible();
    holder_ = std::shared_ptr<void>(p, [mem, bytes](void* q) { mem->deallocate(q, bytes); });
    view_ = View<T, R>(static_cast<T*>(p), shape);
  }
  /// Adopt external memory kept alive by `holder` (e.g. a memory-mapped file).
  Tensor(View<T, R> view, std::shared_ptr<const void> holder, bool host_accessible = true)
      : holder_(std::const_pointer_cast<void>(std::move(holder))), view_(view), host_(host_accessible) {}

  /// Host tensor filled with `value`.
  static Tensor full(const Shape<R>& shape, T value) {
    Tensor t(shape);
    std::fill(t.data(), t.data() + t.size(), value);
    return t;
  }
  static Tensor zeros(const Shape<R>& shape) { return full(shape, T{}); }

  T* data() const { return view_.data(); }
  const Shape<R>& shape() const { return view_.shape(); }
  std::int64_t dim(int i) const { return view_.dim(i); }
  std::int64_t size() const { return view_.size(); }
  bool empty() const { return view_.data() == nullptr; }
  explicit operator bool() const { return !empty(); }
  bool host_accessible() const { return host_; }

  View<T, R> view() const { return view_; }
  View<const T, R> cview() const { return view_.as_const(); }
  operator View<T, R>() const { return view_; }
  operator View<const T, R>() const { return view_.as_const(); }
  template <class... I>
  T& operator()(I... idx) const {
    return view_(idx...);
  }
  const std::shared_ptr<void>& holder() const { return holder_; }

 private:
  std::shared_ptr<void> holder_;
  View<T, R> view_;
  bool host_ = true;
};

/// Throw ShapeError unless `v` has exactly `expected` (entries < 0 match anything).
template <class V, std::size_t N>
void check_shape(std::string_view what, const V& v, const std::int64_t (&expected)[N]) {
  static_assert(static_cast<int>(N) == V::rank, "check_shape: rank mismatch");
  bool ok = true;
  std::array<std::int64_t, N> e{};
  for (std::size_t i = 0; i < N; ++i) {
    e[i] = expected[i];
    ok = ok && (expected[i] < 0 || expected[i] == v.shape()[i]);
  }
  MAXTEXT_CHECK(ok, ShapeError, "[", what, "] expected shape ", e, ", found ", v.shape());
}

}  // namespace maxtext
