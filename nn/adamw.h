// AdamW (decoupled weight decay, PyTorch's update order) over slices of the flat parameter
// buffer, with fp32 moments for those slices only: the whole model is one slice, a shard is a
// few. The update itself is the fused adamw_update op, one call per parameter span.
#pragma once

#include <algorithm>
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

// Elements [begin, end) of the model's flat buffer, held at [local, local + end - begin) of
// the buffers the optimizer is given (the whole model: {0, total, 0}).
struct FlatSlice {
  int64_t begin = 0, end = 0, local = 0;
  int64_t size() const { return end - begin; }
};

// Calls fn(local, b, e) for each part [b, e) of the flat range [begin, end) that `slices` hold,
// `local` being where that part starts in the local buffers.
template <typename Fn>
void for_each_held(const std::vector<FlatSlice>& slices, int64_t begin, int64_t end, Fn&& fn) {
  for (const FlatSlice& s : slices) {
    const int64_t b = std::max(begin, s.begin), e = std::min(end, s.end);
    if (b < e) fn(s.local + (b - s.begin), b, e);
  }
}

class AdamW {
 public:
  // Optimises `slices` of the flat buffers described by `layout`, except the parameters for
  // which frozen(name) is true: those keep their values and get no state. The moments live
  // on `device`.
  AdamW(const ParamLayout& layout, const AdamWConfig& config, std::vector<FlatSlice> slices,
        const std::function<bool(const std::string&)>& frozen = nullptr,
        Device device = Device::cpu);

  // One update of the slices of `params` (fp32, local buffers of local_size() elements or
  // more) from grads * grad_scale (grad_scale folds in clipping); `working` (bf16, local, or
  // empty) receives the updated values rounded.
  void step(const Context& ctx, const Tensor& params, const ConstTensor& grads,
            const Tensor& working, float lr, float grad_scale);

  int64_t steps() const { return step_; }
  void set_steps(int64_t s) { step_ = s; }
  const std::vector<FlatSlice>& slices() const { return slices_; }
  // Elements the local buffers must have: the end of the last slice.
  int64_t local_size() const;
  // Moments of the trainable elements (frozen ones skipped): state_size() elements each.
  int64_t state_size() const { return state_size_; }
  // The state_size() an AdamW of these arguments has, without making one (the memory plans).
  static int64_t state_size_of(const ParamLayout& layout, const std::vector<FlatSlice>& slices,
                               const std::function<bool(const std::string&)>& frozen);
  // Copies the moments of flat elements [begin, end) (which must lie in one slice) to/from
  // host arrays of end - begin floats; frozen elements read as zero and ignore writes. The
  // layout checkpoints use, independent of what is frozen or sharded. `ctx` is the model's:
  // on a GPU the copies are ordered on its stream, after the steps queued there and before
  // the next (an import is queued; an export is complete when it returns).
  void export_moments(const Context& ctx, int64_t begin, int64_t end, float* m, float* v) const;
  void import_moments(const Context& ctx, int64_t begin, int64_t end, const float* m,
                      const float* v);
  const AdamWConfig& config() const { return config_; }

 private:
  struct Span {
    int64_t begin, end;  // flat range
    int64_t local;       // where it lies in the local buffers
    int64_t state;       // where its moments start in m_ and v_
    bool decay;
  };
  Tensor moments(const Buffer& b, const Span& s) const;
  template <class Fn>
  void for_spans_in(int64_t begin, int64_t end, Fn fn) const;
  AdamWConfig config_;
  std::vector<FlatSlice> slices_;
  std::vector<Span> spans_;  // the parameters within [begin, end), with their decay flag
  int64_t state_size_ = 0;
  Buffer m_, v_;
  int64_t step_ = 0;
};

// The factor that scales gradients of global norm `norm` down to max_norm (1 if already below
// or if max_norm <= 0), as torch.nn.utils.clip_grad_norm_ computes it.
float clip_scale(double norm, float max_norm);

}  // namespace trainer::nn
