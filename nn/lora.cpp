// LoRA adapters; see lora.h and Note [LoRA].
#include "nn/lora.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/architecture.h"
#include "nn/ops/dropout.h"
#include "nn/param_layout.h"
#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/profile.h"

namespace trainer::nn {

namespace {

using namespace block_access;

constexpr const char* kPeftPrefix = "base_model.model.";

bool targeted(const ModelConfig& m, const Adapter& ad) {
  return std::find(m.lora.targets.begin(), m.lora.targets.end(), ad.name) != m.lora.targets.end();
}

template <typename T, typename Pred>
const T& find_in(const std::vector<T>& all, Pred pred) {
  const auto it = std::find_if(all.begin(), all.end(), pred);
  TRAINER_ASSERT(it != all.end(), "a LoRA target that its architecture's spec lacks");
  return *it;
}

// "x.weight" without ".weight".
std::string stem(const std::string& weight_name) {
  TRAINER_ASSERT(weight_name.ends_with(".weight"), "LoRA on {}", weight_name);
  return weight_name.substr(0, weight_name.size() - 7);
}

// Where adapter `ad`'s base outputs start among its product's: the stacked weights are
// adjacent in the unit's buffer (as the product reads them), so after the rows before base's.
int64_t output_offset(const BlockTensors& t, const Adapter& ad) {
  const Tensor &first = W(t, ad.product), &base = W(t, ad.base);
  const int64_t bytes = static_cast<const char*>(base.data) - static_cast<const char*>(first.data),
                row = base.cols() * int64_t(dtype_size(base.dtype));
  TRAINER_ASSERT(bytes >= 0 && bytes % row == 0, "a stacked LoRA base is not adjacent");
  return bytes / row;
}

// h = x A^T and dh, (N, r) each, in the block's lora_h scratch.
std::pair<Tensor, Tensor> scratch(const BlockTensors& t, int64_t N, int64_t r) {
  const Tensor& all = A(t, Act::lora_h);
  TRAINER_ASSERT(all.numel() >= 2 * N * r, "LoRA scratch of {} elements for {} tokens", all.numel(),
                 N);
  const size_t half = size_t(N * r) * dtype_size(all.dtype);
  return {make_tensor(all.data, all.dtype, {N, r}, all.device),
          make_tensor(static_cast<char*>(all.data) + half, all.dtype, {N, r}, all.device)};
}

// The block's lora_x as (N, in) of `dtype`: an fp32 buffer, so either dtype fits.
Tensor lora_x(const BlockTensors& t, const ConstTensor& x, DType dtype) {
  const Tensor& all = A(t, Act::lora_x);
  TRAINER_ASSERT(all.numel() >= x.numel(), "LoRA input scratch of {} elements for {}", all.numel(),
                 x.numel());
  return make_tensor(all.data, dtype, {x.rows(), x.cols()}, all.device);
}

// What an adapter reads of its product's input x (N, in): x itself, or x through the adapter's
// own dropout mask (adapter_dropout_mask, Note [LoRA]), written into the block's lora_x.
ConstTensor adapter_input(const Context& ctx, const BlockTensors& t, const DropoutMask& mask,
                          const ConstTensor& x) {
  if (!mask.on()) return x;
  const Tensor dropped = lora_x(t, x, x.dtype);
  dropout(ctx, dropped, x, mask);
  return dropped;
}

}  // namespace

// A row-parallel product's input is this rank's columns of the whole (N, in x degree), every
// token of it (sequence parallelism gathers none: it holds every token there).
DropoutMask adapter_dropout_mask(const BlockTensors& t, const Adapter& ad, const ConstTensor& x) {
  const DropoutMask& site = t.adapter_drop;
  if (!site.on()) return {};
  const TensorSlice& slice = t.model->tensor;
  const Matmul& product =
      find_in(*t.products, [&](const Matmul& p) { return p.weight == ad.product; });
  const bool cut = slice.degree > 1 && product.parallel == Parallel::row;
  return {site.p, philox_subkey(site.key, uint32_t(ad.a), 0, 0, 0), cut ? slice.rank * x.cols() : 0,
          cut ? slice.degree * x.cols() : 0};
}

void validate_lora(const ModelConfig& m) {
  if (!m.lora.on()) {
    USAGE_CHECK(m.dropout.adapter == 0,
                "train.lora.dropout = {:g} without adapters: set train.lora.rank, or "
                "model.dropout for dropout in the model",
                m.dropout.adapter);
    return;
  }
  const std::vector<Adapter>& choices = m.architecture().lora_targets;
  std::vector<std::string> names;
  for (const Adapter& ad : choices) names.push_back(ad.name);
  if (choices.empty()) {
    std::vector<std::string> adaptable;
    for (const Architecture* a : architectures())
      if (!a->lora_targets.empty()) adaptable.push_back(a->name);
    throw UsageError(fmt::format("train.lora: model.arch = {} has no LoRA targets (LoRA adapts {})",
                                 m.arch, fmt::join(adaptable, ", ")));
  }
  USAGE_CHECK(!m.lora.targets.empty(), "train.lora.targets is empty: name some of {}",
              fmt::join(names, ", "));
  for (size_t i = 0; i < m.lora.targets.size(); ++i) {
    const std::string& t = m.lora.targets[i];
    USAGE_CHECK(std::find(names.begin(), names.end(), t) != names.end(),
                "train.lora.targets: '{}' is not one of {}'s products ({})", t, m.arch,
                fmt::join(names, ", "));
    USAGE_CHECK(std::find(m.lora.targets.begin(), m.lora.targets.begin() + i, t) ==
                    m.lora.targets.begin() + i,
                "train.lora.targets names '{}' twice", t);
  }
  USAGE_CHECK(std::isfinite(m.lora.alpha) && m.lora.alpha > 0,
              "train.lora.alpha must be positive, got {}", m.lora.alpha);
  const ArchSpec spec = m.architecture().spec(m.base());
  for (const Adapter& ad : choices) {
    if (!targeted(m, ad)) continue;
    const ParamSpec& w = find_in(spec.block, [&](const ParamSpec& p) { return p.role == ad.base; });
    USAGE_CHECK(m.lora.rank <= std::min(w.shape[0], w.shape[1]),
                "train.lora.rank = {} exceeds {} ({} x {}): a low-rank adapter is narrower than "
                "its product",
                m.lora.rank, w.name, w.shape[0], w.shape[1]);
  }
}

bool skips_weight_grad(const ModelConfig& m, Role r) {
  return frozen_by_lora(m, r) && !is_norm(r) && r != Role::q_norm_w && r != Role::k_norm_w;
}

void add_adapters(ArchSpec& spec, const ModelConfig& m) {
  if (!m.lora.on()) return;
  const int64_t r = m.lora.rank;
  int64_t widest = 0;  // the widest input an adapter reads on this rank
  for (const Adapter& ad : m.architecture().lora_targets) {
    if (!targeted(m, ad)) continue;
    const ParamSpec base =  // a copy: the block's list grows below
        find_in(spec.block, [&](const ParamSpec& p) { return p.role == ad.base; });
    const Matmul product =
        find_in(spec.block_matmuls, [&](const Matmul& p) { return p.weight == ad.product; });
    const int64_t out = base.shape[0], in = base.shape[1];
    constexpr Split kPartial{-1, 1, true};
    const bool column = product.parallel == Parallel::column;
    // A row-parallel product reads this rank's columns of its input (an even cut).
    const int64_t degree = product.parallel == Parallel::row ? m.tensor.degree : 1;
    widest = std::max(widest, (in + degree - 1) / degree);
    spec.block.push_back({stem(base.name) + ".lora_A.weight",
                          ad.a,
                          {r, in},
                          true,
                          Init::uniform_fan_in,
                          {},
                          column ? kPartial : base.split});
    spec.block.push_back({stem(base.name) + ".lora_B.weight",
                          ad.b,
                          {out, r},
                          true,
                          Init::zeros,
                          base.hf_rows,
                          column ? base.split : kPartial});
    spec.adapters.push_back(ad);
  }
  // Every token's h and dh: `split` with all of it kept whole, so that neither tensor
  // parallelism cuts it nor sequence parallelism slices its tokens. Likewise the dropped input
  // of the widest product an adapter reads here (fp32: its gradient there is summed in fp32),
  // in training only (dropout's): scratch, which evaluation and sampling do not plan.
  spec.block_acts.push_back({Act::lora_h, 2 * r, false, ActKind::work, true, 2 * r});
  if (m.dropout.adapter > 0)
    spec.block_acts.push_back({Act::lora_x, widest, true, ActKind::scratch, true, widest});
}

void adapters_forward(const Context& ctx, const BlockTensors& t, Role product, const Tensor& y,
                      const ConstTensor& x) {
  if (!t.adapters) return;
  const float s = t.model->lora.scale();
  for (const Adapter& ad : *t.adapters) {
    if (ad.product != product) continue;
    PROFILE_SCOPE("lora_forward", "gemm");
    const Tensor &a = W(t, ad.a), &b = W(t, ad.b);
    const auto [h, dh] = scratch(t, x.rows(), a.rows());
    matmul(ctx, h, adapter_input(ctx, t, adapter_dropout_mask(t, ad, x), x), false, a, true);
    matmul(ctx, y.col_range(output_offset(t, ad), b.rows()), h, false, b, true, s, 1.0f);
  }
}

void adapters_backward(const Context& ctx, const BlockTensors& t, Role product, const Tensor& dx,
                       const ConstTensor& dy, const ConstTensor& x) {
  if (!t.adapters) return;
  const float s = t.model->lora.scale();
  for (const Adapter& ad : *t.adapters) {
    if (ad.product != product) continue;
    PROFILE_SCOPE("lora_backward", "gemm");
    const Tensor &a = W(t, ad.a), &b = W(t, ad.b);
    const auto [h, dh] = scratch(t, x.rows(), a.rows());
    const ConstTensor dy_b = dy.col_range(output_offset(t, ad), b.rows());
    const DropoutMask mask = adapter_dropout_mask(t, ad, x);
    const ConstTensor in = adapter_input(ctx, t, mask, x);     // x, or x dropped again
    matmul(ctx, h, in, false, a, true);                        // h = in A^T
    matmul(ctx, G(t, ad.b), dy_b, true, h, false, s, 1.0f);    // dB += s dy^T h
    matmul(ctx, dh, dy_b, false, b, false, s, 0.0f);           // dh = s dy B
    matmul(ctx, G(t, ad.a), dh, true, in, false, 1.0f, 1.0f);  // dA += dh^T in
    if (!mask.on()) {
      matmul(ctx, dx, dh, false, a, false, 1.0f, 1.0f);  // dx += dh A
      continue;
    }
    const Tensor d_in = lora_x(t, x, DType::f32);  // the dropped input is read: reuse its bytes
    matmul(ctx, d_in, dh, false, a, false);        // d_in = dh A
    dropout(ctx, dx, d_in, mask, /*accumulate=*/true);  // dx += d_in through the mask
  }
}

void merge_adapters(const ParamLayout& layout, const float* flat, const ParamLayout& base_layout,
                    float* base) {
  TRAINER_ASSERT(layout.config().tensor.degree == 1 && layout.config().pipeline.whole(),
                 "merging the adapters of a slice");
  for (const ParamInfo& p : base_layout.params()) {
    const ParamInfo* q = layout.find(p.name);
    TRAINER_ASSERT(q && q->numel == p.numel, "the base parameter {} is not the model's", p.name);
    std::copy_n(flat + q->offset, p.numel, base + p.offset);
  }
  const float s = layout.config().lora.scale();
  for (const ParamInfo& a : layout.params()) {
    if (!is_adapter(a.role) || !a.name.ends_with(".lora_A.weight")) continue;
    const std::string name = a.name.substr(0, a.name.size() - 14);
    const ParamInfo* b = layout.find(name + ".lora_B.weight");
    const ParamInfo* w = base_layout.find(name + ".weight");
    TRAINER_ASSERT(b && w, "the LoRA factors of {} are not paired", name);
    const int64_t out = w->shape[0], in = w->shape[1], r = a.shape[0];
    const float *A = flat + a.offset, *B = flat + b->offset;
    float* W = base + w->offset;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < out; ++o) {
      // Each product of two floats is exact in double, so only the sum over k (in order)
      // and the final addition round.
      std::vector<double> sum(size_t(in), 0.0);
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < in; ++i) sum[size_t(i)] += double(B[o * r + k]) * A[k * in + i];
      for (int64_t i = 0; i < in; ++i)
        W[o * in + i] = float(double(W[o * in + i]) + double(s) * sum[size_t(i)]);
    }
  }
}

std::string peft_module(const ModelConfig& m, const Adapter& ad) {
  const ArchSpec spec = m.architecture().spec(m.base());
  const std::string name =
      stem(find_in(spec.block, [&](const ParamSpec& p) { return p.role == ad.base; }).name);
  return name.substr(name.rfind('.') + 1);
}

LoraConfig lora_from_peft(const nlohmann::json& c, const ModelConfig& m, const std::string& file) {
  using nlohmann::json;
  auto field = [&](const char* key) { return c.contains(key) ? c[key] : json(); };
  // A field that changes what the adapters compute must hold what the trainer computes.
  auto expect = [&](const char* key, std::initializer_list<json> fine, const char* meaning) {
    const json v = field(key);
    USAGE_CHECK(v.is_null() || std::find(fine.begin(), fine.end(), v) != fine.end(),
                "{}: {} = {} is not supported: the trainer's adapters are {}", file, key, v.dump(),
                meaning);
  };
  USAGE_CHECK(c.is_object() && field("peft_type") == "LORA",
              "{}: peft_type {} is not LORA (the only adapter the trainer reads)", file,
              field("peft_type").dump());
  expect("bias", {"none"}, "without biases");
  expect("use_dora", {false}, "plain LoRA, not DoRA");
  expect("use_rslora", {false}, "scaled by alpha / r (not rsLoRA's alpha / sqrt(r))");
  expect("fan_in_fan_out", {false}, "stored (out, in) as torch.nn.Linear's weights");
  expect("modules_to_save", {json::array()}, "the only trained tensors");
  expect("layers_to_transform", {}, "on every layer");
  expect("rank_pattern", {json::object()}, "of one rank");
  expect("alpha_pattern", {json::object()}, "of one alpha");
  const json r = field("r"), alpha = field("lora_alpha"), modules = field("target_modules");
  USAGE_CHECK(r.is_number_integer() && r.get<int64_t>() > 0 && r.get<int64_t>() <= 4096,
              "{}: r = {} is not a rank (a positive integer)", file, r.dump());
  USAGE_CHECK(alpha.is_number() && alpha.get<double>() > 0, "{}: lora_alpha = {} is not positive",
              file, alpha.dump());
  LoraConfig lora{int(r.get<int64_t>()), float(alpha.get<double>()), {}};
  const std::vector<Adapter>& all = m.architecture().lora_targets;
  if (modules == "all-linear") {
    for (const Adapter& ad : all) lora.targets.push_back(ad.name);
    return lora;
  }
  USAGE_CHECK(modules.is_array() && !modules.empty(),
              "{}: target_modules = {} is not a list of module names or \"all-linear\"", file,
              modules.dump());
  std::vector<json> known;  // each adapter's module name, in the architecture's order
  for (const Adapter& ad : all) known.push_back(peft_module(m, ad));
  for (const json& name : modules)
    USAGE_CHECK(std::find(known.begin(), known.end(), name) != known.end(),
                "{}: target_modules names {}, not one of {}'s adapted modules", file, name.dump(),
                m.arch);
  for (size_t i = 0; i < all.size(); ++i)  // in that order, as train.lora.targets is read
    if (std::find(modules.begin(), modules.end(), known[i]) != modules.end())
      lora.targets.push_back(all[i].name);
  return lora;
}

float lora_dropout_from_peft(const nlohmann::json& c, const std::string& file) {
  if (!c.contains("lora_dropout") || c["lora_dropout"].is_null()) return 0;
  const nlohmann::json& p = c["lora_dropout"];
  USAGE_CHECK(p.is_number() && p.get<double>() >= 0 && p.get<double>() < 1,
              "{}: lora_dropout = {} is not a dropout probability in [0, 1)", file, p.dump());
  return p.get<float>();
}

std::string peft_name(const std::string& name) {
  return kPeftPrefix + name;
}

std::string from_peft_name(const std::string& peft) {
  USAGE_CHECK(peft.starts_with(kPeftPrefix) &&
                  (peft.ends_with(".lora_A.weight") || peft.ends_with(".lora_B.weight")),
              "{} is not a PEFT LoRA tensor name (base_model.model.<module>.lora_A.weight or "
              "lora_B.weight)",
              peft);
  return peft.substr(std::string(kPeftPrefix).size());
}

}  // namespace trainer::nn
