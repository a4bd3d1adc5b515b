// Ranks by host; see hosts.h.
#include "dist/hosts.h"

#include <algorithm>
#include <set>

#include <fmt/ranges.h>

namespace trainer::dist {

namespace {

// The hosts in order of first appearance, each with its ranks among `ranks` (every rank when
// `ranks` is null).
std::vector<std::pair<std::string, std::vector<int>>> by_host(const std::vector<std::string>& hosts,
                                                              const std::vector<int>* ranks) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (int r = 0; r < int(hosts.size()); ++r) {
    if (ranks && std::find(ranks->begin(), ranks->end(), r) == ranks->end()) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const auto& e) { return e.first == hosts[size_t(r)]; });
    if (it == out.end()) it = out.insert(out.end(), {hosts[size_t(r)], {}});
    it->second.push_back(r);
  }
  return out;
}

int64_t count_on(const std::vector<std::string>& hosts, const std::string& host) {
  return std::count(hosts.begin(), hosts.end(), host);
}

// "rank 1", "ranks 2-3", with what they are to the model where `roles` says (GridShape::role):
// "rank 1 (pipeline stage 1)"; one role for ranks that share it, else each rank's.
std::string ranks_word(const std::vector<int>& ranks, const std::vector<std::string>& roles) {
  std::string out = fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", rank_list(ranks));
  const bool named = !roles.empty() && std::all_of(ranks.begin(), ranks.end(), [&](int r) {
    return r >= 0 && r < int(roles.size()) && !roles[size_t(r)].empty();
  });
  if (!named || ranks.empty()) return out;
  const bool shared = std::all_of(ranks.begin(), ranks.end(), [&](int r) {
    return roles[size_t(r)] == roles[size_t(ranks[0])];
  });
  if (shared) return out + " (" + roles[size_t(ranks[0])] + ")";
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> each;
  for (int r : sorted) each.push_back(fmt::format("{}: {}", r, roles[size_t(r)]));
  return fmt::format("{} ({})", out, fmt::join(each, "; "));
}

// What `describe_missing` says of the nodes whose every rank is silent.
std::string lost_nodes(const std::vector<int>& silent, const std::vector<std::string>& hosts,
                       int self, const std::vector<int>& members) {
  const std::vector<std::string> whole = whole_hosts(silent, hosts);
  if (whole.empty()) return "";
  std::set<std::string> others;
  for (int r : members) others.insert(hosts[size_t(r)]);
  others.erase(hosts[size_t(self)]);
  if (whole.size() == others.size() && others.size() > 1)
    return fmt::format(
        ": no other node answers: {} is cut off from the network, or they are all "
        "lost",
        hosts[size_t(self)]);
  return fmt::format(": {} {} lost or cut off from the others", fmt::join(whole, ", "),
                     whole.size() == 1 ? "is" : "are");
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") +
           (j == i ? fmt::format("{}", sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]));
    i = j + 1;
  }
  return out;
}

std::string ranks_on_hosts(const std::vector<int>& ranks, const std::vector<std::string>& hosts,
                           const std::vector<std::string>& roles) {
  const bool known = std::all_of(ranks.begin(), ranks.end(),
                                 [&](int r) { return r >= 0 && r < int(hosts.size()); });
  if (!known || hosts.empty()) return ranks_word(ranks, roles);
  std::string out;
  for (const auto& [host, on] : by_host(hosts, &ranks)) {
    const int64_t all = count_on(hosts, host);
    out += fmt::format("{}{} on {}{}", out.empty() ? "" : ", ", ranks_word(on, roles), host,
                       int64_t(on.size()) == all && all > 1 ? fmt::format(" (all of its {})", all)
                       : int64_t(on.size()) == all          ? " (its only rank)"
                                                            : "");
  }
  return out;
}

std::string rank_name(int rank, const std::vector<std::string>& hosts,
                      const std::vector<std::string>& roles) {
  const std::string word = ranks_word({rank}, roles);
  return rank >= 0 && rank < int(hosts.size()) ? word + " on " + hosts[size_t(rank)] : word;
}

std::vector<std::string> whole_hosts(const std::vector<int>& ranks,
                                     const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (const auto& [host, on] : by_host(hosts, &ranks))
    if (int64_t(on.size()) == count_on(hosts, host)) out.push_back(host);
  return out;
}

std::string describe_missing(const std::vector<int>& silent, const std::vector<int>& late,
                             const std::vector<std::string>& hosts, int self,
                             const std::vector<int>& members,
                             const std::vector<std::string>& roles) {
  std::vector<std::string> parts;
  if (!silent.empty())
    parts.push_back(fmt::format("{} {} not answer{}", ranks_on_hosts(silent, hosts, roles),
                                silent.size() == 1 ? "does" : "do",
                                hosts.empty() ? "" : lost_nodes(silent, hosts, self, members)));
  if (!late.empty())
    parts.push_back(fmt::format(
        "{} answer{} but did not arrive (late, or issuing collectives in another order)",
        ranks_on_hosts(late, hosts, roles), late.size() == 1 ? "s" : ""));
  if (parts.empty()) return "every rank arrived and answers; the operation itself stalled in MPI";
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string placement(const std::vector<std::string>& hosts) {
  std::string out;
  for (const auto& [host, on] : by_host(hosts, nullptr))
    out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", host, ranks_word(on, {}));
  return out;
}

}  // namespace trainer::dist
