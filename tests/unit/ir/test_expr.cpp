// IR nodes: validation, printing, structural equality/hashing, traversal.
#include <doctest/doctest.h>
#include <loom/loom.hpp>

using loom::user_error;
using namespace loom::ir;

TEST_SUITE("ir") {
  TEST_CASE("make() rejects ill-typed nodes with a clear message") {
    Expr f = FloatImm::make(DType::f32(), 1.5), i = Variable::make("i");
    CHECK_THROWS_WITH_AS(Add::make(f, i),
                         "[loom.ir.E007] Add of mismatched types float32 and int64; insert a cast",
                         user_error);
    Tensor A = make_placeholder("A", DType::f32(), {4, 5});
    CHECK_THROWS_WITH_AS(TensorRead::make(A, {i}),
                         "[loom.ir.E019] tensor 'A' has rank 2 but is read with 1 indices",
                         user_error);
    CHECK_THROWS_WITH_AS(TensorRead::make(A, {i, f}),
                         "[loom.ir.E021] index 1 of 'A' has type float32; indices must be integers",
                         user_error);
    CHECK_THROWS_WITH_AS(
        Call::make(CallOp::exp, {i}),
        "[loom.ir.E017] exp needs a float argument, got int64; cast it to float first", user_error);
    CHECK_THROWS_WITH_AS(
        make_placeholder("B", DType::f32(), {3, 0}),
        "[loom.ir.E029] tensor 'B' has extent 0 in dimension 1; extents must be positive",
        user_error);
    CHECK_THROWS_AS(Select::make(i, f, f), user_error);
    CHECK_THROWS_AS(And::make(i, i), user_error);
  }

  TEST_CASE("constants wrap to their type") {
    CHECK(as_const_int(IntImm::make(DType::i32(), int64_t{1} << 32 | 7))[0] == 7);
    CHECK(as_const_int(IntImm::make(DType::i32(), 0xffffffffll))[0] == -1);
    CHECK(FloatImm::make(DType::f32(), 0.1).as<FloatImm>()->value == static_cast<double>(0.1f));
  }

  TEST_CASE("printer uses precedence and typed literals") {
    Expr i = Variable::make("i"), j = Variable::make("j");
    CHECK(to_string((i + j) * 2) == "(i + j)*2");
    CHECK(to_string(i - (j - 1)) == "i - (j - 1)");
    CHECK(to_string(i - j - 1) == "i - j - 1");
    CHECK(to_string(floordiv(i, 4) + floormod(j, 3)) == "floordiv(i, 4) + floormod(j, 3)");
    CHECK(to_string(bitxor(floormod(i, 8), j) * 8) == "bitxor(floormod(i, 8), j)*8");
    CHECK(to_string(i < j && j < 8) == "i < j && j < 8");
    CHECK(to_string(Not::make(i < j)) == "!(i < j)");
    CHECK(to_string(FloatImm::make(DType::f32(), 2.0)) == "2.0f");
    CHECK(to_string(FloatImm::make(DType::f64(), 0.1)) == "0.1");
    CHECK(to_string(FloatImm::make(DType::f32(), 0.1)) == "0.1f");
    CHECK(to_string(IntImm::make(DType::i32(), 3)) == "int32(3)");
    CHECK(to_string(Cast::make(DType::f32(), i)) == "float32(i)");
    CHECK(to_string(reduce_identity(ReduceOp::Max, DType::f32())) == "-inff");
    CHECK(to_string(reduce_identity(ReduceOp::Min, DType::f64())) == "inf");
  }

  TEST_CASE("structural equality maps bound and, on request, free variables") {
    Expr i = Variable::make("i"), j = Variable::make("j");
    CHECK(structural_equal(i * 2 + 1, i * 2 + 1));
    CHECK_FALSE(structural_equal(i * 2 + 1, j * 2 + 1));
    CHECK(structural_equal(i * 2 + 1, j * 2 + 1, /*map_free_vars=*/true));
    CHECK_FALSE(structural_equal(i + j, j + j, true));
    CHECK_FALSE(structural_equal(i * 2, i * 3));
    // Hash ignores names and numbers variables by first appearance.
    CHECK(structural_hash(i * 2 + 1) == structural_hash(j * 2 + 1));
    CHECK(structural_hash(i + j) != structural_hash(i + i));
    CHECK(structural_hash(i * 2) != structural_hash(i * 3));

    Tensor A = make_placeholder("A", DType::f32(), {8});
    IterVar k1{Variable::make("k"), 8, IterKind::Reduce},
        k2{Variable::make("r"), 8, IterKind::Reduce};
    Expr s1 = Reduce::make(ReduceOp::Sum, TensorRead::make(A, {k1.var}), {k1});
    Expr s2 = Reduce::make(ReduceOp::Sum, TensorRead::make(A, {k2.var}), {k2});
    CHECK(structural_equal(s1, s2));  // bound variables match by position
    CHECK(structural_hash(s1) == structural_hash(s2));
  }

  TEST_CASE("mutator keeps identity when nothing changes, substitute replaces variables") {
    Expr i = Variable::make("i"), j = Variable::make("j");
    Expr e = (i + 1) * j;
    ExprMutator m;
    CHECK(m.mutate(e).same_as(e));
    Expr r = substitute(e, {{i.as<Variable>(), j * 2}});
    CHECK(to_string(r) == "(j*2 + 1)*j");
    CHECK(substitute(e, {}).same_as(e));
    auto fv = free_vars(e);
    REQUIRE(fv.size() == 2);
    CHECK(fv[0]->name == "i");
    CHECK(fv[1]->name == "j");
    CHECK(uses_var(e, j.as<Variable>()));
  }

  TEST_CASE("make_compute checks free variables and reduction placement") {
    Tensor A = make_placeholder("A", DType::f32(), {4, 4});
    IterVar i{Variable::make("i"), 4, IterKind::Spatial};
    IterVar k{Variable::make("k"), 4, IterKind::Reduce};
    Expr stray = Variable::make("z");
    CHECK_THROWS_WITH_AS(make_compute("C", {i}, TensorRead::make(A, {i.var, stray})),
                         doctest::Contains("[loom.ir.E031] variable 'z' in compute 'C'"),
                         user_error);
    Expr red = Reduce::make(ReduceOp::Sum, TensorRead::make(A, {i.var, k.var}), {k});
    CHECK_THROWS_WITH_AS(make_compute("C", {i}, red * 2.0f),
                         doctest::Contains("[loom.dsl.E105] a reduction must be the whole body"),
                         user_error);
    Tensor C = make_compute("C", {i}, red, "rowsum");
    CHECK(C.shape() == std::vector<int64_t>{4});
    CHECK(to_string(C) == "C[i] = sum(A[i, k], axis=[k:4])");
    CHECK(input_tensors(C).size() == 1);
  }

  TEST_CASE("dtype names round-trip") {
    for (DType t : {DType::f32(), DType::f64(), DType::i32(), DType::i64(), DType::boolean(),
                    DType::f32().with_lanes(16)})
      CHECK(parse_dtype(to_string(t)) == t);
    CHECK_THROWS_WITH_AS(parse_dtype("half"), doctest::Contains("[loom.ir.E040]"), user_error);
  }
}
