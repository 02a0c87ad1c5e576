// Bodies of loom/backend/cuda/codegen.hpp.
#include "loom/backend/cuda/codegen.hpp"

#include "loom/error.hpp"
#include "loom/ir/equal_hash.hpp"
#include "loom/ir/printer.hpp"
#include "loom/ir/simplify.hpp"
#include "loom/lower/mma.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace cuda {

namespace detail {

using namespace ir;

// A shared array's bytes, rounded up to the boundary the next one starts at: 16 bytes, or
// 1024 after an array a warpgroup MMA reads (the printer lays those out first).
inline int64_t shared_array_bytes(const Buffer& b, bool wgmma_operand = false) {
  const int64_t align = wgmma_operand ? 1024 : 16;
  return (b->num_elements() * b->dtype.bytes() + align - 1) / align * align;
}

inline bool is_wgmma_operand(const lower::GpuKernel& k, const Buffer& b) {
  return std::any_of(k.wgmma_operands.begin(), k.wgmma_operands.end(),
                     [&](const Buffer& x) { return x.get() == b.get(); });
}

class printer {
 public:
  printer(const lower::GpuKernel& k, bool wide_index) : k_(k), wide_(wide_index) {
    idx_ = wide_ ? "long long" : "int";
    for (int d = 0; d < 3; ++d) {
      const char* xyz[] = {"x", "y", "z"};
      special_[k.block_index[d].as<Variable>()] =
          std::string("((") + idx_ + ")blockIdx." + xyz[d] + ")";
      special_[k.thread_index[d].as<Variable>()] =
          std::string("((") + idx_ + ")threadIdx." + xyz[d] + ")";
      ranges_[k.block_index[d].as<Variable>()] = Interval::range(k.grid[d]);
      ranges_[k.thread_index[d].as<Variable>()] = Interval::range(k.block[d]);
    }
  }

  std::string kernel() {
    std::unordered_set<const BufferNode*> written;
    for (const Buffer& b : k_.written_params()) written.insert(b.get());
    std::ostringstream head;
    head << "extern \"C\" __global__ void __launch_bounds__(" << k_.threads_per_block()
         << (k_.min_blocks_per_sm > 0 ? ", " + std::to_string(k_.min_blocks_per_sm) : "") << ") "
         << k_.name << "(";
    for (size_t i = 0; i < k_.params.size(); ++i) {
      const Buffer& b = k_.params[i];
      head << (i ? ", " : "") << (written.count(b.get()) ? "" : "const ") << type(b->dtype)
           << "* __restrict__ " << name(b.get(), b->name);
    }
    head << ") {\n";
    if (dynamic_shared_bytes(k_) > 0) {
      // Past the static limit: the arrays are carved out of the launch's dynamic shared memory,
      // those a warpgroup MMA reads first, each at a multiple of 1024 bytes from a base the
      // kernel rounds up to one (the launch's size has room for it: dynamic_shared_bytes).
      os_ << "  extern __shared__ __align__(16) unsigned char loom_dynamic_shared[];\n";
      std::string base = "loom_dynamic_shared";
      if (!k_.wgmma_operands.empty()) {
        os_ << "  unsigned char* loom_shared_base = loom_dynamic_shared + ((1024u - "
               "(unsigned)__cvta_generic_to_shared(loom_dynamic_shared) % 1024u) % 1024u);\n";
        base = "loom_shared_base";
      }
      int64_t offset = 0;
      for (const Buffer& b : shared_in_layout_order()) {
        const std::string t = type(b->dtype);
        os_ << "  " << t << "* __restrict__ " << name(b.get(), b->name) << " = reinterpret_cast<"
            << t << "*>(" << base << " + " << offset << ");\n";
        offset += shared_array_bytes(b, wgmma_operand(b));
      }
    } else {
      for (const Buffer& b : k_.shared)
        os_ << "  __shared__ __align__(" << (wgmma_operand(b) ? 1024 : 16) << ") " << type(b->dtype)
            << ' ' << name(b.get(), b->name) << '[' << b->num_elements() << "];\n";
    }
    stmt(k_.body, 1);
    return head.str() + os_.str() + "}\n";
  }

 private:
  std::string type(DType t) const {
    if (t.lanes != 1)
      LOOM_BACKEND_FAIL("loom.cuda.E950") << "vector type " << to_string(t) << " in a GPU kernel";
    if (t.is_bool()) return "bool";
    // 16-bit floats are storage only: their bits, converted by the prelude's loom_* helpers.
    if (t.is_16bit_float()) return "unsigned short";
    if (t.is_float()) return t.bits == 32 ? "float" : "double";
    return t.bits == 32 ? "int" : "long long";
  }

  // A C identifier for a buffer or variable, unique within the kernel.
  std::string name(const void* key, const std::string& raw) {
    auto it = names_.find(key);
    if (it != names_.end()) return it->second;
    std::string s;
    for (char c : raw) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "v_" + s;
    std::string unique = s;
    for (int n = 1; taken_.count(unique); ++n) unique = s + "_" + std::to_string(n);
    taken_.insert(unique);
    return names_[key] = unique;
  }

  bool non_negative(const Expr& e) const { return bounds_of(e, ranges_).min >= 0; }

  std::string int_type(DType t) const { return t.bits == 64 && t.is_int() ? idx_ : type(t); }

  std::string expr(const Expr& e) {
    const DType t = e.dtype();
    if (t.lanes != 1)
      LOOM_BACKEND_FAIL("loom.cuda.E950")
          << "kernel '" << k_.name << "': vector expression " << e
          << " (the CUDA printer takes GPU programs lowered without vectorization)";
    if (is_binary(e.kind())) {
      auto [a, b] = binary_operands(e);
      const std::string x = expr(*a), y = expr(*b);
      const bool fl = a->dtype().is_float();
      const bool f32 = fl && a->dtype().bits == 32;
      const int64_t* cb = as_const_int(*b);
      const bool plain = !fl && cb && *cb > 0 && non_negative(*a);
      switch (e.kind()) {
        case NodeKind::Add: return "(" + x + " + " + y + ")";
        case NodeKind::Sub: return "(" + x + " - " + y + ")";
        case NodeKind::Mul: return "(" + x + " * " + y + ")";
        case NodeKind::Div: return "(" + x + " / " + y + ")";
        case NodeKind::Mod:
          return fl ? std::string(f32 ? "fmodf(" : "fmod(") + x + ", " + y + ")"
                    : "(" + x + " % " + y + ")";
        case NodeKind::FloorDiv:
          return plain ? "(" + x + " / " + y + ")" : "loom_floordiv(" + x + ", " + y + ")";
        case NodeKind::FloorMod:
          return plain ? "(" + x + " % " + y + ")" : "loom_floormod(" + x + ", " + y + ")";
        case NodeKind::Min:
          return fl ? std::string(f32 ? "fminf(" : "fmin(") + x + ", " + y + ")"
                    : "loom_min(" + x + ", " + y + ")";
        case NodeKind::Max:
          return fl ? std::string(f32 ? "fmaxf(" : "fmax(") + x + ", " + y + ")"
                    : "loom_max(" + x + ", " + y + ")";
        case NodeKind::EQ: return "(" + x + " == " + y + ")";
        case NodeKind::NE: return "(" + x + " != " + y + ")";
        case NodeKind::LT: return "(" + x + " < " + y + ")";
        case NodeKind::LE: return "(" + x + " <= " + y + ")";
        case NodeKind::GT: return "(" + x + " > " + y + ")";
        case NodeKind::GE: return "(" + x + " >= " + y + ")";
        case NodeKind::And: return "(" + x + " && " + y + ")";
        case NodeKind::Or: return "(" + x + " || " + y + ")";
        case NodeKind::BitXor: return "(" + x + " ^ " + y + ")";
        default: break;
      }
    }
    switch (e.kind()) {
      case NodeKind::IntImm: {
        const int64_t v = e.as<IntImm>()->value;
        if (t.is_bool()) return v ? "true" : "false";
        if (t.bits == 64 && (wide_ || v > INT32_MAX || v < INT32_MIN))
          return "(" + std::to_string(v) + "LL)";
        return v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v);
      }
      case NodeKind::FloatImm: {
        const double v = e.as<FloatImm>()->value;
        if (t.is_16bit_float()) {  // the bits, rounded on the host as the device helpers round
          const float f = static_cast<float>(v);
          const unsigned bits = t.is_bfloat() ? ::loom::detail::float_to_bfloat16_bits(f)
                                              : ::loom::detail::float_to_float16_bits(f);
          return "((unsigned short)" + std::to_string(bits) + "u)";
        }
        const bool f32 = t.bits == 32;
        if (std::isnan(v))
          return f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)";
        if (std::isinf(v)) {
          std::string inf =
              f32 ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
          return v < 0 ? "(-" + inf + ")" : inf;
        }
        char buf[64];
        auto r = std::to_chars(buf, buf + sizeof buf, v);
        std::string s(buf, r.ptr);
        if (s.find_first_of(".e") == std::string::npos) s += ".0";
        if (f32) s += "f";
        return v < 0 ? "(" + s + ")" : s;
      }
      case NodeKind::Variable: {
        auto* v = e.as<Variable>();
        auto it = special_.find(v);
        return it != special_.end() ? it->second : name(v, v->name);
      }
      case NodeKind::Cast: return cast(t, e.as<Cast>()->value);
      case NodeKind::Not: return "(!" + expr(e.as<Not>()->a) + ")";
      case NodeKind::Select: {
        auto* s = e.as<Select>();
        return "(" + expr(s->condition) + " ? " + expr(s->true_value) + " : " +
               expr(s->false_value) + ")";
      }
      case NodeKind::Call: {
        auto* c = e.as<Call>();
        const std::string x = expr(c->args[0]);
        const bool f = t.is_float() && t.bits == 32;
        auto fn = [&](const char* n) { return std::string(n) + (f ? "f(" : "(") + x + ")"; };
        switch (c->op) {
          case CallOp::exp: return fn("exp");
          case CallOp::log: return fn("log");
          case CallOp::sqrt: return fn("sqrt");
          case CallOp::rsqrt: return "(1 / " + fn("sqrt") + ")";
          case CallOp::tanh: return fn("tanh");
          case CallOp::sigmoid:
            return std::string("(1 / (1 + ") + (f ? "expf(-" : "exp(-") + x + ")))";
          case CallOp::erf: return fn("erf");
          case CallOp::pow:
            return std::string(f ? "powf(" : "pow(") + x + ", " + expr(c->args[1]) + ")";
          case CallOp::abs: return t.is_float() ? fn("fabs") : "loom_abs(" + x + ")";
          case CallOp::floor: return fn("floor");
          case CallOp::ceil: return fn("ceil");
          case CallOp::round: return fn("rint");
          case CallOp::sin: return fn("sin");
          case CallOp::cos: return fn("cos");
        }
        return x;
      }
      case NodeKind::Load: {
        auto* l = e.as<Load>();
        return name(l->buffer.get(), l->buffer->name) + "[" + expr(l->index) + "]";
      }
      default:
        LOOM_BACKEND_FAIL("loom.cuda.E950")
            << "kernel '" << k_.name << "': " << node_kind_name(e.kind())
            << " has no CUDA form (lowering should have removed it)";
    }
    return "";
  }

  // Conversions to and from 16-bit floats go through float32 (ir/dtype.hpp).
  std::string cast(DType t, const Expr& value) {
    std::string x = expr(value);
    const DType from = value.dtype();
    if (from.is_16bit_float()) {
      x = std::string(from.is_bfloat() ? "loom_bf16_to_f32(" : "loom_f16_to_f32(") + x + ")";
      if (t.element_of() == DType::f32()) return x;
    }
    if (t.is_16bit_float()) {
      if (from != DType::f32() && !from.is_16bit_float()) x = "((float)" + x + ")";
      return std::string(t.is_bfloat() ? "loom_f32_to_bf16(" : "loom_f32_to_f16(") + x + ")";
    }
    return "((" + int_type(t) + ")" + x + ")";
  }

  void stmt(const Stmt& s, int indent) {
    if (!s.defined()) return;
    const std::string pad(indent * 2, ' ');
    switch (s.kind()) {
      case StmtKind::Block:
        for (const Stmt& x : s.as<Block>()->stmts) stmt(x, indent);
        return;
      case StmtKind::For: {
        auto* f = s.as<For>();
        if (auto w = lower::kernel_wgmma(k_, *f)) {
          wgmma(*w, indent);
          return;
        }
        if (auto nest = lower::match_mma_nest(*f, k_.thread_index[0], k_.block[0], k_.name)) {
          mma_nest(*nest, indent);
          return;
        }
        if (f->for_kind == ForKind::Vectorized && (vector_copy(*f, pad) || vector_store(*f, pad)))
          return;
        open_loop(*f, pad, f->for_kind == ForKind::Unrolled || f->for_kind == ForKind::Vectorized);
        stmt(f->body, indent + 1);
        close_loop(*f, pad);
        return;
      }
      case StmtKind::Store: {
        auto* st = s.as<Store>();
        auto* ld = st->value.as<Load>();
        const int bytes = st->buffer->dtype.bytes();
        if (async_ && ld && ld->buffer->dtype == st->buffer->dtype && (bytes == 4 || bytes == 8)) {
          copy_async(st->buffer, st->index, ld->buffer, ld->index, bytes, pad);
          return;
        }
        os_ << pad << name(st->buffer.get(), st->buffer->name) << "[" << expr(st->index)
            << "] = " << expr(st->value) << ";\n";
        return;
      }
      case StmtKind::Allocate: {
        auto* a = s.as<Allocate>();
        os_ << pad << type(a->buffer->dtype) << ' ' << name(a->buffer.get(), a->buffer->name) << '['
            << a->buffer->num_elements() << "];\n";
        stmt(a->body, indent);
        return;
      }
      case StmtKind::IfThenElse: {
        auto* i = s.as<IfThenElse>();
        os_ << pad << "if (" << expr(i->condition) << ") {\n";
        stmt(i->then_case, indent + 1);
        if (i->else_case.defined()) {
          os_ << pad << "} else {\n";
          stmt(i->else_case, indent + 1);
        }
        os_ << pad << "}\n";
        return;
      }
      case StmtKind::Barrier:
        if (auto* b = s.as<Barrier>(); b->wait_async)
          os_ << pad << "asm volatile(\"cp.async.wait_group " << b->pending_groups
              << ";\\n\" ::: \"memory\");\n";
        // A warpgroup MMA reads shared memory through the async proxy: what this thread wrote
        // (stores and cp.async) is made visible to it before the barrier that publishes it.
        if (!k_.wgmma_operands.empty())
          os_ << pad << "asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n";
        os_ << pad << "__syncthreads();\n";
        return;
      case StmtKind::CopyAsync:
        // Copies of 4, 8 or 16 bytes become cp.async (the others stay plain stores, which land
        // before the barrier too); the statement's copies are one group.
        async_ = true;
        stmt(s.as<CopyAsync>()->body, indent);
        async_ = false;
        os_ << pad << "asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n";
        return;
      case StmtKind::AllReduce: all_reduce(s.as<AllReduce>(), pad); return;
    }
  }

  // An index as base + step * v for v in [0, lanes) (base free of v), where floor division and
  // modulo by a constant c see no carry: x + step v with step (lanes - 1) below the divisor x
  // and c share (ir::known_divisor) stays in x's block of c. None when the index is not so.
  struct lane_form {
    Expr base;
    int64_t step = 0;
  };
  static std::optional<lane_form> in_lanes(const Expr& e, const Variable* v, int64_t lanes) {
    if (!uses_var(e, v)) return lane_form{e, 0};
    if (e.as<Variable>() == v) return lane_form{Expr(int64_t{0}), 1};
    auto both = [&](const Expr& a, const Expr& b) -> std::optional<std::array<lane_form, 2>> {
      auto x = in_lanes(a, v, lanes), y = in_lanes(b, v, lanes);
      if (!x || !y) return std::nullopt;
      return std::array<lane_form, 2>{*x, *y};
    };
    switch (e.kind()) {
      case NodeKind::Add:
        if (auto p = both(e.as<Add>()->a, e.as<Add>()->b))
          return lane_form{(*p)[0].base + (*p)[1].base, (*p)[0].step + (*p)[1].step};
        return std::nullopt;
      case NodeKind::Sub:
        if (auto p = both(e.as<Sub>()->a, e.as<Sub>()->b))
          return lane_form{(*p)[0].base - (*p)[1].base, (*p)[0].step - (*p)[1].step};
        return std::nullopt;
      case NodeKind::Mul: {
        auto* m = e.as<Mul>();
        const int64_t* c = as_const_int(m->b);
        const Expr& other = c ? m->a : m->b;
        if (!c) c = as_const_int(m->a);
        if (!c) return std::nullopt;
        auto x = in_lanes(other, v, lanes);
        if (!x) return std::nullopt;
        return lane_form{x->base * Expr(*c), x->step * *c};
      }
      case NodeKind::FloorDiv:
      case NodeKind::FloorMod: {
        const bool div = e.kind() == NodeKind::FloorDiv;
        const Expr& a = div ? e.as<FloorDiv>()->a : e.as<FloorMod>()->a;
        const int64_t* c = as_const_int(div ? e.as<FloorDiv>()->b : e.as<FloorMod>()->b);
        auto x = c && *c > 0 ? in_lanes(a, v, lanes) : std::nullopt;
        if (!x || x->step < 0 || x->step * (lanes - 1) >= std::gcd(known_divisor(x->base), *c))
          return std::nullopt;
        if (div) return lane_form{FloorDiv::make(x->base, Expr(*c)), 0};
        return lane_form{FloorMod::make(x->base, Expr(*c)), x->step};
      }
      case NodeKind::BitXor: {
        // A lane-invariant mask whose low bits and the base's are zero where the lanes run (a
        // swizzle moving whole 16-byte units): (base + step v) ^ mask = (base ^ mask) + step v.
        auto p = both(e.as<BitXor>()->a, e.as<BitXor>()->b);
        if (!p) return std::nullopt;
        auto [x, y] = *p;
        if (x.step == 0) std::swap(x, y);
        const int64_t low = std::gcd(known_divisor(x.base), known_divisor(y.base));
        if (y.step != 0 || x.step < 0 || low == 0 || x.step * (lanes - 1) >= (low & -low))
          return std::nullopt;
        return lane_form{BitXor::make(x.base, y.base), x.step};
      }
      case NodeKind::Cast:
        if (e.dtype().is_integral() && e.as<Cast>()->value.dtype().is_integral())
          if (auto x = in_lanes(e.as<Cast>()->value, v, lanes))
            return lane_form{Cast::make(e.dtype(), x->base), x->step};
        return std::nullopt;
      default: return std::nullopt;
    }
  }

  // A vectorized loop from 0 of `lanes` iterations whose body is one store, under a guard that
  // holds for all lanes or none (a thread past the copy's end) or none.
  struct vector_loop {
    const Store* store = nullptr;
    const IfThenElse* guard = nullptr;
    int64_t lanes = 0;
  };
  static std::optional<vector_loop> vector_loop_of(const For& f) {
    const int64_t* lanes = as_const_int(f.extent);
    auto* guard = f.body.as<IfThenElse>();
    if (guard && (guard->else_case.defined() || uses_var(guard->condition, f.variable())))
      return std::nullopt;
    auto* st = guard ? guard->then_case.as<Store>() : f.body.as<Store>();
    if (!lanes || !is_const_int(f.min, 0) || !st) return std::nullopt;
    return vector_loop{st, guard, *lanes};
  }
  // The unsigned vector type of `bytes` bytes (4, 8 or 16); "" for any other size.
  static const char* vector_type(int64_t bytes) {
    return bytes == 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "unsigned" : "";
  }
  // `index` in vectorized loop `f` as base + v with base a known multiple of the lanes (every
  // buffer starts 16-byte aligned), simplified; none when it is not so.
  std::optional<Expr> aligned_base(const Expr& index, const For& f) {
    const int64_t lanes = *as_const_int(f.extent);
    const std::optional<lane_form> l = in_lanes(index, f.variable(), lanes);
    if (!l || l->step != 1 || known_divisor(l->base) % lanes != 0) return std::nullopt;
    return simplify(l->base, ranges_);
  }

  // A vectorized loop that copies `lanes` consecutive elements, `dst[d + v] = src[s + v]`, of 4,
  // 8 or 16 bytes at bases known to be multiples of `lanes` (ir::known_divisor; every buffer
  // starts 16-byte aligned): one vector load and one vector store. False (nothing printed) for
  // any other loop.
  bool vector_copy(const For& f, const std::string& pad) {
    const std::optional<vector_loop> loop = vector_loop_of(f);
    if (!loop) return false;
    const Store* st = loop->store;
    const Variable* v = f.variable();
    const std::optional<copy_source> src = source_of(st->value, st->buffer->dtype, v, loop->lanes);
    // A thread's own array stays out of it: a vector read of it through a pointer would put it
    // in local memory (vector_store reads it element by element).
    if (!src || src->load->buffer->scope == MemoryScope::Local ||
        st->buffer->scope == MemoryScope::Local)
      return false;
    const Load* ld = src->load;
    const int64_t bytes = loop->lanes * st->buffer->dtype.bytes();
    const char* vec = vector_type(bytes);
    if (!*vec) return false;
    const std::optional<Expr> d = aligned_base(st->index, f), s = aligned_base(ld->index, f);
    if (!d || !s) return false;
    // Lane 0's condition is every lane's.
    const std::string cond =
        src->cond.defined()
            ? expr(simplify(substitute(src->cond, {{v, Expr(int64_t{0})}}), ranges_))
            : "";
    const IfThenElse* guard = loop->guard;
    if (guard) os_ << pad << "if (" << expr(guard->condition) << ") ";
    if (async_) {
      copy_async(st->buffer, *d, ld->buffer, *s, static_cast<int>(bytes), guard ? "" : pad, cond);
      return true;
    }
    const std::string dst = name(st->buffer.get(), st->buffer->name) + "[" + expr(*d) + "]";
    const std::string from = "*reinterpret_cast<const " + std::string(vec) + "*>(&" +
                             name(ld->buffer.get(), ld->buffer->name) + "[" + expr(*s) + "])";
    const std::string zero = bytes == 16  ? "make_uint4(0u, 0u, 0u, 0u)"
                             : bytes == 8 ? "make_uint2(0u, 0u)"
                                          : "0u";
    os_ << (guard ? "" : pad) << "*reinterpret_cast<" << vec << "*>(&" << dst
        << ") = " << (cond.empty() ? from : "(" + cond + ") ? " + from + " : " + zero) << ";\n";
    return true;
  }

  // What a copy of element type `t` stores at lane v: `src[s]`, or `cond ? src[s] : 0` with
  // `cond` the same for every lane (a padded input's copy, the pad stage inlined; 16-bit values
  // go through float32 and back, which is exact). `cond` is undefined for a plain copy; none
  // for any other value.
  struct copy_source {
    const Load* load = nullptr;
    Expr cond;
  };
  static std::optional<copy_source> source_of(const Expr& value, DType t, const Variable* v,
                                              int64_t lanes) {
    if (auto* ld = value.as<Load>()) {
      if (ld->buffer->dtype != t) return std::nullopt;
      return copy_source{ld, Expr()};
    }
    const Expr* e = &value;
    if (auto* c = e->as<Cast>(); c && t.is_16bit_float() && c->dtype == t) e = &c->value;
    auto* sel = e->as<Select>();
    if (!sel || !lane_invariant(sel->condition, v, lanes)) return std::nullopt;
    const Expr* picked = &sel->true_value;
    if (auto* c = picked->as<Cast>(); c && t.is_16bit_float() && c->dtype == DType::f32())
      picked = &c->value;
    auto* ld = picked->as<Load>();
    const Expr& zero = sel->false_value;
    // +0 only: zero-filled bytes are +0, and a select of -0 would store its sign bit.
    const bool is_zero = (zero.as<FloatImm>() && zero.as<FloatImm>()->value == 0.0 &&
                          !std::signbit(zero.as<FloatImm>()->value)) ||
                         is_const_int(zero, 0);
    if (!ld || ld->buffer->dtype != t || !is_zero) return std::nullopt;
    return copy_source{ld, sel->condition};
  }
  // Whether boolean `e` has one value for all v in [0, lanes): comparisons of indices that do
  // not move with v (in_lanes: floor divisions without a carry included), and their logic.
  static bool lane_invariant(const Expr& e, const Variable* v, int64_t lanes) {
    if (!uses_var(e, v)) return true;
    switch (e.kind()) {
      case NodeKind::And: return both_invariant(e.as<And>()->a, e.as<And>()->b, v, lanes);
      case NodeKind::Or: return both_invariant(e.as<Or>()->a, e.as<Or>()->b, v, lanes);
      case NodeKind::Not: return lane_invariant(e.as<Not>()->a, v, lanes);
      case NodeKind::LT:
      case NodeKind::LE:
      case NodeKind::GT:
      case NodeKind::GE:
      case NodeKind::EQ:
      case NodeKind::NE: {
        auto [a, b] = binary_operands(e);
        auto x = in_lanes(*a, v, lanes), y = in_lanes(*b, v, lanes);
        return x && y && x->step == 0 && y->step == 0;
      }
      default: return false;
    }
  }
  static bool both_invariant(const Expr& a, const Expr& b, const Variable* v, int64_t lanes) {
    return lane_invariant(a, v, lanes) && lane_invariant(b, v, lanes);
  }

  // A vectorized loop that stores `lanes` consecutive elements of global memory, `dst[d + v] =
  // value(v)`, of 4, 8 or 16 bytes at a base known to be a multiple of `lanes`: the values
  // computed lane by lane (v a constant in each, so a thread's array is read at constant
  // indices and stays in registers), packed into one vector, one store: a tile's results
  // (accumulators, with a fused consumer's bias or activation) written 16 bytes a thread
  // rather than 4. False (nothing printed) for any other loop.
  bool vector_store(const For& f, const std::string& pad) {
    const std::optional<vector_loop> loop = vector_loop_of(f);
    if (!loop || loop->lanes < 2 || loop->store->buffer->scope != MemoryScope::Global) return false;
    const Store* st = loop->store;
    const DType t = st->buffer->dtype;
    const bool f32 = t == DType::f32(), i32 = t.is_int() && t.bits == 32;
    if (!f32 && !i32 && !t.is_16bit_float()) return false;
    const char* vec = vector_type(loop->lanes * t.bytes());
    if (!*vec) return false;
    const std::optional<Expr> base = aligned_base(st->index, f);
    if (!base) return false;
    const Variable* v = f.variable();
    // The 32-bit words of the vector: one element each, or two 16-bit ones (the first low).
    std::vector<std::string> words;
    for (int64_t lane = 0; lane < loop->lanes; ++lane) {
      const Expr value = simplify(substitute(st->value, {{v, Expr(lane)}}), ranges_);
      const std::string bits =
          f32 ? "__float_as_uint(" + expr(value) + ")" : "((unsigned)" + expr(value) + ")";
      if (t.bytes() == 4 || lane % 2 == 0)
        words.push_back(bits);
      else
        words.back() = "(" + words.back() + " | (" + bits + " << 16))";
    }
    const IfThenElse* guard = loop->guard;
    const std::string in = guard ? pad + "  " : pad;
    if (guard) os_ << pad << "if (" << expr(guard->condition) << ") {\n";
    os_ << in << "*reinterpret_cast<" << vec << "*>(&" << name(st->buffer.get(), st->buffer->name)
        << "[" << expr(*base) << "]) = ";
    if (words.size() == 1) {
      os_ << words[0] << ";\n";
    } else {
      os_ << "make_" << vec << "(";
      for (size_t w = 0; w < words.size(); ++w) os_ << (w ? ", " : "") << words[w];
      os_ << ");\n";
    }
    if (guard) os_ << pad << "}\n";
    return true;
  }

  // An asynchronous copy of `bytes` (4, 8 or 16, aligned) from global into shared memory:
  // cp.async.cg (around L1) for 16 bytes, which is all it takes, cp.async.ca otherwise.
  // With `cond`, a false condition copies none of the source (cp.async's src-size 0, at the
  // source's base address) and fills the bytes with zeros.
  void copy_async(const Buffer& dst, const Expr& di, const Buffer& src, const Expr& si, int bytes,
                  const std::string& pad, const std::string& cond = "") {
    const std::string from = "&" + name(src.get(), src->name) + "[" + expr(si) + "]";
    os_ << pad << "asm volatile(\"cp.async." << (bytes == 16 ? "cg" : "ca")
        << ".shared.global [%0], [%1], " << bytes << (cond.empty() ? "" : ", %2")
        << ";\\n\" :: " << shared_address(dst, di);
    if (cond.empty())
      os_ << ", \"l\"(" << from << "));\n";
    else
      os_ << ", \"l\"((" << cond << ") ? " << from << " : " << name(src.get(), src->name)
          << "), \"r\"((" << cond << ") ? " << bytes << " : 0));\n";
  }

  // The asm operand of element `i` of shared buffer `b`: its 32-bit shared-memory address.
  std::string shared_address(const Buffer& b, const Expr& i) {
    return "\"r\"((unsigned)__cvta_generic_to_shared(&" + name(b.get(), b->name) + "[" + expr(i) +
           "]))";
  }

  void open_loop(const For& f, const std::string& pad, bool unroll, int step = 1) {
    const std::string v = name(f.variable(), f.variable()->name);
    const std::string mn = expr(f.min), ext = expr(f.extent);
    if (unroll) os_ << pad << "#pragma unroll\n";
    os_ << pad << "for (" << idx_ << " " << v << " = " << mn << "; " << v << " < "
        << (is_const_int(f.min, 0) ? ext : mn + " + " + ext) << "; "
        << (step == 1 ? "++" + v : v + " += " + std::to_string(step)) << ") {\n";
    const Interval mi = bounds_of(f.min, ranges_), ei = bounds_of(f.extent, ranges_);
    Interval r;
    if (mi.bounded() && ei.bounded()) r = {mi.min, mi.max + ei.max - 1};
    ranges_[f.variable()] = r;
  }
  void close_loop(const For& f, const std::string& pad) {
    ranges_.erase(f.variable());
    os_ << pad << "}\n";
  }

  bool wgmma_operand(const Buffer& b) const { return is_wgmma_operand(k_, b); }

  // The shared arrays as the dynamic layout places them: a warpgroup MMA's operands first.
  std::vector<Buffer> shared_in_layout_order() const {
    std::vector<Buffer> out;
    for (const Buffer& b : k_.shared)
      if (wgmma_operand(b)) out.push_back(b);
    for (const Buffer& b : k_.shared)
      if (!wgmma_operand(b)) out.push_back(b);
    return out;
  }

  // A warpgroup MMA (lower::WgmmaNest): one wgmma.mma_async per value of the nest's other
  // loops (unrolled, so that the accumulators stay registers), its descriptors the operands'
  // layouts with their start's shared address, then a wait for all of them, so that the
  // operands' shared memory is free again when the thread goes on. wgmma.fence orders the
  // accumulators' earlier writes before the instructions read them; the empty asm statements
  // on every accumulator before and after keep the compiler from moving one while an
  // instruction owns it (CUTLASS's warpgroup_fence_operand).
  void wgmma(const lower::WgmmaNest& w, int indent) {
    const std::string pad(indent * 2, ' ');
    const lower::MmaTile& t = w.nest.tile;
    const std::string c = name(t.c.get(), t.c->name);
    std::vector<const For*> loops, accumulator_loops;
    for (size_t i = 0; i < w.nest.loops.size(); ++i) {
      if (static_cast<int>(i) == w.n_loop) continue;
      const For* l = w.nest.loops[i];
      loops.push_back(l);
      if (std::any_of(w.accumulators.begin(), w.accumulators.end(),
                      [&](const Expr& a) { return uses_var(a, l->variable()); }))
        accumulator_loops.push_back(l);
    }
    auto in_loops = [&](int in, auto&& body, const std::vector<const For*>& loops) {
      for (size_t i = 0; i < loops.size(); ++i)
        open_loop(*loops[i], std::string((in + i) * 2, ' '), true);
      body(std::string((in + loops.size()) * 2, ' '));
      for (size_t i = loops.size(); i-- > 0;) close_loop(*loops[i], std::string((in + i) * 2, ' '));
    };
    auto fence_accumulators = [&](const std::string& p) {
      for (const Expr& a : w.accumulators)
        os_ << p << "asm volatile(\"\" : \"+f\"(" << c << "[" << expr(a) << "]) :: \"memory\");\n";
    };
    os_ << pad << "{  // " << w.instruction() << ", A " << (w.a.mn_major ? "MN" : "K")
        << "-major, B " << (w.b.mn_major ? "MN" : "K") << "-major\n";
    const std::string in = pad + "  ";
    in_loops(indent + 1, fence_accumulators, accumulator_loops);
    os_ << in << "asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n";
    in_loops(
        indent + 1,
        [&](const std::string& p) {
          auto descriptor = [&](const lower::WgmmaOperand& o) {
            char bits[32];
            std::snprintf(bits, sizeof bits, "0x%016llxull",
                          static_cast<unsigned long long>(o.descriptor_bits()));
            return std::string("(") + bits +
                   " | (unsigned long long)(((unsigned)__cvta_generic_to_shared(&" +
                   name(o.buffer.get(), o.buffer->name) + "[" + expr(o.start) +
                   "]) >> 4) & 0x3fffu))";
          };
          const int64_t regs = w.n / 2;
          os_ << p << "asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << regs + 2 << ", 0;\\n"
              << w.instruction() << " {";
          for (int64_t r = 0; r < regs; ++r) os_ << (r ? ", " : "") << "%" << r;
          os_ << "}, %" << regs << ", %" << regs + 1 << ", p, 1, 1";
          // TF32 takes no transposes (K-major only).
          if (!t.is_tf32()) os_ << ", " << (w.a.mn_major ? 1 : 0) << ", " << (w.b.mn_major ? 1 : 0);
          os_ << ";\\n}\\n\"\n" << p << "    : ";
          for (int64_t r = 0; r < regs; ++r)
            os_ << (r ? ", " : "") << "\"+f\"(" << c << "["
                << expr(w.accumulators[static_cast<size_t>(r)]) << "])";
          os_ << "\n"
              << p << "    : \"l\"(" << descriptor(w.a) << "),\n"
              << p << "      \"l\"(" << descriptor(w.b) << "), \"r\"(1));\n";
        },
        loops);
    os_ << in << "asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n";
    os_ << in << "asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n";
    in_loops(indent + 1, fence_accumulators, accumulator_loops);
    os_ << pad << "}\n";
  }

  // A tensor-core tile with the loops around it (lower::MmaNest): each operand's fragments go
  // to an array of registers where the nest loads them, and each instruction reads its slot.
  // The loops that pick a slot are unrolled, so that every slot index is a constant and the
  // arrays stay in registers.
  void mma_nest(const lower::MmaNest& nest, int indent) {
    const std::string pad(indent * 2, ' ');
    const lower::MmaTile& t = nest.tile;
    os_ << pad << "{  // " << t.instruction() << ", A fragments in " << nest.a.slots
        << " slots, B fragments in " << nest.b.slots << "\n";
    os_ << pad << "  unsigned loom_fa[" << nest.a.slots << "][4], loom_fb[" << nest.b.slots
        << "][2];\n";
    std::vector<bool> slotted(nest.loops.size());
    for (const lower::MmaNest::Fragments* fr : {&nest.a, &nest.b}) {
      for (int j : fr->over) slotted[static_cast<size_t>(j)] = true;
      if (fr->pair_loop >= 0) slotted[static_cast<size_t>(fr->pair_loop)] = true;
    }
    mma_nest_level(nest, 0, slotted, indent + 1);
    os_ << pad << "}\n";
  }

  void mma_nest_level(const lower::MmaNest& nest, size_t level, const std::vector<bool>& slotted,
                      int indent) {
    const std::string pad(indent * 2, ' ');
    const lower::MmaTile& t = nest.tile;
    if (nest.a.depth == static_cast<int>(level)) load_fragments(nest, nest.a, true, indent);
    if (nest.b.depth == static_cast<int>(level)) load_fragments(nest, nest.b, false, indent);
    if (level == nest.loops.size()) {
      const std::string a = "loom_fa[" + expr(nest.a.slot) + "]",
                        b = "loom_fb[" + expr(nest.b.slot) + "]";
      const std::string c = name(t.c.get(), t.c->name);
      os_ << pad << "asm volatile(\"" << t.instruction()
          << " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"\n"
          << pad << "    : ";
      for (int r = 0; r < 4; ++r)
        os_ << (r ? ", " : "") << "\"+f\"(" << c << "[" << expr(t.c_index[r]) << "])";
      os_ << "\n" << pad << "    : ";
      for (int r = 0; r < 4; ++r) os_ << "\"r\"(" << a << "[" << r << "]), ";
      os_ << "\"r\"(" << b << "[0]), \"r\"(" << b << "[1]));\n";
      return;
    }
    const For& f = *nest.loops[level];
    open_loop(f, pad, slotted[level] || f.for_kind == ForKind::Unrolled);
    mma_nest_level(nest, level + 1, slotted, indent + 1);
    close_loop(f, pad);
  }

  // One operand's fragments for every slot of `fr` (the loops of fr.over, unrolled): ldmatrix,
  // where the lane gives one row's shared address and the warp's registers come back, or the
  // elements the lane's registers hold (two 16-bit values per 32-bit register, the first in the
  // low half; or one float32 rounded to TF32).
  void load_fragments(const lower::MmaNest& nest, const lower::MmaNest::Fragments& fr, bool a,
                      int indent) {
    const lower::MmaTile& t = nest.tile;
    const bool paired = fr.pair_row.defined();
    for (size_t i = 0; i < fr.over.size(); ++i)
      open_loop(*nest.loops[static_cast<size_t>(fr.over[i])], std::string((indent + i) * 2, ' '),
                true, paired && i + 1 == fr.over.size() ? 2 : 1);
    std::string pad((indent + fr.over.size()) * 2, ' ');
    // Paired inside the loop it pairs along: a load at every other value of it.
    const bool in_loop = paired && fr.over.empty();
    if (in_loop) {
      const For& v = *nest.loops[static_cast<size_t>(fr.pair_loop)];
      os_ << pad << "if ("
          << expr(simplify(FloorMod::make(v.var - v.min, Expr(int64_t{2})), ranges_))
          << " == 0) {\n";
      pad += "  ";
    }
    const std::string slot = expr(fr.slot);
    const std::string dest = std::string(a ? "loom_fa[" : "loom_fb[") + slot + "]";
    // Paired: registers 2 and 3 are the next slot's 0 and 1.
    const int registers = a || paired ? 4 : 2;
    auto reg = [&](int r) {
      if (r < 2 || a) return dest + "[" + std::to_string(r) + "]";
      return "loom_fb[" + slot + " + 1][" + std::to_string(r - 2) + "]";
    };
    const Buffer& buffer = a ? t.a : t.b;
    const Expr& row = a ? t.a_row : paired ? fr.pair_row : t.b_row;
    // TF32: round to nearest, ties away from zero, as cuBLAS and PyTorch do.
    auto round = [&](const std::string& r, const std::string& value) {
      os_ << pad << "asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(" << r << ") : \"f\"(" << value
          << "));\n";
    };
    if (row.defined()) {
      os_ << pad << "asm volatile(\"ldmatrix.sync.aligned.m8n8" << (registers == 4 ? ".x4" : ".x2")
          << (!a && t.b_transposed ? ".trans" : "") << ".shared.b16 {";
      for (int r = 0; r < registers; ++r) os_ << (r ? ", " : "") << "%" << r;
      os_ << "}, [%" << registers << "];\\n\" : ";
      for (int r = 0; r < registers; ++r) os_ << (r ? ", " : "") << "\"=r\"(" << reg(r) << ")";
      os_ << " : " << shared_address(buffer, row) << ");\n";
      // ldmatrix moves bits: TF32 elements arrive as float32 and are rounded in place.
      if (t.is_tf32())
        for (int r = 0; r < registers; ++r) round(reg(r), "__uint_as_float(" + reg(r) + ")");
    } else {
      const std::string n = name(buffer.get(), buffer->name);
      for (int r = 0; r < registers; ++r) {
        const std::array<Expr, 2>& i =
            a ? t.a_index[static_cast<size_t>(r)] : t.b_index[static_cast<size_t>(r)];
        if (t.is_tf32()) {
          round(reg(r), n + "[" + expr(i[0]) + "]");
          continue;
        }
        // Two elements side by side at an even index are one 32-bit load.
        const bool adjacent = is_const_int(simplify(i[1] - i[0], ranges_), 1);
        const bool even =
            is_const_int(simplify(FloorMod::make(i[0], Expr(int64_t{2})), ranges_), 0);
        os_ << pad << reg(r) << " = ";
        if (adjacent && even)
          os_ << "*reinterpret_cast<const unsigned*>(&" << n << "[" << expr(i[0]) << "]);\n";
        else
          os_ << "(unsigned)" << n << "[" << expr(i[0]) << "] | ((unsigned)" << n << "["
              << expr(i[1]) << "] << 16);\n";
      }
    }
    if (in_loop) os_ << std::string((indent + fr.over.size()) * 2, ' ') << "}\n";
    for (size_t i = fr.over.size(); i-- > 0;)
      close_loop(*nest.loops[static_cast<size_t>(fr.over[i])], std::string((indent + i) * 2, ' '));
  }

  // Warp shuffles where each row of threadIdx.x is a power of two up to a warp, or whole warps
  // (then each warp's result goes through shared memory); otherwise every value goes through
  // shared memory. Sizes as lower::all_reduce_scratch_elements says.
  void all_reduce(const AllReduce* r, const std::string& pad) {
    const DType t = r->buffer->dtype;
    LOOM_USER_CHECK(t.is_float() || t.bits == 32 || t.bits == 64, "loom.cuda.E951")
        << "kernel '" << k_.name << "': a reduction across threads of " << to_string(t)
        << " values; reduce 32- or 64-bit values";
    const std::string ty = type(t), v = name(r->buffer.get(), r->buffer->name) + "[0]";
    auto combine = [&](const std::string& a, const std::string& b) -> std::string {
      switch (r->op) {
        case ReduceOp::Sum: return a + " + " + b;
        case ReduceOp::Prod: return a + " * " + b;
        case ReduceOp::Min: return "(" + b + " < " + a + " ? " + b + " : " + a + ")";
        case ReduceOp::Max: return "(" + b + " > " + a + " ? " + b + " : " + a + ")";
      }
      return a;
    };
    const int64_t x = k_.block[0], rows = k_.block[1] * k_.block[2], total = x * rows;
    const int64_t scratch = lower::all_reduce_scratch_elements(k_.block);
    const std::string in = pad + "  ";
    os_ << pad << "{  // " << reduce_op_name(r->op) << " across threadIdx.x\n";
    os_ << in << "const int loom_lane = threadIdx.x + " << x << " * (threadIdx.y + " << k_.block[1]
        << " * threadIdx.z);\n";
    os_ << in << "const int loom_row = threadIdx.y + " << k_.block[1] << " * threadIdx.z;\n";
    os_ << in << ty << " loom_v = " << v << ";\n";
    const std::string buf = name(r, "loom_red_buf");
    if (scratch == total) {
      os_ << in << "__shared__ " << ty << ' ' << buf << '[' << scratch << "];\n";
      os_ << in << buf << "[loom_lane] = loom_v;\n" << in << "__syncthreads();\n";
      os_ << in << "loom_v = " << buf << "[loom_row * " << x << "];\n";
      os_ << in << "for (int loom_i = 1; loom_i < " << x << "; ++loom_i) loom_v = "
          << combine("loom_v", buf + "[loom_row * " + std::to_string(x) + " + loom_i]") << ";\n";
      os_ << in << "__syncthreads();\n";
    } else {
      // A warp of a block whose size is not a multiple of 32 has fewer lanes.
      std::string mask = "0xffffffffu";
      if (total % 32 != 0)
        mask = "(loom_lane / 32 == " + std::to_string(total / 32) + " ? (1u << " +
               std::to_string(total % 32) + ") - 1u : 0xffffffffu)";
      os_ << in << "const unsigned loom_mask = " << mask << ";\n";
      // Every lane of the mask shuffles, unconditionally: a shuffle inside the combine's
      // select would run in only some lanes.
      for (int64_t o = std::min<int64_t>(x, 32) / 2; o > 0; o /= 2)
        os_ << in << "{ const " << ty << " loom_o = __shfl_xor_sync(loom_mask, loom_v, " << o
            << "); loom_v = " << combine("loom_v", "loom_o") << "; }\n";
      if (scratch > 0) {
        const int64_t warps = x / 32;
        os_ << in << "__shared__ " << ty << ' ' << buf << '[' << scratch << "];\n";
        os_ << in << "if ((threadIdx.x & 31) == 0) " << buf << "[loom_row * " << warps
            << " + threadIdx.x / 32] = loom_v;\n";
        os_ << in << "__syncthreads();\n";
        os_ << in << "loom_v = " << buf << "[loom_row * " << warps << "];\n";
        os_ << in << "for (int loom_i = 1; loom_i < " << warps << "; ++loom_i) loom_v = "
            << combine("loom_v", buf + "[loom_row * " + std::to_string(warps) + " + loom_i]")
            << ";\n";
        os_ << in << "__syncthreads();\n";
      }
    }
    os_ << in << v << " = loom_v;\n" << pad << "}\n";
  }

  const lower::GpuKernel& k_;
  bool wide_;
  std::string idx_;
  std::ostringstream os_;
  std::unordered_map<const Variable*, std::string> special_;
  std::unordered_map<const void*, std::string> names_;
  std::unordered_set<std::string> taken_;
  RangeMap ranges_;
  bool async_ = false;  // printing the body of a CopyAsync
};

inline bool needs_wide_index(const lower::GpuProgram& p) {
  constexpr int64_t limit = int64_t{1} << 31;
  auto big = [&](const ir::Buffer& b) { return b->num_elements() >= limit; };
  for (const ir::Buffer& b : p.args)
    if (big(b)) return true;
  for (const ir::Buffer& b : p.workspaces)
    if (big(b)) return true;
  for (const lower::GpuKernel& k : p.kernels)
    if (k.grid[0] * k.grid[1] * k.grid[2] * k.threads_per_block() >= limit) return true;
  return false;
}

}  // namespace detail

LOOM_DECL int64_t dynamic_shared_bytes(const lower::GpuKernel& k) {
  if (k.shared_bytes() <= static_shared_memory_limit) return 0;
  int64_t bytes = k.wgmma_operands.empty() ? 0 : 1024;  // the base's rounding
  for (const ir::Buffer& b : k.shared)
    bytes += detail::shared_array_bytes(b, detail::is_wgmma_operand(k, b));
  return bytes;
}

LOOM_DECL std::string to_cuda_source(const lower::GpuProgram& program) {
  const bool wide = detail::needs_wide_index(program);
  std::ostringstream os;
  os << "// Generated by loom for '" << program.name << "': " << program.kernels.size()
     << " kernel(s), " << (wide ? "64" : "32") << "-bit indices.\n";
  // Exact floor division and modulo (rounding towards -infinity) for the indices the printer
  // cannot prove non-negative, e.g. around padding. Guarded, so that the sources of several
  // programs can be compiled as one.
  os << "#ifndef LOOM_CUDA_PRELUDE\n#define LOOM_CUDA_PRELUDE\n";
  // A divisor of -1 negates, wrapping (the type's minimum stays itself, with remainder 0), as
  // the interpreters and the CPU backend do; C leaves that quotient undefined.
  for (const char* ty : {"int", "long long"}) {
    const std::string uty = std::string("unsigned ") + ty;
    os << "__device__ __forceinline__ " << ty << " loom_floordiv(" << ty << " a, " << ty << " b) { "
       << "if (b == -1) return (" << ty << ")(0 - (" << uty << ")a); " << ty
       << " q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }\n"
       << "__device__ __forceinline__ " << ty << " loom_floormod(" << ty << " a, " << ty << " b) { "
       << "if (b == -1) return 0; " << ty
       << " r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }\n"
       << "__device__ __forceinline__ " << ty << " loom_min(" << ty << " a, " << ty
       << " b) { return a < b ? a : b; }\n"
       << "__device__ __forceinline__ " << ty << " loom_max(" << ty << " a, " << ty
       << " b) { return a > b ? a : b; }\n"
       << "__device__ __forceinline__ " << ty << " loom_abs(" << ty
       << " a) { return a < 0 ? -a : a; }\n";
  }
  // 16-bit floats (storage only, held as unsigned short: NVRTC gets no cuda_fp16.h here). The
  // conversions round as loom/half.hpp does: bfloat16 to nearest even in integer arithmetic
  // with every NaN to 0x7fc0, float16 by the hardware's cvt.rn.
  os << "__device__ __forceinline__ float loom_bf16_to_f32(unsigned short x) { "
        "return __uint_as_float(((unsigned)x) << 16); }\n"
     << "__device__ __forceinline__ unsigned short loom_f32_to_bf16(float f) { "
        "unsigned u = __float_as_uint(f); if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; "
        "return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }\n"
     << "__device__ __forceinline__ float loom_f16_to_f32(unsigned short x) { "
        "float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x)); return f; }\n"
     << "__device__ __forceinline__ unsigned short loom_f32_to_f16(float f) { "
        "unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); "
        "return h; }\n";
  os << "#endif  // LOOM_CUDA_PRELUDE\n\n";
  for (const lower::GpuKernel& k : program.kernels) os << detail::printer(k, wide).kernel() << '\n';
  return os.str();
}

}  // namespace cuda
LOOM_END_NAMESPACE
