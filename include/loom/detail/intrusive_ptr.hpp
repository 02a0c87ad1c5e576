/// \file
/// A minimal intrusive reference-counted pointer for immutable IR nodes (Halide's IntrusivePtr).
#ifndef LOOM_DETAIL_INTRUSIVE_PTR_HPP
#define LOOM_DETAIL_INTRUSIVE_PTR_HPP

#include "loom/config.hpp"

#include <atomic>
#include <cstddef>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace detail {

/// Base of every reference-counted object. The count is mutable so that handles to const nodes can
/// share ownership; it is atomic because kernels and IR are shared across the tuner's threads.
struct ref_counted {
  mutable std::atomic<int> ref_count_{0};
  ref_counted() = default;
  ref_counted(const ref_counted&) : ref_count_(0) {}
  ref_counted& operator=(const ref_counted&) { return *this; }
  virtual ~ref_counted() = default;
};

template <class T>
class intrusive_ptr {
 public:
  intrusive_ptr() = default;
  intrusive_ptr(T* p) : p_(p) { acquire(); }  // NOLINT: implicit by design, as in Halide
  intrusive_ptr(const intrusive_ptr& o) : p_(o.p_) { acquire(); }
  intrusive_ptr(intrusive_ptr&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  template <class U>
  intrusive_ptr(const intrusive_ptr<U>& o) : p_(o.get()) {  // NOLINT
    acquire();
  }
  ~intrusive_ptr() { release(); }
  intrusive_ptr& operator=(const intrusive_ptr& o) {
    intrusive_ptr(o).swap(*this);
    return *this;
  }
  intrusive_ptr& operator=(intrusive_ptr&& o) noexcept {
    intrusive_ptr(std::move(o)).swap(*this);
    return *this;
  }
  void swap(intrusive_ptr& o) noexcept { std::swap(p_, o.p_); }
  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  void acquire() {
    if (p_) p_->ref_count_.fetch_add(1, std::memory_order_relaxed);
  }
  void release() {
    if (p_ && p_->ref_count_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
    p_ = nullptr;
  }
  T* p_ = nullptr;
};

}  // namespace detail
LOOM_END_NAMESPACE

#endif  // LOOM_DETAIL_INTRUSIVE_PTR_HPP
