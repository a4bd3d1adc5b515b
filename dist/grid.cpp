#include "dist/grid.h"

#include <fmt/ranges.h>

#include <vector>

#include "nn/ops/sum_squares.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"

namespace trainer::dist {

Grid::Grid(Communicator& world, int tensor, const LaunchInfo& launch) : world_(world) {
  const int n = world.size();
  if (tensor < 1 || n % tensor != 0)
    throw UsageError(fmt::format(
        "dist.tensor_parallel = {} does not divide the {} ranks (the ranks form tensor groups of "
        "that size: launch a multiple of {} ranks, or choose a divisor of {})",
        tensor, n, tensor, n));
  if (tensor > 1 && (launch.local_size % tensor != 0) && world.rank() == 0)
    log::warn(
        "dist.tensor_parallel = {} with {} ranks per node: some tensor groups span nodes, whose "
        "links are far slower than a node's; it works, slowly (choose a degree that divides the "
        "ranks per node)",
        tensor, launch.local_size);
  const int r = world.rank();
  if (tensor > 1) {
    tensor_ = world.split(r / tensor, r % tensor);
    data_ = world.split(r % tensor, r / tensor);
  } else {
    tensor_ = make_single_process_communicator();
  }
}

Grid::~Grid() {
  tensor_.reset();  // before the world's communicator, which may own their queue
  data_.reset();
}

std::string Grid::describe() const {
  const int t = tensor_->size(), d = world_.size() / t;
  if (t == 1) return fmt::format("{} data-parallel rank(s)", d);
  std::vector<std::string> groups;
  for (int g = 0; g < d && g < 4; ++g) {
    std::vector<int> ranks;
    for (int i = 0; i < t; ++i) ranks.push_back(g * t + i);
    groups.push_back(fmt::format("{{{}}}", fmt::join(ranks, ",")));
  }
  return fmt::format("{} tensor x {} data (tensor groups {}{})", t, d, fmt::join(groups, " "),
                     d > 4 ? " ..." : "");
}

void CommTensorGroup::all_reduce(const Tensor& x) {
  TRAINER_ASSERT(x.contiguous(), "a tensor-parallel sum of a strided tensor");
  comm_.all_reduce_async(x.data, x.numel(), x.dtype, order_).wait();
}

void CommTensorGroup::all_gather(const Tensor& out, const ConstTensor& x) {
  TRAINER_ASSERT(x.contiguous() && out.contiguous() && out.numel() == x.numel() * size() &&
                     out.dtype == x.dtype,
                 "a tensor-parallel gather's shapes");
  comm_.all_gather_async(x.data, out.data, x.numel(), x.dtype).wait();
}

void CommTensorGroup::reduce_scatter(const Tensor& out, const ConstTensor& x) {
  TRAINER_ASSERT(x.contiguous() && out.contiguous() && x.numel() == out.numel() * size() &&
                     out.dtype == x.dtype,
                 "a tensor-parallel reduce-scatter's shapes");
  comm_.reduce_scatter_async(x.data, out.data, out.numel(), out.dtype, order_).wait();
}

GradNormShare::GradNormShare(const nn::Model& model, const DataParallel& dp, int tensor_rank) {
  for (const nn::ParamInfo& p : model.layout().params())
    if (p.split.dim >= 0 || tensor_rank == 0)
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
