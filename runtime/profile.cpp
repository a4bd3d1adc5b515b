#include "runtime/profile.h"

#include <algorithm>
#include <map>

namespace trainer::profile {

bool g_enabled = false;

namespace {
std::map<std::string, Entry>& entries() {
  static std::map<std::string, Entry> e;
  return e;
}
}  // namespace

void set_enabled(bool on) {
  g_enabled = on;
}
void reset() {
  entries().clear();
}

void record(const char* name, double ms) {
  Entry& e = entries()[name];
  e.name = name;
  e.ms += ms;
  ++e.calls;
}

std::vector<Entry> report() {
  std::vector<Entry> out;
  for (const auto& [name, e] : entries()) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace trainer::profile
