// Bodies of loom/backend/llvm/codegen.hpp: loop-nest IR to LLVM IR.
#include "loom/backend/llvm/codegen.hpp"

#include "loom/backend/llvm/module_builder.hpp"
#include "loom/ir/equal_hash.hpp"
#include "loom/ir/printer.hpp"
#include "loom/runtime/workspace.hpp"

#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {

namespace detail {

using namespace ir;

inline bool contains_load(const Expr& e) {
  bool found = false;
  post_order_visit(e, [&](const Expr& x) { found = found || x.as<Load>(); });
  return found;
}

// Whether evaluating `branch` is safe because the condition already evaluates it: `branch` is
// an operand of the comparison `condition` (a float max/min reduction update is
// `select(src > acc, src, acc)`, build_loop_nests.ipp).
inline bool evaluated_by_condition(const Expr& condition, const Expr& branch) {
  if (!is_comparison(condition.kind())) return false;
  auto [a, b] = binary_operands(condition);
  return structural_equal(*a, branch) || structural_equal(*b, branch);
}

// Variables and buffers a statement uses from outside itself (for closures of parallel loops).
class capture_collector : public StmtVisitor {
 public:
  std::vector<const Variable*> vars;
  std::vector<const BufferNode*> buffers;
  using StmtVisitor::visit;

 protected:
  void visit_Variable(const Variable* op) override {
    if (!bound_.count(op) && std::find(vars.begin(), vars.end(), op) == vars.end())
      vars.push_back(op);
  }
  void visit_For(const For* op) override {
    bound_.insert(op->variable());
    StmtVisitor::visit_For(op);
  }
  void visit_Load(const Load* op) override {
    use(op->buffer.get());
    StmtVisitor::visit_Load(op);
  }
  void visit_Store(const Store* op) override {
    use(op->buffer.get());
    StmtVisitor::visit_Store(op);
  }
  void visit_Allocate(const Allocate* op) override {
    allocated_.insert(op->buffer.get());
    StmtVisitor::visit_Allocate(op);
  }
  // Reduce axes never reach lowered code; nothing else binds variables.

 private:
  void use(const BufferNode* b) {
    if (!allocated_.count(b) && std::find(buffers.begin(), buffers.end(), b) == buffers.end())
      buffers.push_back(b);
  }
  std::unordered_set<const Variable*> bound_;
  std::unordered_set<const BufferNode*> allocated_;
};

// Whether a buffer of the kernel (argument or allocation) holds 64-bit elements.
inline bool has_64bit_elements(const LoweredFunc& f) {
  bool found = false;
  for (const Buffer& b : f.args) found = found || b->dtype.bits >= 64;
  class finder : public StmtVisitor {
   public:
    explicit finder(bool& found) : found_(found) {}

   protected:
    void visit_Allocate(const Allocate* op) override {
      found_ = found_ || op->buffer->dtype.bits >= 64;
      StmtVisitor::visit_Allocate(op);
    }

   private:
    bool& found_;
  };
  if (!found) finder(found).visit(f.body);
  return found;
}

class codegen {
 public:
  codegen(Engine& engine, llvm::LLVMContext& ctx, llvm::Module& mod, const CodegenOptions& opt)
      : engine_(engine), ctx_(ctx), mod_(mod), b_(ctx), opt_(opt) {}

  void emit(const LoweredFunc& f, const std::string& symbol) {
    symbol_ = symbol;
    // LLVM 19's SLP vectorizer miscompiles some straight-line code of 64-bit elements in
    // 512-bit trees (<8 x i64>: a constant operand lane becomes poison; the unrolled int64(float)
    // nest of tests/jit/test_random_programs.cpp). Kernels with 64-bit buffers get 256-bit SLP
    // and loop-vectorizer trees; loom's own vectors keep their width (min-legal-vector-width).
    // 32-bit kernels keep 512-bit trees: capping them slowed tuned GEMMs and convolutions
    // 3-4.5x on an AVX-512 host, where SLP packs their unrolled register tiles.
    prefer_bits_ = std::max(engine_.vector_bits(), 128);
    if (has_64bit_elements(f)) prefer_bits_ = std::min(prefer_bits_, 256);
    llvm::Type* ptr = b_.getPtrTy();
    // impl(ptr noalias a0, ptr noalias a1, ...): the body, with alias information.
    std::vector<llvm::Type*> params(f.args.size(), ptr);
    llvm::Function* impl = new_function(symbol + ".impl", params, true);
    for (size_t i = 0; i < f.args.size(); ++i) bufs_[f.args[i].get()] = impl->getArg(i);
    begin_function(impl);
    stmt(f.body);
    b_.CreateRet(b_.getInt32(0));

    // The entry point unpacks the argument array.
    auto* wrapper_ty = llvm::FunctionType::get(b_.getInt32Ty(), {ptr}, false);
    llvm::Function* wrapper =
        llvm::Function::Create(wrapper_ty, llvm::Function::ExternalLinkage, symbol, mod_);
    set_attributes(wrapper);
    auto* bb = llvm::BasicBlock::Create(ctx_, "entry", wrapper);
    b_.SetInsertPoint(bb);
    std::vector<llvm::Value*> args;
    for (size_t i = 0; i < f.args.size(); ++i) {
      llvm::Value* slot = b_.CreateConstInBoundsGEP1_64(ptr, wrapper->getArg(0), i);
      args.push_back(b_.CreateLoad(ptr, slot, f.args[i]->name));
    }
    b_.CreateRet(b_.CreateCall(impl, args));
  }

 private:
  // --- functions -----------------------------------------------------------------------------
  void set_attributes(llvm::Function* fn) {
    fn->addFnAttr("target-cpu", engine_.cpu_name());
    fn->addFnAttr("target-features", engine_.features());
    // Explicit 512-bit vectors must stay 512 bits wide (the skylake-avx512 default prefers 256).
    const std::string bits = std::to_string(std::max(engine_.vector_bits(), 128));
    fn->addFnAttr("prefer-vector-width", std::to_string(prefer_bits_));
    fn->addFnAttr("min-legal-vector-width", bits);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
  }

  llvm::Function* new_function(const std::string& name, const std::vector<llvm::Type*>& params,
                               bool noalias_ptrs) {
    auto* ty = llvm::FunctionType::get(b_.getInt32Ty(), params, false);
    auto* fn = llvm::Function::Create(ty, llvm::Function::InternalLinkage, name, mod_);
    set_attributes(fn);
    if (noalias_ptrs)
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i]->isPointerTy()) fn->addParamAttr(i, llvm::Attribute::NoAlias);
    return fn;
  }

  void begin_function(llvm::Function* fn) {
    fn_ = fn;
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* body = llvm::BasicBlock::Create(ctx_, "body", fn);
    b_.SetInsertPoint(entry_);
    b_.CreateBr(body);
    b_.SetInsertPoint(body);
  }

  // --- types -----------------------------------------------------------------------------------
  llvm::Type* ty(DType t) {
    llvm::Type* s;
    if (t.is_bool())
      s = b_.getInt1Ty();
    else if (t.is_16bit_float())
      s = b_.getInt16Ty();  // storage only: the bits, converted by half_to_f32 / f32_to_half
    else if (t.is_float())
      s = t.bits == 32 ? b_.getFloatTy() : b_.getDoubleTy();
    else
      s = b_.getIntNTy(t.bits);
    return t.lanes > 1 ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(s, t.lanes)) : s;
  }

  llvm::Value* splat(llvm::Value* v, int lanes) { return b_.CreateVectorSplat(lanes, v); }

  // --- expressions -----------------------------------------------------------------------------
  llvm::Value* expr(const Expr& e) {
    const DType t = e.dtype();
    switch (e.kind()) {
      case NodeKind::IntImm: return llvm::ConstantInt::get(ty(t), e.as<IntImm>()->value, true);
      case NodeKind::FloatImm: {
        const double v = e.as<FloatImm>()->value;
        if (t.is_16bit_float()) {
          const float f = static_cast<float>(v);
          return llvm::ConstantInt::get(ty(t), t.is_bfloat()
                                                   ? ::loom::detail::float_to_bfloat16_bits(f)
                                                   : ::loom::detail::float_to_float16_bits(f));
        }
        return llvm::ConstantFP::get(ty(t), v);
      }
      case NodeKind::Variable: {
        auto it = vars_.find(e.as<Variable>());
        LOOM_INTERNAL_CHECK(it != vars_.end()) << "unbound variable " << e.as<Variable>()->name;
        return it->second;
      }
      case NodeKind::Cast: return cast(e.as<Cast>());
      case NodeKind::Not: return b_.CreateNot(expr(e.as<Not>()->a));
      case NodeKind::Select: return select(e.as<Select>());
      case NodeKind::Call: return call(e.as<Call>());
      case NodeKind::Load: return load(e.as<Load>());
      case NodeKind::Ramp: {
        auto* r = e.as<Ramp>();
        llvm::Value* base = splat(expr(r->base), r->lanes);
        llvm::Value* stride = splat(expr(r->stride), r->lanes);
        std::vector<llvm::Constant*> steps;
        for (int i = 0; i < r->lanes; ++i)
          steps.push_back(llvm::ConstantInt::get(b_.getInt64Ty(), i));
        return b_.CreateAdd(base, b_.CreateMul(stride, llvm::ConstantVector::get(steps)));
      }
      case NodeKind::Broadcast: {
        auto* bc = e.as<Broadcast>();
        return splat(expr(bc->value), bc->lanes);
      }
      case NodeKind::TensorRead:
      case NodeKind::Reduce:
        LOOM_INTERNAL_CHECK(false) << node_kind_name(e.kind()) << " in a lowered loop nest";
        return nullptr;
      default: return binary(e);
    }
  }

  static const int64_t* const_int_or_splat(const Expr& e) {
    if (auto* c = as_const_int(e)) return c;
    if (auto* b = e.as<Broadcast>()) return as_const_int(b->value);
    return nullptr;
  }

  llvm::Value* binary(const Expr& e) {
    auto [pa, pb] = binary_operands(e);
    llvm::Value* a = expr(*pa);
    llvm::Value* b = expr(*pb);
    const DType t = pa->dtype();
    const bool fp = t.is_float();
    // FMA contraction is allowed (the IR contract permits reassociation-free rounding changes
    // of a multiply-add); nothing else of fast-math.
    llvm::FastMathFlags fmf;
    fmf.setAllowContract(true);
    if (e.get() == reassociable_sum_) {
      // LLVM counts an fadd associative only with nsz too (a zero sum may come out as -0).
      fmf.setAllowReassoc(true);
      fmf.setNoSignedZeros(true);
    }
    llvm::IRBuilder<>::FastMathFlagGuard guard(b_);
    b_.setFastMathFlags(fmf);
    switch (e.kind()) {
      case NodeKind::Add: return fp ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
      case NodeKind::Sub: return fp ? b_.CreateFSub(a, b) : b_.CreateSub(a, b);
      case NodeKind::Mul: return fp ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
      case NodeKind::Div:
        if (!fp) return int_divmod(e.kind(), a, b, *pb);
        // arcp lets LICM turn a division by a loop-invariant value into one reciprocal and a
        // multiply per element (softmax's `exp / row_sum`): a vector divide costs ~10x a
        // multiply, and the result moves by at most an ulp or two (node_kinds.hpp contract).
        fmf.setAllowReciprocal(true);
        b_.setFastMathFlags(fmf);
        return b_.CreateFDiv(a, b);
      case NodeKind::Mod: return fp ? b_.CreateFRem(a, b) : int_divmod(e.kind(), a, b, *pb);
      case NodeKind::FloorDiv:
      case NodeKind::FloorMod: return int_divmod(e.kind(), a, b, *pb);
      case NodeKind::Min:
        return b_.CreateBinaryIntrinsic(fp ? llvm::Intrinsic::minnum : llvm::Intrinsic::smin, a, b);
      case NodeKind::Max:
        return b_.CreateBinaryIntrinsic(fp ? llvm::Intrinsic::maxnum : llvm::Intrinsic::smax, a, b);
      case NodeKind::EQ: return fp ? b_.CreateFCmpOEQ(a, b) : b_.CreateICmpEQ(a, b);
      case NodeKind::NE: return fp ? b_.CreateFCmpUNE(a, b) : b_.CreateICmpNE(a, b);
      case NodeKind::LT: return fp ? b_.CreateFCmpOLT(a, b) : b_.CreateICmpSLT(a, b);
      case NodeKind::LE: return fp ? b_.CreateFCmpOLE(a, b) : b_.CreateICmpSLE(a, b);
      case NodeKind::GT: return fp ? b_.CreateFCmpOGT(a, b) : b_.CreateICmpSGT(a, b);
      case NodeKind::GE: return fp ? b_.CreateFCmpOGE(a, b) : b_.CreateICmpSGE(a, b);
      case NodeKind::And: return b_.CreateAnd(a, b);
      case NodeKind::Or: return b_.CreateOr(a, b);
      case NodeKind::BitXor: return b_.CreateXor(a, b);
      default: break;
    }
    LOOM_INTERNAL_CHECK(false) << "no code for " << node_kind_name(e.kind());
    return nullptr;
  }

  // Integer Div, Mod, FloorDiv and FloorMod. Dividing by -1 negates: loom's integers wrap
  // (node_kinds.hpp), so the quotient of the type's minimum by -1 is the minimum again and the
  // remainder 0, where LLVM's sdiv and srem are undefined (x86's idiv traps) and the
  // interpreters wrap. A divisor that may be -1 is replaced by 1 for the division and the
  // quotient negated after it; constant divisors other than -1 divide as they are. (Division
  // by zero stays undefined in generated code.)
  llvm::Value* int_divmod(NodeKind k, llvm::Value* a, llvm::Value* b, const Expr& divisor) {
    const bool div = k == NodeKind::Div || k == NodeKind::FloorDiv;
    llvm::Value* zero = llvm::Constant::getNullValue(a->getType());
    const int64_t* c = const_int_or_splat(divisor);
    if (c && *c == -1) return div ? b_.CreateSub(zero, a) : zero;
    llvm::Value* minus_one = nullptr;
    if (!c) {
      minus_one = b_.CreateICmpEQ(b, llvm::Constant::getAllOnesValue(b->getType()));
      b = b_.CreateSelect(minus_one, llvm::ConstantInt::get(b->getType(), 1), b);
    }
    llvm::Value* r;
    switch (k) {
      case NodeKind::Div: r = b_.CreateSDiv(a, b); break;
      case NodeKind::Mod: r = b_.CreateSRem(a, b); break;
      default: r = floor_divmod(k == NodeKind::FloorMod, a, b, c); break;
    }
    // The remainder of a division by 1 is already 0.
    return minus_one && div ? b_.CreateSelect(minus_one, b_.CreateSub(zero, a), r) : r;
  }

  // Floor division and modulus by `b`, which is not -1 (`c`: its value when constant): shifts
  // and masks for positive powers of two, otherwise a truncating division corrected when the
  // remainder's sign differs from the divisor's.
  llvm::Value* floor_divmod(bool mod, llvm::Value* a, llvm::Value* b, const int64_t* c) {
    if (c && *c > 0 && (*c & (*c - 1)) == 0) {
      int shift = 0;
      while ((int64_t{1} << shift) < *c) ++shift;
      if (mod) return b_.CreateAnd(a, llvm::ConstantInt::get(a->getType(), *c - 1));
      return b_.CreateAShr(a, llvm::ConstantInt::get(a->getType(), shift));
    }
    llvm::Value* zero = llvm::Constant::getNullValue(a->getType());
    llvm::Value* q = b_.CreateSDiv(a, b);
    llvm::Value* r = b_.CreateSRem(a, b);
    llvm::Value* adjust =
        b_.CreateAnd(b_.CreateICmpNE(r, zero),
                     b_.CreateICmpNE(b_.CreateICmpSLT(r, zero), b_.CreateICmpSLT(b, zero)));
    if (mod) return b_.CreateAdd(r, b_.CreateSelect(adjust, b, zero));
    return b_.CreateSub(q, b_.CreateZExt(adjust, a->getType()));
  }

  // Conversions to and from 16-bit floats go through float32 (ir/dtype.hpp).
  llvm::Value* cast(const Cast* c) {
    llvm::Value* v = expr(c->value);
    DType from = c->value.dtype();
    const DType to = c->dtype, f32 = DType::f32().with_lanes(to.lanes);
    if (from.is_16bit_float()) {
      v = half_to_f32(v, from);
      from = f32;
      if (to == f32) return v;
    }
    if (to.is_16bit_float()) return f32_to_half(convert(v, from, f32), to);
    return convert(v, from, to);
  }

  // bfloat16 -> float32 is a shift of the bits; float16 -> float32 is LLVM's fpext from half
  // (F16C's vcvtph2ps on x86). Both exact.
  llvm::Value* half_to_f32(llvm::Value* v, DType from) {
    llvm::Type* vt = v->getType();
    if (from.is_bfloat()) {
      llvm::Type* i32 = vt->getWithNewType(b_.getInt32Ty());
      llvm::Value* w = b_.CreateShl(b_.CreateZExt(v, i32), llvm::ConstantInt::get(i32, 16));
      return b_.CreateBitCast(w, vt->getWithNewType(b_.getFloatTy()));
    }
    return b_.CreateFPExt(b_.CreateBitCast(v, vt->getWithNewType(b_.getHalfTy())),
                          vt->getWithNewType(b_.getFloatTy()));
  }

  // float32 -> bfloat16 rounds to nearest even in integer arithmetic, every NaN to 0x7fc0
  // (half.hpp's float_to_bfloat16_bits; no __truncsfbf2 libcall for the JIT to resolve);
  // float32 -> float16 is LLVM's fptrunc to half, which rounds to nearest even.
  llvm::Value* f32_to_half(llvm::Value* v, DType to) {
    llvm::Type* vt = v->getType();
    llvm::Type* i16 = vt->getWithNewType(b_.getInt16Ty());
    if (!to.is_bfloat())
      return b_.CreateBitCast(b_.CreateFPTrunc(v, vt->getWithNewType(b_.getHalfTy())), i16);
    llvm::Type* i32 = vt->getWithNewType(b_.getInt32Ty());
    auto c = [&](uint32_t x) { return llvm::ConstantInt::get(i32, x); };
    llvm::Value* u = b_.CreateBitCast(v, i32);
    llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(u, c(16)), c(1));
    llvm::Value* rounded = b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(u, c(0x7fff)), lsb), c(16));
    llvm::Value* nan = b_.CreateICmpUGT(b_.CreateAnd(u, c(0x7fffffff)), c(0x7f800000));
    return b_.CreateTrunc(b_.CreateSelect(nan, c(0x7fc0), rounded), i16);
  }

  llvm::Value* convert(llvm::Value* v, DType from, DType to) {
    if (from == to) return v;
    llvm::Type* t = ty(to);
    if (to.is_bool()) {
      if (from.is_float()) return b_.CreateFCmpUNE(v, llvm::Constant::getNullValue(v->getType()));
      return b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
    }
    if (from.is_bool()) return to.is_float() ? b_.CreateUIToFP(v, t) : b_.CreateZExt(v, t);
    if (from.is_float() && to.is_float()) return b_.CreateFPCast(v, t);
    if (from.is_float()) return b_.CreateFPToSI(v, t);
    if (to.is_float()) return b_.CreateSIToFP(v, t);
    return b_.CreateSExtOrTrunc(v, t);
  }

  llvm::Value* select(const Select* s) {
    llvm::Value* c = expr(s->condition);
    // Only the branch taken may be evaluated when a branch loads: it may be out of bounds.
    auto needs_branch = [&](const Expr& v) {
      return contains_load(v) && !evaluated_by_condition(s->condition, v);
    };
    if (s->condition.dtype().lanes == 1 &&
        (needs_branch(s->true_value) || needs_branch(s->false_value))) {
      auto* then_bb = llvm::BasicBlock::Create(ctx_, "sel.then", fn_);
      auto* else_bb = llvm::BasicBlock::Create(ctx_, "sel.else", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "sel.done", fn_);
      b_.CreateCondBr(c, then_bb, else_bb);
      b_.SetInsertPoint(then_bb);
      llvm::Value* tv = expr(s->true_value);
      llvm::BasicBlock* then_end = b_.GetInsertBlock();
      b_.CreateBr(done);
      b_.SetInsertPoint(else_bb);
      llvm::Value* fv = expr(s->false_value);
      llvm::BasicBlock* else_end = b_.GetInsertBlock();
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
      llvm::PHINode* phi = b_.CreatePHI(tv->getType(), 2);
      phi->addIncoming(tv, then_end);
      phi->addIncoming(fv, else_end);
      return phi;
    }
    return b_.CreateSelect(c, expr(s->true_value), expr(s->false_value));
  }

  llvm::Value* libm_call(const char* f32, const char* f64, llvm::Value* x, bool is_f32) {
    llvm::Type* st = is_f32 ? b_.getFloatTy() : b_.getDoubleTy();
    llvm::FunctionCallee fn = mod_.getOrInsertFunction(is_f32 ? f32 : f64, st, st);
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(x->getType())) {
      llvm::Value* out = llvm::UndefValue::get(vt);
      for (unsigned i = 0; i < vt->getNumElements(); ++i)
        out = b_.CreateInsertElement(out, b_.CreateCall(fn, {b_.CreateExtractElement(x, i)}), i);
      return out;
    }
    return b_.CreateCall(fn, {x});
  }

  // exp of a float scalar or vector, inline: llvm.exp on a vector is scalarised into libm calls
  // (no vector math library is linked), which left softmax 3x slower than Eigen. Cephes'
  // polynomial after range reduction x = m ln2 + r, as Eigen's pexp_float (about 1 ulp).
  // 2^m is applied as two factors so that every m of the clamped range is a normal float: the
  // result overflows to +inf and underflows through subnormals to 0 like expf; NaN passes.
  llvm::Value* exp_f32(llvm::Value* x) {
    llvm::Type* t = x->getType();
    llvm::Type* it = t->getWithNewType(b_.getInt32Ty());
    auto c = [&](double v) { return llvm::ConstantFP::get(t, v); };
    auto ci = [&](int v) { return llvm::ConstantInt::get(it, v); };
    llvm::Function* fmuladd = llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::fmuladd, {t});
    auto fma = [&](llvm::Value* a, llvm::Value* b, llvm::Value* d) {
      return b_.CreateCall(fmuladd, {a, b, d});
    };
    // Ordered compares are false for NaN, so the clamp keeps it.
    llvm::Value* v = b_.CreateSelect(b_.CreateFCmpOGT(x, c(89.0)), c(89.0), x);
    v = b_.CreateSelect(b_.CreateFCmpOLT(v, c(-104.0)), c(-104.0), v);
    llvm::Value* m =
        b_.CreateCall(llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::floor, {t}),
                      {fma(v, c(1.44269504088896341), c(0.5))});
    llvm::Value* r = fma(m, c(-0.693359375), v);
    r = fma(m, c(2.12194440e-4), r);
    llvm::Value* r2 = b_.CreateFMul(r, r);
    llvm::Value* r3 = b_.CreateFMul(r2, r);
    llvm::Value* y = fma(c(1.9875691500e-4), r, c(1.3981999507e-3));
    llvm::Value* y1 = fma(c(4.1665795894e-2), r, c(1.6666665459e-1));
    llvm::Value* y2 = b_.CreateFAdd(r, c(1.0));
    y = fma(y, r, c(8.3334519073e-3));
    y1 = fma(y1, r, c(5.0000001201e-1));
    y = fma(y, r3, y1);
    y = fma(y, r2, y2);
    if (llvm::Value* scaled = scale_by_pow2_avx512(y, m)) return scaled;
    // m is in [-150, 128]: 2^m = 2^h * 2^(m-h) with h = m >> 1, both factors normal.
    llvm::Value* mi = b_.CreateFPToSI(m, it);
    llvm::Value* h = b_.CreateAShr(mi, ci(1));
    auto pow2 = [&](llvm::Value* e) {
      return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(e, ci(127)), ci(23)), t);
    };
    y = b_.CreateFMul(b_.CreateFMul(y, pow2(h)), pow2(b_.CreateSub(mi, h)));
    return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, y);
  }

  // y * 2^m for float vectors with AVX-512's vscalefps: one instruction where building the two
  // powers of two takes nine, a third of exp's work. It rounds once, into subnormals too, and
  // passes NaN, so exp needs no NaN select after it. Null when the host lacks AVX-512 or the
  // vector does not split into whole registers (16 lanes; 8 or 4 with AVX512VL).
  llvm::Value* scale_by_pow2_avx512(llvm::Value* y, llvm::Value* m) {
    auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(y->getType());
    if (!vt || !engine_.has_feature("avx512f")) return nullptr;
    const unsigned lanes = vt->getNumElements();
    const bool vl = engine_.has_feature("avx512vl");
    unsigned width;
    llvm::Intrinsic::ID id;
    if (lanes % 16 == 0 && engine_.vector_bits() >= 512) {
      width = 16;
      id = llvm::Intrinsic::x86_avx512_mask_scalef_ps_512;
    } else if (vl && lanes % 8 == 0) {
      width = 8;
      id = llvm::Intrinsic::x86_avx512_mask_scalef_ps_256;
    } else if (vl && lanes % 4 == 0) {
      width = 4;
      id = llvm::Intrinsic::x86_avx512_mask_scalef_ps_128;
    } else {
      return nullptr;
    }
    llvm::Function* fn = llvm::Intrinsic::getDeclaration(&mod_, id);
    auto* part_ty = llvm::FixedVectorType::get(b_.getFloatTy(), width);
    llvm::Value* all_lanes = llvm::ConstantInt::get(b_.getIntNTy(std::max(width, 8u)), -1, true);
    std::vector<llvm::Value*> parts;
    for (unsigned first = 0; first < lanes; first += width) {
      auto part = [&](llvm::Value* v) {
        return width == lanes
                   ? v
                   : b_.CreateShuffleVector(v, llvm::createSequentialMask(first, width, 0));
      };
      std::vector<llvm::Value*> args = {part(y), part(m), llvm::Constant::getNullValue(part_ty),
                                        all_lanes};
      if (width == 16) args.push_back(b_.getInt32(4));  // _MM_FROUND_CUR_DIRECTION
      parts.push_back(b_.CreateCall(fn, args));
    }
    return parts.size() == 1 ? parts[0] : llvm::concatenateVectors(b_, parts);
  }

  llvm::Value* exp(llvm::Value* x, bool is_f32) {
    if (is_f32) return exp_f32(x);
    return b_.CreateCall(
        llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::exp, {x->getType()}), {x});
  }

  llvm::Value* call(const Call* c) {
    std::vector<llvm::Value*> args;
    for (auto& a : c->args) args.push_back(expr(a));
    llvm::Value* x = args[0];
    llvm::Type* t = x->getType();
    const bool f32 = c->dtype.bits == 32;
    auto intrinsic = [&](llvm::Intrinsic::ID id) {
      return b_.CreateCall(llvm::Intrinsic::getDeclaration(&mod_, id, {t}), args);
    };
    // Integer abs is the one call on integers: build the float constant 1 only for float calls
    // (ConstantFP::get of an integer type crashes inside LLVM).
    if (c->op == CallOp::abs && !c->dtype.is_float())
      return b_.CreateCall(llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::abs, {t}),
                           {x, b_.getFalse()});
    llvm::Value* one = llvm::ConstantFP::get(t, 1.0);
    switch (c->op) {
      case CallOp::exp: return exp(x, f32);
      case CallOp::log: return intrinsic(llvm::Intrinsic::log);
      case CallOp::sqrt: return intrinsic(llvm::Intrinsic::sqrt);
      case CallOp::rsqrt: return b_.CreateFDiv(one, intrinsic(llvm::Intrinsic::sqrt));
      case CallOp::tanh: return libm_call("tanhf", "tanh", x, f32);
      case CallOp::erf: return libm_call("erff", "erf", x, f32);
      case CallOp::sigmoid: {
        return b_.CreateFDiv(one, b_.CreateFAdd(one, exp(b_.CreateFNeg(x), f32)));
      }
      case CallOp::pow: return intrinsic(llvm::Intrinsic::pow);
      case CallOp::abs: return intrinsic(llvm::Intrinsic::fabs);
      case CallOp::floor: return intrinsic(llvm::Intrinsic::floor);
      case CallOp::ceil: return intrinsic(llvm::Intrinsic::ceil);
      case CallOp::round: return intrinsic(llvm::Intrinsic::nearbyint);
      case CallOp::sin: return intrinsic(llvm::Intrinsic::sin);
      case CallOp::cos: return intrinsic(llvm::Intrinsic::cos);
    }
    return nullptr;
  }

  // Address of element `index` (scalar) of buffer `b`.
  llvm::Value* address(const BufferNode* b, llvm::Value* index) {
    return b_.CreateInBoundsGEP(ty(b->dtype), buffer(b), index);
  }
  llvm::Value* buffer(const BufferNode* b) {
    auto it = bufs_.find(b);
    LOOM_INTERNAL_CHECK(it != bufs_.end()) << "buffer " << b->name << " used outside its scope";
    return it->second;
  }
  llvm::Align elem_align(const BufferNode* b) { return llvm::Align(b->dtype.bytes()); }

  llvm::Value* load(const Load* l) {
    const BufferNode* b = l->buffer.get();
    const int lanes = l->index.dtype().lanes;
    llvm::Type* et = ty(b->dtype);
    if (lanes == 1) return b_.CreateAlignedLoad(et, address(b, expr(l->index)), elem_align(b));
    if (auto* r = l->index.as<Ramp>(); r && is_const_int(r->stride, 1))
      return b_.CreateAlignedLoad(ty(l->dtype), address(b, expr(r->base)), elem_align(b));
    if (auto* bc = l->index.as<Broadcast>())
      return splat(b_.CreateAlignedLoad(et, address(b, expr(bc->value)), elem_align(b)), lanes);
    llvm::Value* ptrs = b_.CreateInBoundsGEP(et, buffer(b), expr(l->index));
    return b_.CreateMaskedGather(ty(l->dtype), ptrs, elem_align(b));
  }

  // --- statements ------------------------------------------------------------------------------
  void stmt(const Stmt& s) {
    if (!s.defined()) return;
    switch (s.kind()) {
      case StmtKind::Block:
        for (auto& x : s.as<Block>()->stmts) stmt(x);
        return;
      case StmtKind::Store: return store(s.as<Store>());
      case StmtKind::For: return loop(s.as<For>());
      case StmtKind::Allocate: return allocate(s.as<Allocate>());
      case StmtKind::IfThenElse: {
        auto* i = s.as<IfThenElse>();
        llvm::Value* c = expr(i->condition);
        auto* then_bb = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
        auto* done = llvm::BasicBlock::Create(ctx_, "if.done", fn_);
        auto* else_bb =
            i->else_case.defined() ? llvm::BasicBlock::Create(ctx_, "if.else", fn_) : done;
        b_.CreateCondBr(c, then_bb, else_bb);
        b_.SetInsertPoint(then_bb);
        stmt(i->then_case);
        b_.CreateBr(done);
        if (i->else_case.defined()) {
          b_.SetInsertPoint(else_bb);
          stmt(i->else_case);
          b_.CreateBr(done);
        }
        b_.SetInsertPoint(done);
        return;
      }
      case StmtKind::Barrier:
      case StmtKind::AllReduce:
      case StmtKind::CopyAsync:
        LOOM_BACKEND_FAIL("loom.llvm.E530")
            << "the kernel contains a GPU " << stmt_kind_name(s.kind())
            << "; the CPU backend compiles loop nests from lower::lower(), not GPU kernels from "
            << "lower::lower_gpu()";
        return;
    }
  }

  // A scalar sum of loaded values into the stored element, `buf[i] = buf[i] + other[j]`: the
  // rfactor combine of partial sums, or a sum over an exp buffer. Its fadd gets LLVM's reassoc
  // and nsz flags, which let the vectorizers turn the serial chain (32 dependent vaddss per
  // softmax row) into a vector sum and one horizontal reduction. The IR contract allows
  // reassociating reductions; sums with a product (GEMM, conv updates) keep their exact FMA chains.
  static bool is_sum_of_loads(const Store* s) {
    const auto* add = s->value.as<Add>();
    if (!add || !s->value.dtype().is_float() || s->index.dtype().lanes != 1) return false;
    for (const auto& [mine, other] : {std::pair{&add->a, &add->b}, std::pair{&add->b, &add->a}}) {
      const auto* own = mine->as<Load>();
      if (own && own->buffer.get() == s->buffer.get() && structural_equal(own->index, s->index) &&
          other->as<Load>())
        return true;
    }
    return false;
  }

  void store(const Store* s) {
    const BufferNode* b = s->buffer.get();
    reassociable_sum_ = is_sum_of_loads(s) ? s->value.get() : nullptr;
    llvm::Value* v = expr(s->value);
    reassociable_sum_ = nullptr;
    const int lanes = s->index.dtype().lanes;
    if (lanes == 1) {
      b_.CreateAlignedStore(v, address(b, expr(s->index)), elem_align(b));
    } else if (auto* r = s->index.as<Ramp>(); r && is_const_int(r->stride, 1)) {
      b_.CreateAlignedStore(v, address(b, expr(r->base)), elem_align(b));
    } else {
      llvm::Value* ptrs = b_.CreateInBoundsGEP(ty(b->dtype), buffer(b), expr(s->index));
      b_.CreateMaskedScatter(v, ptrs, elem_align(b));
    }
  }

  void allocate(const Allocate* a) {
    const BufferNode* b = a->buffer.get();
    const int64_t bytes = b->num_elements() * b->dtype.bytes();
    llvm::Type* et = ty(b->dtype);
    if (bytes <= opt_.max_stack_bytes) {
      // Hoisted to the entry block: one stack slot per function (per thread in closures), which
      // SROA can promote to registers when every index is constant after unrolling.
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      auto* slot = eb.CreateAlloca(et, eb.getInt64(b->num_elements()), b->name);
      slot->setAlignment(llvm::Align(64));
      bufs_[b] = slot;
      stmt(a->body);
      bufs_.erase(b);
      return;
    }
    // The runtime's per-thread cache of scratch blocks (runtime/workspace.hpp): with malloc, a
    // kernel's speed depended on the state of the process's heap.
    llvm::FunctionCallee alloc =
        mod_.getOrInsertFunction("loom_workspace_alloc", b_.getPtrTy(), b_.getInt64Ty());
    llvm::FunctionCallee release =
        mod_.getOrInsertFunction("loom_workspace_free", b_.getVoidTy(), b_.getPtrTy());
    llvm::Value* p = b_.CreateCall(alloc, {b_.getInt64(bytes)}, b->name);
    // Out of memory: the kernel stops with a status instead of writing through null.
    return_if_failed(b_.CreateICmpEQ(p, llvm::ConstantPointerNull::get(b_.getPtrTy())),
                     b_.getInt32(runtime::kernel_status_out_of_memory));
    bufs_[b] = p;
    live_workspace_.push_back(p);
    stmt(a->body);
    live_workspace_.pop_back();
    bufs_.erase(b);
    b_.CreateCall(release, {p});
  }

  /// Where `failed` holds, gives back the workspace blocks this function holds and returns
  /// `status`; the code after it runs where it does not.
  void return_if_failed(llvm::Value* failed, llvm::Value* status) {
    auto* fail_bb = llvm::BasicBlock::Create(ctx_, "status.fail", fn_);
    auto* ok_bb = llvm::BasicBlock::Create(ctx_, "status.ok", fn_);
    b_.CreateCondBr(failed, fail_bb, ok_bb, llvm::MDBuilder(ctx_).createUnlikelyBranchWeights());
    b_.SetInsertPoint(fail_bb);
    llvm::FunctionCallee release =
        mod_.getOrInsertFunction("loom_workspace_free", b_.getVoidTy(), b_.getPtrTy());
    for (auto it = live_workspace_.rbegin(); it != live_workspace_.rend(); ++it)
      b_.CreateCall(release, {*it});
    b_.CreateRet(status);
    b_.SetInsertPoint(ok_bb);
  }

  void loop(const For* f) {
    if (f->for_kind >= ForKind::BlockIdxX)
      LOOM_USER_FAIL("loom.llvm.E510")
          << "loop '" << f->variable()->name << "' is "
          << (f->for_kind == ForKind::Tensorized ? "a tensor-core tile (tensorized)"
              : is_pipelined(f->for_kind)        ? "pipelined through GPU shared memory"
                                          : std::string("bound to ") + for_kind_name(f->for_kind))
          << ", which the CPU cannot run; build for a CUDA target";
    if (f->for_kind == ForKind::Parallel && !in_parallel_) return parallel_loop(f);
    llvm::Value* mn = expr(f->min);
    llvm::Value* end = b_.CreateAdd(mn, expr(f->extent));
    serial_loop(f->variable(), mn, end, f->body);
  }

  void serial_loop(const Variable* var, llvm::Value* begin, llvm::Value* end, const Stmt& body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, var->name + ".head", fn_);
    auto* body_bb = llvm::BasicBlock::Create(ctx_, var->name + ".body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, var->name + ".exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, var->name);
    i->addIncoming(begin, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, end), body_bb, exit);
    b_.SetInsertPoint(body_bb);
    vars_[var] = i;
    stmt(body);
    llvm::Value* next = b_.CreateAdd(i, b_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
    i->addIncoming(next, b_.GetInsertBlock());
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
    vars_.erase(var);
  }

  // A parallel loop becomes a closure `int body(int64 begin, int64 end, void* captured)` run by
  // loom_parallel_for. The closure calls an inner function whose buffer arguments are noalias,
  // so the body is optimised as well as a serial one.
  void parallel_loop(const For* f) {
    capture_collector cc;
    cc.visit(f->body);
    std::vector<const Variable*> cvars;
    for (auto* v : cc.vars)
      if (v != f->variable()) cvars.push_back(v);
    llvm::Type* ptr = b_.getPtrTy();
    llvm::Type* i64 = b_.getInt64Ty();
    // Closure layout: min, captured variables, captured buffers.
    std::vector<llvm::Type*> fields{i64};
    for (size_t i = 0; i < cvars.size(); ++i) fields.push_back(i64);
    for (size_t i = 0; i < cc.buffers.size(); ++i) fields.push_back(ptr);
    auto* closure_ty = llvm::StructType::get(ctx_, fields);

    // Fill the closure in the parent.
    llvm::Value* mn = expr(f->min);
    llvm::Value* extent = expr(f->extent);
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    llvm::Value* closure = eb.CreateAlloca(closure_ty, nullptr, "closure");
    b_.CreateStore(mn, b_.CreateStructGEP(closure_ty, closure, 0));
    for (size_t i = 0; i < cvars.size(); ++i)
      b_.CreateStore(vars_.at(cvars[i]), b_.CreateStructGEP(closure_ty, closure, 1 + i));
    for (size_t i = 0; i < cc.buffers.size(); ++i)
      b_.CreateStore(buffer(cc.buffers[i]),
                     b_.CreateStructGEP(closure_ty, closure, 1 + cvars.size() + i));

    const std::string base = symbol_ + ".par" + std::to_string(closure_count_++);
    // Inner function: (begin, end, min, vars..., noalias buffers...).
    std::vector<llvm::Type*> inner_params{i64, i64};
    inner_params.insert(inner_params.end(), fields.begin(), fields.end());
    llvm::Function* inner = new_function(base + ".impl", inner_params, true);
    llvm::Function* outer = new_function(base, {i64, i64, ptr}, false);

    // Save the parent's context.
    auto saved_vars = vars_;
    auto saved_bufs = bufs_;
    llvm::Function* saved_fn = fn_;
    llvm::BasicBlock* saved_entry = entry_;
    llvm::BasicBlock* saved_block = b_.GetInsertBlock();
    const bool saved_par = in_parallel_;
    // The closure's blocks are its own; the parent's are freed by the parent.
    std::vector<llvm::Value*> saved_workspace = std::move(live_workspace_);
    live_workspace_.clear();

    // outer: unpack the closure and call inner.
    auto* obb = llvm::BasicBlock::Create(ctx_, "entry", outer);
    b_.SetInsertPoint(obb);
    std::vector<llvm::Value*> call_args{outer->getArg(0), outer->getArg(1)};
    for (size_t i = 0; i < fields.size(); ++i)
      call_args.push_back(
          b_.CreateLoad(fields[i], b_.CreateStructGEP(closure_ty, outer->getArg(2), i)));
    b_.CreateRet(b_.CreateCall(inner, call_args));

    // inner: the loop over [begin, end), offset by min.
    vars_.clear();
    bufs_.clear();
    for (size_t i = 0; i < cvars.size(); ++i) vars_[cvars[i]] = inner->getArg(3 + i);
    for (size_t i = 0; i < cc.buffers.size(); ++i)
      bufs_[cc.buffers[i]] = inner->getArg(3 + cvars.size() + i);
    in_parallel_ = true;
    begin_function(inner);
    llvm::Value* imin = inner->getArg(2);
    serial_loop(f->variable(), b_.CreateAdd(imin, inner->getArg(0)),
                b_.CreateAdd(imin, inner->getArg(1)), f->body);
    b_.CreateRet(b_.getInt32(0));

    // Back in the parent: run it.
    vars_ = std::move(saved_vars);
    bufs_ = std::move(saved_bufs);
    live_workspace_ = std::move(saved_workspace);
    fn_ = saved_fn;
    entry_ = saved_entry;
    in_parallel_ = saved_par;
    b_.SetInsertPoint(saved_block);
    llvm::FunctionCallee rt =
        mod_.getOrInsertFunction("loom_parallel_for", b_.getInt32Ty(), i64, ptr, ptr);
    // A task that stopped (out of memory) stops the kernel with its status.
    llvm::Value* status = b_.CreateCall(rt, {extent, outer, closure});
    return_if_failed(b_.CreateICmpNE(status, b_.getInt32(0)), status);
  }

  Engine& engine_;
  llvm::LLVMContext& ctx_;
  llvm::Module& mod_;
  llvm::IRBuilder<> b_;
  const CodegenOptions& opt_;
  std::string symbol_;
  int prefer_bits_ = 128;  // the vectorizers' tree width (emit())
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::unordered_map<const Variable*, llvm::Value*> vars_;
  std::unordered_map<const BufferNode*, llvm::Value*> bufs_;
  int closure_count_ = 0;
  bool in_parallel_ = false;
  // The workspace blocks the function being emitted holds at the insertion point, outermost
  // first: what an early return must give back.
  std::vector<llvm::Value*> live_workspace_;
  // The float Add of a scalar store `buf[i] = buf[i] + other[j]` (store()), which may be
  // reassociated; null when the current store is no such sum.
  const ExprNode* reassociable_sum_ = nullptr;
};

}  // namespace detail

LOOM_LLVM_DECL CompiledKernel compile(const ir::LoweredFunc& f, const CodegenOptions& options) {
  Engine& engine = Engine::global();
  std::string symbol = engine.unique_name(f.name.empty() ? "loom_kernel" : f.name);
  ModuleBundle bundle = new_module(engine, symbol);
  detail::codegen(engine, *bundle.context, *bundle.module, options).emit(f, symbol);
  CompileOptions co;
  co.opt_level = options.opt_level;
  co.dump_ir = options.dump_ir;
  co.dump_asm = options.dump_asm;
  CompiledKernel k;
  k.module = add_module(engine, std::move(bundle), co);
  k.fn = k.module.function<int32_t(void**)>(symbol);
  k.symbol = symbol;
  return k;
}

}  // namespace cpu_jit
LOOM_END_NAMESPACE
