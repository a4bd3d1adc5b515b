// Named layout of every parameter inside one flat fp32 buffer. Gradients and optimizer state
// use the same offsets, so DDP buckets, ZeRO shards and checkpoints address any tensor as a
// (offset, numel) range. Names follow Hugging Face's GPT-2 layout ("h.0.attn.c_attn.weight").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/model_config.h"

namespace trainer::nn {

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in elements, 16-element aligned
  int64_t numel = 0;
  bool decay = false;  // matrices decay; biases, norms and embeddings do not (by default)
  int block = -1;      // transformer block index; -1 for embeddings, n_layer for the final norm
};

// Offsets of one block's tensors, in elements from the start of the flat buffer.
struct BlockParams {
  int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  int64_t begin, end;  // the block's whole range
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);

  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }
  // The parameter called `name`, or nullptr.
  const ParamInfo* find(const std::string& name) const;

  int64_t wte() const { return wte_; }
  int64_t wpe() const { return wpe_; }
  int64_t lnf_w() const { return lnf_w_; }
  int64_t lnf_b() const { return lnf_b_; }
  const BlockParams& block(int i) const { return blocks_[size_t(i)]; }
  // A digest of names, shapes and offsets: equal layouts have equal digests.
  uint64_t digest() const;

 private:
  int64_t add(std::string name, std::vector<int64_t> shape, bool decay, int block);
  std::vector<ParamInfo> params_;
  std::vector<BlockParams> blocks_;
  int64_t total_ = 0;
  int64_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
};

}  // namespace trainer::nn
