// Start-up agreement checks; see consistency.h.
#include "dist/consistency.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace trainer::dist {

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool is_text(const std::string& s) {
  return std::none_of(s.begin(), s.end(), [](char c) { return c == '\0'; });
}

// The dotted key of lines[k] in block-style YAML: its own key, under the keys of the nearest
// less-indented lines above it ("model.n_layer").
std::string yaml_key(const std::vector<std::string>& lines, size_t k) {
  auto indent = [](const std::string& l) { return l.find_first_not_of(' '); };
  auto key = [](const std::string& l) {
    const size_t b = l.find_first_not_of(' '), colon = l.find(':');
    return colon == std::string::npos || b == std::string::npos ? std::string()
                                                                : l.substr(b, colon - b);
  };
  std::string path = key(lines[k]);
  if (path.empty()) return "";
  size_t level = indent(lines[k]);
  for (size_t i = k; i-- > 0 && level > 0;) {
    const size_t in = indent(lines[i]);
    if (in == std::string::npos || in >= level || key(lines[i]).empty()) continue;
    path = key(lines[i]) + "." + path;
    level = in;
  }
  return path;
}

// Sends root's `text` to every rank.
std::string broadcast_text(Communicator& comm, const std::string& text, int root) {
  int64_t n = comm.rank() == root ? int64_t(text.size()) : 0;
  comm.broadcast(&n, sizeof n, root);
  std::string out = comm.rank() == root ? text : std::string(size_t(n), '\0');
  if (n > 0) comm.broadcast(out.data(), n, root);
  return out;
}

}  // namespace

std::string first_difference(const std::string& a, const std::string& b, int rank_b) {
  if (!is_text(a) || !is_text(b)) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return fmt::format("from byte {} (rank 0: {} bytes, rank {}: {} bytes)", i, a.size(), rank_b,
                       b.size());
  }
  const std::vector<std::string> x = lines_of(a), y = lines_of(b);
  size_t k = 0;
  while (k < x.size() && k < y.size() && x[k] == y[k]) ++k;
  auto shown = [](const std::vector<std::string>& l, size_t i) {
    if (i >= l.size()) return std::string("nothing");
    const size_t b = l[i].find_first_not_of(' ');  // YAML indentation says nothing here
    return fmt::format("'{}'", b == std::string::npos ? "" : l[i].substr(b));
  };
  const std::string key = k < x.size() ? yaml_key(x, k) : k < y.size() ? yaml_key(y, k) : "";
  return fmt::format("at {}: rank 0 has {}, rank {} has {}",
                     key.empty() ? fmt::format("line {}", k + 1) : "'" + key + "'", shown(x, k),
                     rank_b, shown(y, k));
}

void check_consistency(Communicator& comm, const std::vector<ConsistencyItem>& items) {
  std::vector<int64_t> mine;
  for (const ConsistencyItem& item : items) mine.push_back(int64_t(hash64(item.content)));
  const std::vector<int64_t> all = comm.all_gather(mine);
  const size_t n = items.size();
  for (size_t item = 0; item < n; ++item) {
    std::vector<int> differ;
    for (int r = 1; r < comm.size(); ++r)
      if (all[size_t(r) * n + item] != all[item]) differ.push_back(r);
    if (differ.empty()) continue;
    // Every rank learns both contents, so every rank can name the same first difference.
    const std::string& content = items[item].content;
    const std::string ours = broadcast_text(comm, content, 0);
    const std::string theirs = broadcast_text(comm, content, differ.front());
    THROW_ERROR(
        "start-up consistency check failed: {} differs between ranks: rank(s) {} do not match "
        "rank 0, first {}; every rank must be started with the same config, model, data and "
        "tokenizer",
        items[item].name, fmt::join(differ, ", "), first_difference(ours, theirs, differ.front()));
  }
}

std::string binary_identity() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "unknown (no /proc/self/exe)\n";
  std::ifstream in(exe, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return fmt::format("{} bytes, hash {:016x}\n", bytes.size(), hash64(bytes));
}

void broadcast_parameters(Communicator& comm, const Tensor& params) {
  comm.broadcast(params.data, params.bytes(), 0);
}

}  // namespace trainer::dist
