// Tensor parallelism inside the model (Note [Tensor-parallel splits]): a model cut into R slices,
// each run by a thread of its own over an in-process group, against the whole model on the same
// batch: the slices' losses add up to the whole loss, and each slice's gradient is its part of
// the whole gradient, for every architecture, with grouped key/value heads, a packed batch and
// each checkpointing policy. (The MPI group, the data-parallel composition and training are
// tested under mpirun in tests/app/tensor_parallel_test.cpp.)
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "common/arch_family.h"
#include "model_test_util.h"
#include "nn/dropout.h"
#include "nn/transformer.h"
#include "runtime/memory.h"

namespace trainer::nn {

namespace {

using testing::exec_for;
using testing::forward_backward;
using testing::host_grads;

// R ranks that are threads of one process: each collective posts every rank's buffer, and
// every rank then sums (or copies) them in rank order, so every rank gets the same bits.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), sync_(size), posted_(size_t(size)) {}

  class Member final : public TensorGroup {
   public:
    Member(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_.size_; }
    void all_reduce(const Tensor& x) override {
      write(x, exchange(x, [&](int, const std::vector<float>& in, std::vector<float>& out) {
              out.resize(in.size());
              for (size_t i = 0; i < in.size(); ++i) out[i] += in[i];
            }));
    }
    void reduce_scatter(const Tensor& out, const ConstTensor& x) override {
      const size_t n = size_t(out.numel()), at = size_t(rank_) * n;
      write(out, exchange(x, [&](int, const std::vector<float>& in, std::vector<float>& sum) {
              sum.resize(n);
              for (size_t i = 0; i < n; ++i) sum[i] += in[at + i];
            }));
    }
    void all_gather(const Tensor& out, const ConstTensor& x) override {
      write(out, exchange(x, [&](int, const std::vector<float>& in, std::vector<float>& all) {
              all.insert(all.end(), in.begin(), in.end());
            }));
    }
    void wait() override {}  // every collective is done when it returns

   private:
    // Posts this rank's x, waits for every rank's, folds them in rank order with
    // add(rank, its values, result), and waits again so that no rank posts anew before all have
    // read.
    template <typename Add>
    std::vector<float> exchange(const ConstTensor& x, Add&& add) {
      const std::vector<float> in = read_as_f32(Context{}, x);
      g_.posted_[size_t(rank_)] = &in;
      g_.sync_.arrive_and_wait();
      std::vector<float> result;
      for (int r = 0; r < g_.size_; ++r) add(r, *g_.posted_[size_t(r)], result);
      g_.sync_.arrive_and_wait();
      return result;
    }
    static void write(const Tensor& dst, const std::vector<float>& v) {
      TRAINER_ASSERT(dst.dtype == DType::f32 && int64_t(v.size()) == dst.numel(),
                     "the thread group carries fp32 (the test's models)");
      std::memcpy(dst.data, v.data(), v.size() * sizeof(float));
    }
    ThreadGroup& g_;
    int rank_;
  };

 private:
  int size_;
  std::barrier<> sync_;
  std::vector<const std::vector<float>*> posted_;
};

ModelConfig config_for(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 32;
  c.max_seq_len = 12;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  if (trainer::testing::llama_like(arch)) {
    c.n_kv_head = 4;  // grouped below
    c.ffn_multiple_of = 16;
    c.tie_embeddings = false;
  }
  if (arch == "qwen3") c.head_dim = 16;  // twice n_embd / n_head
  if (arch == "neox") c.rotary_pct = 0.25;
  return c;
}

struct Batch {
  int B = 2, T = 10;
  std::vector<int32_t> tokens, targets, segments;
  Batch() {
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back((i * 7 + 3) % 32);
      targets.push_back(i % 9 == 4 ? -1 : (i * 5 + 1) % 32);
      segments.push_back(i % T < 6 ? 0 : 1);  // two documents per row
    }
  }
  BatchView view() const { return {B, T, tokens.data(), targets.data(), segments.data(), nullptr}; }
};

// Every parameter set to a value of its name and its element's place in the whole tensor (so
// that biases and norms are not zeros and ones, whose mistakes would not show), the same in a
// slice as in the whole model.
void set_distinct_weights(Transformer& model) {
  std::vector<float> values(size_t(model.layout().total()), 0.0f);
  for (const ParamInfo& p : model.layout().params()) {
    const double salt = double(std::hash<std::string>{}(p.name) % 1000);
    for_each_whole_run(p, 0, p.numel, [&](int64_t local, int64_t at, int64_t count) {
      for (int64_t i = 0; i < count; ++i)
        values[size_t(p.offset + local + i)] = float(0.2 * std::sin(0.37 * double(at + i) + salt));
    });
  }
  copy(model.context(), model.params(),
       make_tensor(values.data(), DType::f32, {int64_t(values.size())}));
  model.sync_working_params();
}

struct Case {
  std::string arch;
  int kv_heads;  // llama only
  int degree;
  Recompute recompute;
  bool sequence = false;  // sequence parallelism
  bool dropout = false;   // at every site (Note [Dropout]): each rank draws the whole model's masks
  bool lora = false;      // rank-3 adapters on every product (Note [LoRA]), with dropout theirs too
};

class TensorParallelModel : public ::testing::TestWithParam<Case> {};

// Each gradient element is a sum over the batch's tokens (and, through the cut products, of
// partial sums the group adds) taken in another association than the whole model's: fp32
// rounding of the sum's terms, about 1e-7 of them. The terms can be much larger than the sum (a
// norm's bias gradient cancels over the tokens), so the error reaches a few 1e-5 of a tensor's
// largest gradient (4.3e-5 at most here, a LayerNorm bias); 2e-4 of it leaves 4x margin on any
// CPU. A wrong cut (another rank's slice, a missing sum, a bias added twice) is off by the
// gradient's own size.
TEST_P(TensorParallelModel, SlicesAddUpToTheWholeModel) {
  const Case c = GetParam();
  ModelConfig whole = config_for(c.arch);
  if (trainer::testing::llama_like(c.arch)) whole.n_kv_head = c.kv_heads;
  if (c.dropout) whole.dropout = {0.1f, 0.2f, 0.15f};
  if (c.lora) {
    whole.lora = {3, 6.0f, {"q", "k", "v", "o", "gate", "up", "down"}};
    if (c.dropout) whole.dropout.adapter = 0.3f;
  }
  const ExecConfig exec = exec_for(2, 10, DType::f32, c.recompute);
  const Batch tokens;
  BatchView view = tokens.view();
  if (c.dropout) view.dropout_key = dropout_batch_key(5, 4, 3);
  const BatchView& batch = view;
  Transformer reference(whole, exec);
  set_distinct_weights(reference);
  const double whole_loss = forward_backward(reference, batch).sum;
  const std::vector<float> whole_grads = host_grads(reference);

  ThreadGroup group(c.degree);
  std::vector<double> losses(size_t(c.degree));
  std::vector<std::vector<float>> grads(size_t(c.degree));
  std::vector<std::unique_ptr<Transformer>> slices(size_t(c.degree));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.degree; ++r)
    threads.emplace_back([&, r] {
      ModelConfig m = whole;
      m.tensor = {c.degree, r, c.sequence};
      auto& model = slices[size_t(r)];
      model = std::make_unique<Transformer>(m, exec);
      set_distinct_weights(*model);
      ThreadGroup::Member member(group, r);
      model->attach_tensor_group(&member);
      losses[size_t(r)] = forward_backward(*model, batch).sum;
      grads[size_t(r)] = host_grads(*model);
      model->attach_tensor_group(nullptr);
    });
  for (std::thread& t : threads) t.join();

  double sum = 0;
  for (double l : losses) sum += l;
  EXPECT_NEAR(sum, whole_loss, 1e-6 * whole_loss);
  const ParamLayout& full = reference.layout();
  for (int r = 0; r < c.degree; ++r)
    for (const ParamInfo& p : slices[size_t(r)]->layout().params()) {
      const ParamInfo& w = *full.find(p.name);
      float largest = 0;
      for (int64_t i = 0; i < w.numel; ++i)
        largest = std::max(largest, std::abs(whole_grads[size_t(w.offset + i)]));
      for_each_whole_run(p, 0, p.numel, [&](int64_t local, int64_t at, int64_t count) {
        for (int64_t i = 0; i < count; ++i)
          ASSERT_NEAR(grads[size_t(r)][size_t(p.offset + local + i)],
                      whole_grads[size_t(w.offset + at + i)], 2e-4f * largest + 1e-12f)
              << p.name << " element " << local + i << " of rank " << r;
      });
    }
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, TensorParallelModel,
    ::testing::Values(
        Case{"gpt2", 0, 2, Recompute::none}, Case{"gpt2", 0, 4, Recompute::full},
        Case{"llama", 4, 2, Recompute::selective}, Case{"llama", 2, 2, Recompute::none},
        Case{"llama", 4, 4, Recompute::none}, Case{"neox", 0, 2, Recompute::full},
        Case{"gpt2", 0, 2, Recompute::none, true}, Case{"gpt2", 0, 4, Recompute::selective, true},
        Case{"llama", 2, 2, Recompute::full, true}, Case{"neox", 0, 4, Recompute::none, true},
        Case{"llama", 2, 4, Recompute::none}, Case{"llama", 1, 2, Recompute::full, true},
        // Qwen2's q/k/v biases cut with their projections (16 channels of each a slice).
        Case{"qwen2", 4, 2, Recompute::none}, Case{"qwen2", 4, 2, Recompute::selective, true},
        // Qwen3's head norms on each rank's heads, and on the one key/value head a rank uses
        // where every rank holds them all.
        Case{"qwen3", 4, 2, Recompute::selective}, Case{"qwen3", 2, 4, Recompute::none, true},
        // Dropout: masks of replicated activations alike on every rank, of a rank's heads and
        // tokens the whole model's (GPT-NeoX's parallel branches drop apart).
        Case{"gpt2", 0, 2, Recompute::none, false, true},
        Case{"gpt2", 0, 4, Recompute::full, true, true},
        Case{"llama", 2, 4, Recompute::selective, true, true},
        Case{"neox", 0, 2, Recompute::none, false, true},
        Case{"neox", 0, 2, Recompute::full, true, true},
        // LoRA: adapters cut with their products; their input's masks over a row-parallel
        // product's column slice are the whole input's (and key/value heads held whole).
        Case{"llama", 4, 2, Recompute::none, false, false, true},
        Case{"llama", 4, 2, Recompute::none, false, true, true},
        Case{"llama", 2, 4, Recompute::full, true, true, true},
        Case{"qwen2", 4, 2, Recompute::selective, true, true, true}),
    [](const auto& info) {
      return info.param.arch + "_kv" + std::to_string(info.param.kv_heads) + "_tp" +
             std::to_string(info.param.degree) + "_" + kRecomputeNames.name(info.param.recompute) +
             (info.param.sequence ? "_sp" : "") + (info.param.dropout ? "_dropout" : "") +
             (info.param.lora ? "_lora" : "");
    });

// The initial weights of a slice are its part of the whole model's (a tensor's values depend on
// its name and each element's place in the whole tensor), so runs at any degree start alike.
TEST(TensorParallelModel, SlicesStartAsTheirPartOfTheWhole) {
  const ModelConfig whole = config_for("gpt2");
  const ExecConfig exec = exec_for(1, 4);
  Transformer reference(whole, exec);
  reference.init_weights(3);
  const std::vector<float> all = read_as_f32(reference.context(), reference.params());
  ModelConfig m = whole;
  m.tensor = {4, 3};
  Transformer slice(m, exec);
  slice.init_weights(3);
  const std::vector<float> mine = read_as_f32(slice.context(), slice.params());
  for (const ParamInfo& p : slice.layout().params()) {
    const ParamInfo& w = *reference.layout().find(p.name);
    for_each_whole_run(p, 0, p.numel, [&](int64_t local, int64_t at, int64_t count) {
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(mine[size_t(p.offset + local + i)], all[size_t(w.offset + at + i)]) << p.name;
    });
  }
}

// Note [Sequence parallelism]: the residual stream (and the norms, their statistics and the
// branch outputs) hold 1/degree of the tokens, the per-head activations all of them.
TEST(TensorParallelModel, SequenceParallelismHoldsASliceOfTheResidualStream) {
  ModelConfig m = config_for("gpt2");
  const ExecConfig exec = exec_for(2, 12);
  m.tensor = {4, 1, false};
  const ActivationPlan tp(m, exec);
  m.tensor.sequence = true;
  const ActivationPlan sp(m, exec);
  const int64_t N = 2 * 12, C = m.n_embd;
  // fp32 slots of 3072 and 768 bytes: multiples of 256, so no alignment padding between.
  EXPECT_EQ(tp.residual(1).offset - tp.residual(0).offset, N * C * 4);
  EXPECT_EQ(sp.residual(1).offset - sp.residual(0).offset, N / 4 * C * 4);
  EXPECT_TRUE(sp.block(0, Act::ln1).sliced && !sp.block(0, Act::qkv).sliced);
  // 13 (N, C) fp32 slots hold 6 tokens instead of 24, 2304 bytes less each (the residual
  // stream, the norms' outputs, res_mid, d_res, d_ln, tmp), against the gathered and partial
  // (N, C) buffers sequence parallelism adds: 29 KiB less, 6 KiB more.
  EXPECT_LT(sp.bytes(), tp.bytes());
}

// A degree that does not divide what it cuts is refused by name, with the fix.
TEST(TensorParallelModel, RefusesUnevenCuts) {
  auto message = [](ModelConfig m) {
    try {
      ParamLayout layout(m);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  ModelConfig m = config_for("gpt2");
  m.tensor = {3, 0};
  EXPECT_NE(message(m).find("does not divide model.n_head = 4"), std::string::npos) << message(m);
  m = config_for("llama");  // 2 ranks sharing 3 key/value heads: neither way works
  m.n_head = 6;
  m.n_embd = 48;
  m.n_kv_head = 3;
  m.tensor = {2, 0};
  EXPECT_NE(message(m).find("neither divides model.n_kv_head = 3"), std::string::npos)
      << message(m);
  m = config_for("gpt2");
  m.vocab_size = 30;
  m.tensor = {4, 0};
  EXPECT_NE(message(m).find("model.vocab_size = 30"), std::string::npos) << message(m);
  m = config_for("llama");
  m.ffn_hidden = 40;  // F = 40 rows of gate and up: not 3 equal pieces
  m.ffn_multiple_of = 8;
  m.n_head = 3;
  m.n_embd = 48;
  m.n_kv_head = 3;
  m.vocab_size = 33;
  m.tensor = {3, 0};
  EXPECT_NE(message(m).find("mlp.gate_proj.weight"), std::string::npos) << message(m);
}

}  // namespace

}  // namespace trainer::nn
