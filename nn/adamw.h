// AdamW (decoupled weight decay, PyTorch's update order) over a range of the flat parameter
// buffer, with fp32 moments for that range only: a shard is just a smaller range. The update
// itself is the fused adamw_update op, one call per parameter span.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/param_layout.h"
#include "runtime/buffer.h"
#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  bool decay_embeddings = false;  // decay the embedding unit's tensors too (recipes differ)
};

class AdamW {
 public:
  // Optimises elements [begin, end) of the flat buffers described by `layout`, except the
  // parameters for which frozen(name) is true: those keep their values and get no state.
  // The moments live on `device`.
  AdamW(const ParamLayout& layout, const AdamWConfig& config, int64_t begin, int64_t end,
        const std::function<bool(const std::string&)>& frozen = nullptr,
        Device device = Device::cpu);

  // One update of params[begin, end) (fp32, the whole flat buffer) from grads * grad_scale
  // (grad_scale folds in clipping); `working` (bf16, the whole flat buffer, or empty) receives
  // the updated values rounded.
  void step(const Context& ctx, const Tensor& params, const Tensor& grads, const Tensor& working,
            float lr, float grad_scale);

  int64_t steps() const { return step_; }
  void set_steps(int64_t s) { step_ = s; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  // Moments of the trainable elements, in flat order (frozen ones skipped): state_size()
  // elements each.
  int64_t state_size() const { return state_size_; }
  // Copies the moments to/from host flat arrays over [begin, end) (frozen elements read as
  // zero): the layout checkpoints use, independent of what is frozen or sharded.
  void export_moments(float* m_flat, float* v_flat) const;
  void import_moments(const float* m_flat, const float* v_flat);
  const AdamWConfig& config() const { return config_; }

 private:
  struct Span {
    int64_t begin, end;  // flat range
    int64_t state;       // where its moments start in m_ and v_
    bool decay;
  };
  Tensor moments(const Buffer& b, const Span& s) const;
  AdamWConfig config_;
  int64_t begin_, end_;
  std::vector<Span> spans_;  // the parameters within [begin, end), with their decay flag
  int64_t state_size_ = 0;
  Buffer m_, v_;
  int64_t step_ = 0;
};

// The factor that scales gradients of global norm `norm` down to max_norm (1 if already below
// or if max_norm <= 0), as torch.nn.utils.clip_grad_norm_ computes it.
float clip_scale(double norm, float max_norm);

}  // namespace trainer::nn
