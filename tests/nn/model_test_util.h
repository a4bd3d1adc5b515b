// Helpers for whole-model tests: exec configs, the summed loss of one batch, host copies of
// parameters and gradients, and one optimizer step as the training loop takes it.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "nn/adamw.h"
#include "nn/model.h"
#include "nn/model_config.h"
#include "runtime/memory.h"

namespace trainer::nn::testing {

inline ExecConfig exec_for(int rows, int seq_len, DType compute = DType::f32,
                           Recompute recompute = Recompute::none) {
  ExecConfig e;
  e.max_rows = rows;
  e.max_seq_len = seq_len;
  e.compute = compute;
  e.recompute = recompute;
  return e;
}

// Two rows of 8 tokens and targets, every id below `vocab`.
struct TinyBatch {
  int B = 2, T = 8;
  std::vector<int32_t> tokens, targets;
  explicit TinyBatch(int vocab = 31) {
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back((i * 7 + 3) % vocab);
      targets.push_back((i * 5 + 1) % vocab);
    }
  }
  BatchView view() const { return {B, T, tokens.data(), targets.data(), nullptr, nullptr}; }
};

struct LossSum {
  double sum = 0;
  int64_t count = 0;
};

// The summed loss and counted targets of one forward on `batch`.
inline LossSum loss_of(Model& model, const BatchView& batch) {
  model.reset_loss();
  const int64_t count = model.forward(batch);
  return {model.read_step_scalars({}).loss_sum, count};
}

inline std::vector<float> host_params(Model& model) {
  return read_as_f32(model.context(), model.params());
}
inline std::vector<float> host_grads(Model& model) {
  return read_as_f32(model.context(), model.grads());
}

// zero_grads, forward and backward of the mean loss on `batch`; returns the loss sum.
inline LossSum forward_backward(Model& model, const BatchView& batch) {
  model.zero_grads();
  const LossSum ls = loss_of(model, batch);
  model.backward(1.0f / float(ls.count));
  return ls;
}

// Clipping by the global norm (max_norm) and one AdamW update, as the training loop does it.
inline void optimizer_step(Model& model, AdamW& opt, float lr, float max_norm) {
  const StepScalars s = model.read_step_scalars(model.grads());
  opt.step(model.context(), model.params(), model.grads(), model.working_copy(), lr,
           clip_scale(std::sqrt(s.grad_norm_sq), max_norm));
}

}  // namespace trainer::nn::testing
