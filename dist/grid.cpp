#include "dist/grid.h"

#include <fmt/ranges.h>

#include <vector>

#include "nn/ops/sum_squares.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"

namespace trainer::dist {

Grid::Grid(Communicator& world, int tensor, int pipeline, const LaunchInfo& launch)
    : world_(world) {
  const int n = world.size();
  if (tensor < 1 || n % tensor != 0)
    throw UsageError(fmt::format(
        "dist.tensor_parallel = {} does not divide the {} ranks (the ranks form tensor groups of "
        "that size: launch a multiple of {} ranks, or choose a divisor of {})",
        tensor, n, tensor, n));
  if (pipeline < 1 || n % (tensor * pipeline) != 0)
    throw UsageError(fmt::format(
        "dist.tensor_parallel x dist.pipeline_parallel = {} x {} does not divide the {} ranks "
        "(each model replica takes that many: launch a multiple of {} ranks)",
        tensor, pipeline, n, tensor * pipeline));
  if (tensor > 1 && (launch.local_size % tensor != 0) && world.rank() == 0)
    log::warn(
        "dist.tensor_parallel = {} with {} ranks per node: some tensor groups span nodes, whose "
        "links are far slower than a node's; it works, slowly (choose a degree that divides the "
        "ranks per node)",
        tensor, launch.local_size);
  shape_ = {tensor, pipeline, n / (tensor * pipeline)};
  std::vector<std::string> roles;
  for (int rank = 0; rank < n; ++rank) roles.push_back(shape_.role(rank));
  world.name_ranks(std::move(roles));
  const int r = world.rank();
  const auto [t, s, d] = shape_.place(r);
  tensor_ = tensor > 1 ? world.split(r / tensor, t) : make_single_process_communicator();
  if (pipeline > 1) {
    pipeline_ = world.split(d * tensor + t, s);
    const bool end = s == 0 || s == pipeline - 1;
    ends_ = world.split(end ? d * tensor + t : n + r, s);
  } else {
    pipeline_ = make_single_process_communicator();
    ends_ = make_single_process_communicator();
  }
  if (tensor > 1 || pipeline > 1) data_ = world.split(s * tensor + t, d);
}

Grid::~Grid() {
  tensor_.reset();  // before the world's communicator, which may own their queue
  pipeline_.reset();
  ends_.reset();
  data_.reset();
}

std::string Grid::describe() const {
  const auto [t, p, d] = shape_;
  if (t == 1 && p == 1) return fmt::format("{} data-parallel rank(s)", d);
  std::string dims;
  if (t > 1) dims += fmt::format("{} tensor x ", t);
  if (p > 1) dims += fmt::format("{} pipeline x ", p);
  // The groups of tensor ranks: the first replica's stages with pipelining.
  const int shown = p > 1 ? p : d;
  std::vector<std::string> groups;
  for (int g = 0; g < shown && g < 4; ++g) {
    std::vector<int> ranks;
    for (int i = 0; i < t; ++i)
      ranks.push_back(p > 1 ? shape_.rank({i, g, 0}) : shape_.rank({i, 0, g}));
    groups.push_back(fmt::format("{{{}}}", fmt::join(ranks, ",")));
  }
  return fmt::format("{}{} data ({} {}{})", dims, d,
                     p > 1 ? "the first replica's stages" : "tensor groups", fmt::join(groups, " "),
                     shown > 4 ? " ..." : "");
}

void CommTensorGroup::all_reduce(const Tensor& x) {
  TRAINER_ASSERT(x.contiguous(), "a tensor-parallel sum of a strided tensor");
  ordered(comm_.all_reduce_async(x.data, x.numel(), x.dtype, order_));
}

void CommTensorGroup::all_gather(const Tensor& out, const ConstTensor& x) {
  TRAINER_ASSERT(x.contiguous() && out.contiguous() && out.numel() == x.numel() * size() &&
                     out.dtype == x.dtype,
                 "a tensor-parallel gather's shapes");
  ordered(comm_.all_gather_async(x.data, out.data, x.numel(), x.dtype));
}

void CommTensorGroup::reduce_scatter(const Tensor& out, const ConstTensor& x) {
  TRAINER_ASSERT(x.contiguous() && out.contiguous() && x.numel() == out.numel() * size() &&
                     out.dtype == x.dtype,
                 "a tensor-parallel reduce-scatter's shapes");
  ordered(comm_.reduce_scatter_async(x.data, out.data, out.numel(), out.dtype, order_));
}

void CommTensorGroup::ordered(Work w) {
  w.order_stream_after();
  in_flight_.push_back(std::move(w));
  while (!in_flight_.empty() && in_flight_.front().done()) {
    in_flight_.front().wait();  // throws its failure
    in_flight_.pop_front();
  }
}

void CommTensorGroup::wait() {
  for (; !in_flight_.empty(); in_flight_.pop_front()) in_flight_.front().wait();
}

GradNormShare::GradNormShare(const nn::Model& model, const DataParallel& dp, int tensor_rank,
                             bool skip_embedding) {
  const int E = model.layout().embedding_unit();
  for (const nn::ParamInfo& p : model.layout().params())
    if ((p.split.dim >= 0 || tensor_rank == 0) && !(skip_embedding && p.unit == E))
      nn::for_each_held(dp.slices(), p.offset, p.offset + p.numel,
                        [&](int64_t local, int64_t b, int64_t e) {
                          pieces_.push_back({local, e - b});
                        });
  sums_ = Buffer(std::max<size_t>(1, pieces_.size()) * sizeof(double), model.context().device);
}

double GradNormShare::sum_squares(const Context& ctx, const ConstTensor& grads) {
  if (pieces_.empty()) return 0;
  const Tensor out = sums_.view(DType::f64, int64_t(pieces_.size()));
  for (size_t i = 0; i < pieces_.size(); ++i)
    nn::sum_squares(ctx, out.flat(int64_t(i), 1), grads.flat(pieces_[i].first, pieces_[i].second));
  std::vector<double> host(pieces_.size());
  copy(ctx, make_tensor(host.data(), DType::f64, {int64_t(host.size())}), out);
  double total = 0;
  for (double v : host) total += v;
  return total;
}

}  // namespace trainer::dist
