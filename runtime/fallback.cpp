// Fallback counts; see fallback.h.
#include "runtime/fallback.h"

#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "runtime/log.h"

namespace trainer::fallback {

namespace {
std::mutex mu;
std::map<std::string, Count>& table() {
  static std::map<std::string, Count> t;
  return t;
}
std::set<std::pair<std::string, std::string>>& logged() {
  static std::set<std::pair<std::string, std::string>> s;
  return s;
}
}  // namespace

void note(const std::string& path, const std::string& why) {
  std::lock_guard lock(mu);
  Count& c = table()[path];
  c.path = path;
  ++c.calls;
  c.why = why;
  if (logged().emplace(path, why).second) log::warn("{}: {}; running the slower path", path, why);
}

std::vector<Count> counts() {
  std::lock_guard lock(mu);
  std::vector<Count> out;
  for (const auto& [path, c] : table()) out.push_back(c);
  return out;
}

void reset() {
  std::lock_guard lock(mu);
  table().clear();
}

}  // namespace trainer::fallback
