// See strict_json.h.
#include "runtime/strict_json.h"

#include <set>
#include <vector>

#include "runtime/error.h"

namespace trainer {

nlohmann::json parse_strict_json(std::string_view text, const std::string& where) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> names;  // each open object's members so far
  std::string twice;
  json j;
  try {
    j = json::parse(text, [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) names.emplace_back();
      if (event == json::parse_event_t::object_end) names.pop_back();
      if (event == json::parse_event_t::key &&
          !names.back().insert(parsed.get<std::string>()).second && twice.empty())
        twice = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: malformed JSON: {}", where, e.what()));
  }
  USAGE_CHECK(twice.empty(), "{}: \"{}\" is given twice in one object (which value is meant?)",
              where, twice);
  return j;
}

}  // namespace trainer
