// Step records (loom/sched/record.hpp): the JSON form of every step, round trips through text and
// replay, and the rejection of malformed records with [loom.sched.E250].
#include <doctest/doctest.h>
#include <loom/sched/record.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "support/random_schedule.hpp"

using loom::user_error;
using nlohmann::json;
using namespace loom::sched;

namespace {

/// One step of every kind, with unset lengths, every annotation family and scope.
std::vector<Step> one_of_each() {
  return {
      SplitStep{"C", 0, 64, {8, std::nullopt}},
      FollowSplitStep{"C.local", 1, 0, 2},
      FollowFusedSplitStep{"A.shared", 2, {0, 3}, 1, true},
      FuseStep{"C", {0, 1, 2}},
      ReorderStep{"C", {2, 0, 1}},
      AnnotationStep{"C", 0, Annotation::Parallel},
      AnnotationStep{"C", 3, Annotation::ThreadIdxX},
      ComputeAtStep{"C.local", "C", 1},
      ComputeRootStep{"pad"},
      ComputeInlineStep{"pad"},
      CacheReadStep{"A", loom::ir::MemoryScope::Shared, {"C", "D"}},
      CacheWriteStep{"C", loom::ir::MemoryScope::Local},
      PragmaStep{"C", 0, 64},
      StorageAlignStep{"A.shared", 0, 32, 8},
      StoragePermuteStep{"A.shared", 0, 8, 4, 1},
      RfactorStep{"C", 2, 1},
  };
}

std::string lowered_text(const State& s) {
  std::ostringstream os;
  os << loom::lower::lower(s);
  return os.str();
}

}  // namespace

TEST_SUITE("sched") {
  TEST_CASE("each step kind has a compact Ansor-like JSON form") {
    auto steps = one_of_each();
    CHECK(to_json(steps[0]).dump() == R"(["SP","C",0,64,[8,null]])");
    CHECK(to_json(steps[1]).dump() == R"(["FSP","C.local",1,0,2])");
    CHECK(to_json(steps[2]).dump() == R"(["FFSP","A.shared",2,[0,3],1,true])");
    CHECK(to_json(steps[3]).dump() == R"(["FU","C",[0,1,2]])");
    CHECK(to_json(steps[4]).dump() == R"(["RE","C",[2,0,1]])");
    CHECK(to_json(steps[5]).dump() == R"(["AN","C",0,"parallel"])");
    CHECK(to_json(steps[6]).dump() == R"(["AN","C",3,"threadIdx.x"])");
    CHECK(to_json(steps[7]).dump() == R"(["CA","C.local","C",1])");
    CHECK(to_json(steps[8]).dump() == R"(["CR","pad"])");
    CHECK(to_json(steps[9]).dump() == R"(["CI","pad"])");
    CHECK(to_json(steps[10]).dump() == R"(["CHR","A","shared",["C","D"]])");
    CHECK(to_json(steps[11]).dump() == R"(["CHW","C","local"])");
    CHECK(to_json(steps[12]).dump() == R"(["PR","C",0,64])");
    CHECK(to_json(steps[13]).dump() == R"(["SA","A.shared",0,32,8])");
    CHECK(to_json(steps[14]).dump() == R"(["SPM","A.shared",0,8,4,1])");
    CHECK(to_json(steps[15]).dump() == R"(["RF","C",2,1])");
    for (auto& s : steps) CHECK(to_json(s)[0] == step_tag(s));
  }

  TEST_CASE("every step survives a JSON round trip unchanged") {
    auto steps = one_of_each();
    for (auto& s : steps) {
      CAPTURE(to_string(s));
      Step back = step_from_json(to_json(s));
      CHECK(back.index() == s.index());
      CHECK(to_json(back) == to_json(s));
      CHECK(to_string(back) == to_string(s));
    }
    // The split's extent and unset length are fields to_string() does not show.
    auto sp = std::get<SplitStep>(step_from_json(to_json(steps[0])));
    CHECK(sp.extent == 64);
    REQUIRE(sp.lengths.size() == 2);
    CHECK(sp.lengths[0] == 8);
    CHECK(!sp.lengths[1].has_value());
    auto text = to_record(steps);
    CHECK(text.find('\n') == std::string::npos);  // one line of a log
    auto again = from_record(text);
    REQUIRE(again.size() == steps.size());
    CHECK(history_to_json(again) == history_to_json(steps));
    CHECK(to_record(again) == text);
  }

  TEST_CASE("Ansor's 0/1 spelling of follow_fused_split's flag is accepted") {
    auto s =
        std::get<FollowFusedSplitStep>(step_from_json(json::parse(R"(["FFSP","A",0,[1],0,0])")));
    CHECK(!s.factor_or_nparts);
    s = std::get<FollowFusedSplitStep>(step_from_json(json::parse(R"(["FFSP","A",0,[1],0,1])")));
    CHECK(s.factor_or_nparts);
  }

  TEST_CASE("a recorded schedule replays to the same state and the same loop nest") {
    auto w = loom_test::matmul_bias_relu(13, 17, 19);
    State s(w.dag);
    auto cl = s.cache_write("C", loom::ir::MemoryScope::Local);
    s.split("D", 0, {4});
    s.split("D", 2, {8});
    s.reorder("D", {0, 2, 1, 3});
    s.compute_inline("C");
    s.compute_at(cl, "D", 1);
    s.split(cl, 2, {4});
    s.follow_split(cl, 0, 1, 1);
    s.annotate("D", 0, Annotation::Parallel);
    s.annotate("D", 3, Annotation::Vectorized);
    s.pragma_unroll(cl, 0, 16);
    std::string text = to_record(s.steps());
    State back = replay(w.dag, from_record(text));
    CHECK(back.to_string() == s.to_string());
    CHECK(lowered_text(back) == lowered_text(s));
    CHECK(to_record(back.steps()) == text);
    auto ref = loom_test::make_reference(w, 5);
    auto r = loom_test::run_and_compare(w, ref, back);
    CHECK_MESSAGE(r.ok, r.message);
  }

  TEST_CASE("a well-formed record of an illegal step is rejected when it is replayed") {
    auto w = loom_test::matmul(8, 8, 8);
    auto steps = from_record(R"([["SP","C",0,8,[4]],["FU","C",[0,2]]])");
    CHECK_THROWS_WITH_AS(replay(w.dag, steps), doctest::Contains("[loom.sched.E213]"), user_error);
    // A history recorded for another shape: the split's extent does not match.
    steps = from_record(R"([["SP","C",0,16,[4]]])");
    CHECK_THROWS_WITH_AS(replay(w.dag, steps), doctest::Contains("[loom.sched.E208]"), user_error);
  }

  TEST_CASE("malformed records are rejected with E250 naming the step and the problem") {
    struct bad {
      const char* text;
      const char* message;
    };
    const bad cases[] = {
        {R"([["SP","C",0,8,[4]], ["XX","C"]])",
         "[loom.sched.E250] step 1: unknown step tag \"XX\""},
        {R"([["SP","C",0,8]])",
         "[loom.sched.E250] step 0 (SP): expected 4 fields after the tag (stage, iter, extent, "
         "lengths), got 3"},
        {R"([["CR","C","D"]])", "[loom.sched.E250] step 0 (CR): expected 1 fields"},
        {R"([["SP","C",-1,8,[4]]])",
         "[loom.sched.E250] step 0 (SP): field 2 (iter) must be a non-negative integer, got "
         "integer -1"},
        {R"([["SP","C","0",8,[4]]])",
         "field 2 (iter) must be a non-negative integer, got string \"0\""},
        {R"([["SP","C",0.5,8,[4]]])",
         "field 2 (iter) must be a non-negative integer, got number 0.5"},
        {R"([["SP","C",0,8,4]])", "step 0 (SP): field 4 (lengths) must be an array, got integer 4"},
        {R"([["SP","C",0,8,[4,"x"]]])",
         "field 4 (lengths) element 1 must be an integer or null (unset), got string \"x\""},
        {R"([["SP","C",0,8,[4.0]]])",
         "element 0 must be an integer or null (unset), got number 4.0"},
        {R"([["SP","C",0,8,[18446744073709551615]]])", "element 0 must be an integer or null"},
        {R"([["SP","C",0,18446744073709551615,[4]]])", "field 3 (extent) is out of range"},
        {R"([["SP","C",4294967296,8,[4]]])",
         "field 2 (iter) is out of range, got integer 4294967296"},
        {R"([["SP",7,0,8,[4]]])", "step 0 (SP): field 1 (stage) must be a string, got integer 7"},
        {R"([["FU","C",[0,-1]]])",
         "step 0 (FU): field 2 (iters) element 1 must be a non-negative integer, got integer -1"},
        {R"([["RE","C",{"a":1}]])", "step 0 (RE): field 2 (order) must be an array, got object"},
        {R"([["AN","C",0,"fast"]])", "step 0 (AN): field 3 (annotation) is not a loop annotation"},
        {R"([["AN","C",0,2]])", "field 3 (annotation) must be a string, got integer 2"},
        {R"([["CA","C","D",-3]])",
         "step 0 (CA): field 3 (target_iter) must be a non-negative integer"},
        {R"([["CA","C",1,0]])", "field 2 (target) must be a string"},
        {R"([["CHR","A","texture",["C"]]])",
         "step 0 (CHR): field 2 (scope) is not a memory scope (global, local or shared)"},
        {R"([["CHR","A","local",["C",3]]])", "field 3 (readers) element 1 must be a string"},
        {R"([["CHW","C",null]])", "step 0 (CHW): field 2 (scope) must be a string, got null"},
        {R"([["PR","C",0,"auto_unroll_max_step$16"]])",
         "step 0 (PR): field 3 (max_step) must be an integer"},
        {R"([["PR","C",0,4294967296]])", "step 0 (PR): field 3 (max_step) is out of range"},
        {R"([["SA","C",-1,4,0]])", "step 0 (SA): field 2 (axis) must be a non-negative integer"},
        {R"([["FSP","C",0,-1,2]])",
         "step 0 (FSP): field 3 (src_step) must be a non-negative integer"},
        {R"([["FFSP","C",0,[0],0,2]])",
         "step 0 (FFSP): field 5 (factor_or_nparts) must be true or false"},
        {R"([["FFSP","C",0,[-2],0,true]])", "field 3 (src_steps) element 0 must be a non-negative"},
        {R"([["RF","C",0,-1]])",
         "step 0 (RF): field 3 (factor_axis) must be a non-negative integer"},
        {R"([["RF","C",0]])",
         "step 0 (RF): expected 3 fields after the tag (stage, iter, "
         "factor_axis), got 2"},
        {R"([["CR","C"], "CR"])", "[loom.sched.E250] step 1: a step record is a JSON array"},
        {R"([["CR","C"], []])",
         "[loom.sched.E250] step 1: a step record starts with its tag string"},
        {R"([[1,"C"]])", "step 0: a step record starts with its tag string"},
        {R"({"SP": 1})",
         "[loom.sched.E250] a step history is a JSON array of step records, got object"},
        {R"("steps")", "a step history is a JSON array of step records, got string"},
        {R"([["SP","C",0,8,[4]])", "[loom.sched.E250] a step record is not valid JSON"},
        {"", "[loom.sched.E250] a step record is not valid JSON"},
    };
    for (auto& c : cases) {
      CAPTURE(c.text);
      CHECK_THROWS_WITH_AS(from_record(c.text), doctest::Contains(c.message), user_error);
    }
  }

  TEST_CASE("a single malformed step is named as step 0") {
    CHECK_THROWS_WITH_AS(step_from_json(json::parse(R"(["FU","C"])")),
                         "[loom.sched.E250] step 0 (FU): expected 2 fields after the tag (stage, "
                         "iters), got 1",
                         user_error);
    CHECK_THROWS_WITH_AS(
        step_from_json(json(42)),
        "[loom.sched.E250] step 0: a step record is a JSON array [tag, fields...], "
        "got integer 42",
        user_error);
  }

  TEST_CASE("hostile records fail cleanly: deep nesting, long values, bad UTF-8") {
    // Deep nesting must neither overflow the stack nor escape as an nlohmann exception.
    std::string deep(100000, '[');
    deep += std::string(100000, ']');
    CHECK_THROWS_WITH_AS(from_record(deep), doctest::Contains("[loom.sched.E250] step 0"),
                         user_error);
    // Long values are cut short in the message.
    std::string long_tag = R"([[")" + std::string(1000, 'Z') + R"("]])";
    try {
      from_record(long_tag);
      FAIL("no exception");
    } catch (const user_error& e) {
      CHECK(std::string(e.what()).size() < 300);
    }
    // A stage name that is not UTF-8 cannot be written as JSON, and reading such bytes from text
    // is a parse error; neither escapes as an nlohmann exception.
    std::vector<Step> bad_name{ComputeRootStep{"C\xff"}};
    CHECK_THROWS_WITH_AS(to_record(bad_name), doctest::Contains("[loom.sched.E250]"), user_error);
    CHECK_THROWS_WITH_AS(from_record("[[\"CR\",\"C\xff\"]]"),
                         doctest::Contains("[loom.sched.E250] a step record is not valid JSON"),
                         user_error);
    // In an already-parsed document the bad bytes are shown replaced.
    json j = json::array({json::array({"XX\xff"})});
    CHECK_THROWS_WITH_AS(history_from_json(j), doctest::Contains("unknown step tag"), user_error);
  }
}
