// Bodies of loom/sched/record.hpp: steps to JSON and back.
#include "loom/sched/record.hpp"

#include "loom/error.hpp"

#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace sched {

namespace detail {

using json = nlohmann::json;

// Writes at most about `budget` characters of `j`. Messages must neither throw nor recurse
// without bound: dump() throws on a string that is not UTF-8 (hence `replace`) and recurses once
// per nesting level, which a hostile record can make deep enough to overflow the stack.
inline void show_into(const json& j, std::string& out, size_t budget, int depth) {
  if (out.size() >= budget) return;
  if (j.is_array() || j.is_object()) {
    if (depth >= 4) {
      out += j.is_array() ? "[...]" : "{...}";
      return;
    }
    out += j.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end() && out.size() < budget; ++it, first = false) {
      if (!first) out += ',';
      if (j.is_object())
        out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ':';
      show_into(*it, out, budget, depth + 1);
    }
    out += j.is_array() ? ']' : '}';
    return;
  }
  out += j.dump(-1, ' ', false, json::error_handler_t::replace);
}

inline std::string show(const json& j) {
  std::string s;
  show_into(j, s, 60, 0);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

inline const char* type_of(const json& j) {
  if (j.is_number_integer()) return "integer";
  return j.type_name();
}

/// The field layout of one tag: names of the fields after the tag, for arity errors.
struct layout {
  const char* tag;
  std::vector<const char*> fields;
};

template <size_t... I>
std::vector<layout> step_layouts(std::index_sequence<I...>) {
  auto one = [](const auto& fields, const char* tag) {
    layout l{tag, {}};
    std::apply([&](const auto&... f) { (l.fields.push_back(f.name), ...); }, fields);
    return l;
  };
  return {one(std::variant_alternative_t<I, Step>::fields,
              std::variant_alternative_t<I, Step>::tag)...};
}

// In the order of the Step variant, so that layouts()[step.index()] describes a step.
inline const std::vector<layout>& layouts() {
  static const std::vector<layout> table =
      step_layouts(std::make_index_sequence<std::variant_size_v<Step>>{});
  return table;
}

inline std::string tag_list() {
  std::string s;
  for (const layout& l : layouts()) s += std::string(s.empty() ? "" : ", ") + l.tag;
  return s;
}

/// Reads the fields of one step record, turning every malformation into [loom.sched.E250].
class step_reader {
 public:
  step_reader(const json& j, size_t index) : j_(j), index_(index) {}

  /// Checks the outer form and returns the variant index of the tag.
  size_t read_tag() {
    LOOM_USER_CHECK(j_.is_array(), "loom.sched.E250")
        << "step " << index_ << ": a step record is a JSON array [tag, fields...], got "
        << type_of(j_) << ' ' << show(j_);
    LOOM_USER_CHECK(!j_.empty() && j_[0].is_string(), "loom.sched.E250")
        << "step " << index_ << ": a step record starts with its tag string (\"SP\", \"FU\", ...), "
        << "got " << show(j_);
    const std::string& tag = j_[0].get_ref<const std::string&>();
    const auto& table = layouts();
    for (size_t v = 0; v < table.size(); ++v)
      if (tag == table[v].tag) {
        layout_ = &table[v];
        break;
      }
    LOOM_USER_CHECK(layout_ != nullptr, "loom.sched.E250")
        << "step " << index_ << ": unknown step tag " << show(j_[0]) << " (expected one of "
        << tag_list() << ")";
    LOOM_USER_CHECK(j_.size() == layout_->fields.size() + 1, "loom.sched.E250")
        << "step " << index_ << " (" << tag << "): expected " << layout_->fields.size()
        << " fields after the tag (" << field_list() << "), got " << j_.size() - 1;
    return static_cast<size_t>(layout_ - table.data());
  }

  std::string string(size_t k) {
    const json& v = field(k);
    if (!v.is_string()) fail(k, "must be a string", v);
    return v.get<std::string>();
  }

  int64_t integer(size_t k) {
    const json& v = field(k);
    if (!v.is_number_integer()) fail(k, "must be an integer", v);
    // Unsigned values above INT64_MAX would wrap to negative numbers on conversion.
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(k, "is out of range", v);
    return v.get<int64_t>();
  }

  /// An `int` field that counts or indexes something: an integer in [0, INT_MAX].
  int position(size_t k) { return checked_position(k, field(k), ""); }

  std::vector<int> positions(size_t k) {
    const json& v = array(k);
    std::vector<int> out;
    for (size_t e = 0; e < v.size(); ++e) out.push_back(checked_position(k, v[e], element(e)));
    return out;
  }

  std::vector<std::optional<int64_t>> lengths(size_t k) {
    const json& v = array(k);
    std::vector<std::optional<int64_t>> out;
    for (size_t e = 0; e < v.size(); ++e) {
      if (v[e].is_null()) {
        out.emplace_back();
        continue;
      }
      if (!v[e].is_number_integer() ||
          (v[e].is_number_unsigned() &&
           v[e].get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
        fail(k, element(e) + "must be an integer or null (unset)", v[e]);
      out.emplace_back(v[e].get<int64_t>());
    }
    return out;
  }

  std::vector<std::string> strings(size_t k) {
    const json& v = array(k);
    std::vector<std::string> out;
    for (size_t e = 0; e < v.size(); ++e) {
      if (!v[e].is_string()) fail(k, element(e) + "must be a string", v[e]);
      out.push_back(v[e].get<std::string>());
    }
    return out;
  }

  bool boolean(size_t k) {
    const json& v = field(k);
    // Ansor writes this flag as 0/1; accept both spellings.
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_number_integer() && (v == 0 || v == 1)) return v == 1;
    fail(k, "must be true or false", v);
    return false;
  }

  Annotation annotation(size_t k) {
    if (const std::optional<Annotation> a = find_annotation(string(k))) return *a;
    fail(k,
         "is not a loop annotation (none, parallel, vectorize, unroll, vthread, blockIdx.x, "
         "threadIdx.x, ...)",
         field(k));
    return Annotation::Serial;
  }

  ir::MemoryScope scope(size_t k) {
    if (const std::optional<ir::MemoryScope> sc = find_scope(string(k))) return *sc;
    fail(k, "is not a memory scope (global, local or shared)", field(k));
    return ir::MemoryScope::Global;
  }

  /// Narrows an int64 field to `int` (max_step is an int in PragmaStep).
  int small_integer(size_t k) {
    int64_t v = integer(k);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail(k, "is out of range", field(k));
    return static_cast<int>(v);
  }

  /// Field `k` as the type of the member `f` names; a type without a case does not compile.
  template <class S, class T>
  T read(size_t k, [[maybe_unused]] const StepField<S, T>& f) {
    if constexpr (std::is_same_v<T, std::string>)
      return string(k);
    else if constexpr (std::is_same_v<T, int>)
      return f.range == FieldRange::NonNegative ? position(k) : small_integer(k);
    else if constexpr (std::is_same_v<T, int64_t>)
      return integer(k);
    else if constexpr (std::is_same_v<T, bool>)
      return boolean(k);
    else if constexpr (std::is_same_v<T, Annotation>)
      return annotation(k);
    else if constexpr (std::is_same_v<T, ir::MemoryScope>)
      return scope(k);
    else if constexpr (std::is_same_v<T, std::vector<int>>)
      return positions(k);
    else if constexpr (std::is_same_v<T, std::vector<std::string>>)
      return strings(k);
    else if constexpr (std::is_same_v<T, std::vector<std::optional<int64_t>>>)
      return lengths(k);
    else
      static_assert(sizeof(T) == 0, "a step field of a type the record reader does not know");
  }

 private:
  const json& field(size_t k) const { return j_[k + 1]; }

  const json& array(size_t k) {
    const json& v = field(k);
    if (!v.is_array()) fail(k, "must be an array", v);
    return v;
  }

  static std::string element(size_t e) { return "element " + std::to_string(e) + " "; }

  int checked_position(size_t k, const json& v, const std::string& where) {
    // Positions index loops, steps of the history or axes: a negative one is never meaningful,
    // and rejecting it here keeps a corrupt record from reaching code that indexes with it.
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      fail(k, where + "must be a non-negative integer", v);
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max()))
      fail(k, where + "is out of range", v);
    return static_cast<int>(v.get<int64_t>());
  }

  std::string field_list() const {
    std::string s;
    for (size_t i = 0; i < layout_->fields.size(); ++i)
      s += std::string(i ? ", " : "") + layout_->fields[i];
    return s;
  }

  // Always throws; callers read on only after it.
  void fail(size_t k, const std::string& what, const json& v) {
    LOOM_USER_FAIL("loom.sched.E250")
        << "step " << index_ << " (" << layout_->tag << "): field " << k + 1 << " ("
        << layout_->fields[k] << ") " << what << ", got " << type_of(v) << ' ' << show(v);
  }

  const json& j_;
  size_t index_;
  const layout* layout_ = nullptr;
};

template <class S>
S read_fields(step_reader& r) {
  S step{};
  size_t k = 0;
  std::apply([&](const auto&... f) { ((step.*(f.member) = r.read(k++, f)), ...); }, S::fields);
  return step;
}

template <size_t... I>
Step read_alternative(step_reader& r, size_t index, std::index_sequence<I...>) {
  using reader = Step (*)(step_reader&);
  static constexpr reader readers[] = {[](step_reader& rd) -> Step {
    return read_fields<std::variant_alternative_t<I, Step>>(rd);
  }...};
  return readers[index](r);
}

inline Step read_step(const json& j, size_t index) {
  step_reader r(j, index);
  const size_t alternative = r.read_tag();
  return read_alternative(r, alternative, std::make_index_sequence<std::variant_size_v<Step>>{});
}

// The JSON of one field value, by its type; a type without a case does not compile.
template <class T>
json field_json(const T& v) {
  if constexpr (std::is_same_v<T, Annotation>)
    return annotation_name(v);
  else if constexpr (std::is_same_v<T, ir::MemoryScope>)
    return scope_name(v);
  else if constexpr (std::is_same_v<T, std::vector<std::optional<int64_t>>>) {
    json lengths = json::array();
    for (auto& l : v) lengths.push_back(l ? json(*l) : json(nullptr));
    return lengths;
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, int> ||
                       std::is_same_v<T, int64_t> || std::is_same_v<T, bool> ||
                       std::is_same_v<T, std::vector<int>> ||
                       std::is_same_v<T, std::vector<std::string>>)
    return json(v);
  else
    static_assert(sizeof(T) == 0, "a step field of a type the record writer does not know");
}

}  // namespace detail

LOOM_DECL nlohmann::json to_json(const Step& step) {
  nlohmann::json j = nlohmann::json::array();
  j.push_back(step_tag(step));
  std::visit(
      [&](const auto& s) {
        for_each_field(
            s, [&](const auto&, const auto& value) { j.push_back(detail::field_json(value)); });
      },
      step);
  return j;
}

LOOM_DECL Step step_from_json(const nlohmann::json& j) { return detail::read_step(j, 0); }

LOOM_DECL nlohmann::json history_to_json(const std::vector<Step>& steps) {
  nlohmann::json j = nlohmann::json::array();
  for (auto& s : steps) j.push_back(to_json(s));
  return j;
}

LOOM_DECL std::vector<Step> history_from_json(const nlohmann::json& j) {
  LOOM_USER_CHECK(j.is_array(), "loom.sched.E250")
      << "a step history is a JSON array of step records, got " << detail::type_of(j) << ' '
      << detail::show(j);
  std::vector<Step> steps;
  steps.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) steps.push_back(detail::read_step(j[i], i));
  return steps;
}

LOOM_DECL std::string to_record(const std::vector<Step>& steps) {
  try {
    return history_to_json(steps).dump();
  } catch (const nlohmann::json::exception& e) {
    // Only a stage name that is not valid UTF-8 gets here; JSON cannot carry it.
    LOOM_USER_FAIL("loom.sched.E250") << "the step history cannot be written as JSON: " << e.what();
  }
  return {};
}

LOOM_DECL std::vector<Step> from_record(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    LOOM_USER_FAIL("loom.sched.E250") << "a step record is not valid JSON: " << e.what();
  }
  return history_from_json(j);
}

}  // namespace sched
LOOM_END_NAMESPACE
