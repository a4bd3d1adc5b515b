// data_stats: measurements of a prepared corpus for scripts/bench/data.sh: packing efficiency,
// bucket padding against naive padding to the global maximum, per-step token imbalance across
// ranks, and loader throughput. Planning statistics come from the planner (no token reads).
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "data/corpus.h"
#include "data/loader.h"
#include "data/plan.h"
#include "runtime/error.h"

namespace po = boost::program_options;
using namespace trainer::data;

namespace {

struct EpochStats {
  int64_t batches = 0, real = 0, slots = 0, steps = 0;
  double imbalance_sum = 0, imbalance_max = 0;
};

// One epoch at a world size: real tokens / padded slots, and per step (max - min) / mean of
// the ranks' real tokens.
EpochStats epoch_stats(const PlanConfig& pc, const DocIndex& docs, int world) {
  EpochPlanner steps(pc, docs);
  EpochStats s;
  for (std::vector<BatchPlan> plans; !(plans = steps.take(world)).empty();) {
    int64_t lo = INT64_MAX, hi = 0, sum = 0;
    for (const BatchPlan& p : plans) {
      s.batches += 1;
      s.real += p.real_tokens;
      s.slots += int64_t(p.rows) * p.T;
      lo = std::min(lo, p.real_tokens);
      hi = std::max(hi, p.real_tokens);
      sum += p.real_tokens;
    }
    double imb = sum > 0 ? double(hi - lo) / (double(sum) / double(plans.size())) : 0;
    s.imbalance_sum += imb;
    s.imbalance_max = std::max(s.imbalance_max, imb);
    s.steps += 1;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, split;
  int B, T, seconds_x10;
  int64_t max_tokens;
  po::options_description desc("data_stats options");
  desc.add_options()("help", "print this help")("data", po::value(&dir)->required(),
                                                "prepared corpus directory")(
      "split", po::value(&split)->default_value("train"), "split")(
      "batch-size", po::value(&B)->default_value(8), "rows per batch (stream, pack)")(
      "seq-len", po::value(&T)->default_value(1024), "sequence length")(
      "max-tokens", po::value(&max_tokens)->default_value(8192), "bucket token budget")(
      "throughput-ds", po::value(&seconds_x10)->default_value(30),
      "loader throughput run per mode, in tenths of a second");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    Corpus corpus(dir, split, {}, Verify::all, true);
    const DocIndex& docs = corpus.docs();
    uint64_t longest = 0;
    for (uint64_t d = 0; d < docs.num_docs(); ++d) longest = std::max(longest, docs.length(d));
    std::printf("corpus %s/%s: %llu documents, %llu tokens, mean %.1f, longest %llu tokens\n",
                dir.c_str(), split.c_str(), (unsigned long long)docs.num_docs(),
                (unsigned long long)docs.num_tokens(),
                double(docs.num_tokens()) / double(docs.num_docs()), (unsigned long long)longest);

    {  // the loss a model that ignores context can reach: the unigram entropy of the split
      std::vector<uint64_t> counts(corpus.manifest().vocab_size, 0);
      std::vector<int32_t> chunk(1 << 20);
      for (uint64_t pos = 0; pos < docs.num_tokens(); pos += chunk.size()) {
        const uint64_t n = std::min<uint64_t>(chunk.size(), docs.num_tokens() - pos);
        corpus.read(pos, n, chunk.data());
        for (uint64_t i = 0; i < n; ++i) ++counts[size_t(chunk[i])];
      }
      double entropy = 0;
      for (uint64_t c : counts)
        if (c > 0) {
          const double p = double(c) / double(docs.num_tokens());
          entropy -= p * std::log(p);
        }
      std::printf("unigram entropy: %.3f nats/token (perplexity %.1f)\n", entropy,
                  std::exp(entropy));
    }

    PlanConfig pack{Mode::pack, B, T, 0, 1234, false};
    EpochStats ps = epoch_stats(pack, docs, 1);
    std::printf("pack   B=%d T=%d: %lld batches, packing efficiency %.2f%% (real tokens / B*T)\n",
                B, T, (long long)ps.batches, 100.0 * double(ps.real) / double(ps.slots));

    PlanConfig bucket{Mode::bucket, B, T, max_tokens, 1234, false};
    EpochStats bs = epoch_stats(bucket, docs, 1);
    // Naive: every row (a document piece of at most T tokens) padded to the global maximum.
    uint64_t pieces = 0, gmax = std::min<uint64_t>(longest, uint64_t(T));
    for (uint64_t d = 0; d < docs.num_docs(); ++d)
      pieces += (docs.length(d) + uint64_t(T) - 1) / uint64_t(T);
    double naive = 1.0 - double(docs.num_tokens()) / (double(pieces) * double(gmax));
    std::printf(
        "bucket max_tokens=%lld T<=%d: %lld batches, padding %.2f%% of slots; naive padding to "
        "the global max (%llu) %.2f%%\n",
        (long long)max_tokens, T, (long long)bs.batches,
        100.0 * (1.0 - double(bs.real) / double(bs.slots)), (unsigned long long)gmax,
        100.0 * naive);

    for (Mode mode : {Mode::pack, Mode::bucket}) {
      for (int world : {2, 4}) {
        PlanConfig pc = mode == Mode::pack ? pack : bucket;
        EpochStats s = epoch_stats(pc, docs, world);
        std::printf(
            "imbalance %-6s world=%d: %lld steps, mean %.2f%%, max %.2f%% "
            "((max-min)/mean real tokens per step)\n",
            kModeNames.name(mode), world, (long long)s.steps,
            100.0 * s.imbalance_sum / double(std::max<int64_t>(1, s.steps)),
            100.0 * s.imbalance_max);
      }
    }

    for (Mode mode : {Mode::stream, Mode::pack, Mode::bucket}) {
      LoaderConfig lc;
      lc.data_dir = dir;
      lc.split = split;
      lc.mode = mode;
      lc.batch_size = B;
      lc.seq_len = T;
      lc.max_tokens = max_tokens;
      lc.seed = 1;
      lc.verify = Verify::none;
      Loader loader(lc, 0, 1);
      auto t0 = std::chrono::steady_clock::now();
      int64_t tokens = 0, batches = 0;
      double s = 0;
      while (s < seconds_x10 / 10.0) {
        std::optional<Batch> b = loader.next();
        if (!b) break;
        tokens += b->loss_tokens;
        batches += 1;
        s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      std::printf("loader %-6s: %lld batches, %.2f M loss tokens/s\n", kModeNames.name(mode),
                  (long long)batches, double(tokens) / s / 1e6);
    }
  } catch (const po::error& e) {
    std::fprintf(stderr, "data_stats: %s\n%s", e.what(), "try --help\n");
    return 2;
  } catch (const trainer::Error& e) {
    std::fprintf(stderr, "data_stats: %s\n", e.what());
    return 1;
  }
  return 0;
}
