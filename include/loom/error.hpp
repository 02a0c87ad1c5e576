/// \file
/// The loom::error hierarchy and the streaming check macros.
///
/// Every message a user sees starts with an id such as `[loom.dsl.E101]`, so that tests can assert
/// it and users can search for it. Tiers (STYLE 3.10):
/// - `LOOM_USER_CHECK(cond, id) << ...`     -> loom::user_error (the user did something wrong)
/// - `LOOM_INTERNAL_CHECK(cond) << ...`     -> loom::internal_error (a bug in loom)
/// - `LOOM_BACKEND_FAIL(id) << ...`         -> loom::backend_error (LLVM/NVRTC/CUDA said no)
#ifndef LOOM_ERROR_HPP
#define LOOM_ERROR_HPP

#include "loom/config.hpp"

#include <sstream>
#include <stdexcept>
#include <string>

LOOM_BEGIN_NAMESPACE

/// Base of every exception loom throws.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
};
/// The caller misused loom: wrong shapes, an illegal schedule step, a broken records file...
class user_error : public error {
 public:
  using error::error;
};
/// A broken invariant inside loom: please report it.
class internal_error : public error {
 public:
  using error::error;
};
/// A code generator or driver (LLVM, NVRTC, CUDA) failed; the message carries its log.
class backend_error : public error {
 public:
  using error::error;
};

namespace detail {

enum class error_tier { user, internal, backend };

/// Collects a streamed message and throws once the message is complete. The check macros run it
/// in a `for` loop whose increment calls issue(): that way the message is streamed before anything
/// throws, and nothing ever throws from a destructor (Halide's trick). An outer `for` tests the
/// condition first (a `for`, not an `if`, so that no `else` can dangle after the macro) and
/// builds a reporter only when it fails: constructing the ostringstream
/// (locale and all) on every passing check was a third of the time of a schedule replay.
class error_reporter {
 public:
  error_reporter(bool failed, error_tier tier, const char* id, const char* file = nullptr,
                 int line = 0, const char* condition = nullptr)
      : failed_(failed), tier_(tier) {
    if (!failed_) return;
    if (id) out_ << '[' << id << "] ";
    if (tier_ == error_tier::internal)
      out_ << "internal error at " << file << ':' << line << ": condition '" << condition
           << "' failed: ";
  }
  bool active() const { return failed_; }
  std::ostream& stream() { return out_; }
  [[noreturn]] void issue() {
    std::string msg = out_.str();
    switch (tier_) {
      case error_tier::user: throw user_error(msg);
      case error_tier::backend: throw backend_error(msg);
      case error_tier::internal: break;
    }
    throw internal_error(msg + " (this is a bug in loom; please report it)");
  }

 private:
  bool failed_;
  error_tier tier_;
  std::ostringstream out_;
};

/// Swallows a message that a compiled-out check would have streamed.
struct null_stream {
  template <class T>
  null_stream& operator<<(const T&) {
    return *this;
  }
};

}  // namespace detail

LOOM_END_NAMESPACE

/// Throws loom::user_error with id `id` and the streamed message when `cond` is false.
#define LOOM_USER_CHECK(cond, id)                                                              \
  for (bool loom_check_ok_ = static_cast<bool>(cond); !loom_check_ok_; loom_check_ok_ = true)  \
    for (::loom::detail::error_reporter loom_reporter_(true, ::loom::detail::error_tier::user, \
                                                       id);                                    \
         loom_reporter_.active(); loom_reporter_.issue())                                      \
  loom_reporter_.stream()

/// Throws loom::user_error unconditionally.
#define LOOM_USER_FAIL(id) LOOM_USER_CHECK(false, id)

/// Throws loom::internal_error (with file, line and condition) when `cond` is false.
#define LOOM_INTERNAL_CHECK(cond)                                                                  \
  for (bool loom_check_ok_ = static_cast<bool>(cond); !loom_check_ok_; loom_check_ok_ = true)      \
    for (::loom::detail::error_reporter loom_reporter_(true, ::loom::detail::error_tier::internal, \
                                                       "loom.internal", __FILE__, __LINE__,        \
                                                       #cond);                                     \
         loom_reporter_.active(); loom_reporter_.issue())                                          \
  loom_reporter_.stream()

/// Throws loom::backend_error with id `id` and the streamed message.
#define LOOM_BACKEND_FAIL(id)                                                                   \
  for (::loom::detail::error_reporter loom_reporter_(true, ::loom::detail::error_tier::backend, \
                                                     id);                                       \
       loom_reporter_.active(); loom_reporter_.issue())                                         \
  loom_reporter_.stream()

#if LOOM_ENABLE_ASSERTS
#define LOOM_DEBUG_ASSERT(cond) LOOM_INTERNAL_CHECK(cond)
#else
#define LOOM_DEBUG_ASSERT(cond) \
  if (true) {                   \
  } else                        \
    ::loom::detail::null_stream()
#endif

#endif  // LOOM_ERROR_HPP
