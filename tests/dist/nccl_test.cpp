// The NCCL communicator on one GPU (dist/nccl_communicator.cpp): every collective the trainer
// issues on device buffers, in place and not, and the pipeline's group of transfers (to
// itself), with known values, over a 1-rank communicator and over a group split from it. One rank's
// sum is its own values, so a value that changes is a collective that read or wrote the wrong
// bytes. Skipped without a GPU or without NCCL in the build; scripts/gpu_check.sh runs it on one.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dist/communicator.h"
#include "dist/grid.h"
#include "runtime/buffer.h"
#include "runtime/cuda/stream.h"
#include "runtime/device.h"
#include "runtime/memory.h"

namespace trainer::dist {
namespace {

constexpr int64_t kCount = 1000;

std::vector<float> values(float first) {
  std::vector<float> v(static_cast<size_t>(kCount));
  for (int64_t i = 0; i < kCount; ++i) v[size_t(i)] = first + 0.5f * float(i);
  return v;
}

struct OneGpu {
  CudaStream stream;
  Context ctx;
  OneGpu() {
    ctx.device = Device::cuda;
    ctx.stream = stream.get();
  }
  Buffer upload(const std::vector<float>& v) {
    Buffer b(v.size() * sizeof(float), Device::cuda);
    copy(ctx, b.view(DType::f32, int64_t(v.size())),
         make_tensor(const_cast<float*>(v.data()), DType::f32, {int64_t(v.size())}));
    synchronize(ctx);
    return b;
  }
  std::vector<float> read(const Buffer& b, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    copy(ctx, make_tensor(out.data(), DType::f32, {n}), b.view(DType::f32, n));
    return out;
  }
};

// Every collective of `comm` (a 1-rank NCCL communicator) on device buffers.
void every_collective(Communicator& comm, OneGpu& gpu) {
  ASSERT_EQ(comm.size(), 1);
  ASSERT_EQ(comm.backend(), "nccl");
  const std::vector<float> a = values(1.0f), b = values(-7.0f);
  // All-reduce in place.
  Buffer x = gpu.upload(a);
  comm.all_reduce(x.as<float>(), kCount);
  EXPECT_EQ(gpu.read(x, kCount), a);
  // Reduce-scatter: out of place, and in place (the receive buffer is the rank's slice).
  Buffer send = gpu.upload(a), recv = gpu.upload(b);
  comm.reduce_scatter(send.as<float>(), recv.as<float>(), kCount);
  EXPECT_EQ(gpu.read(recv, kCount), a);
  Buffer both = gpu.upload(b);
  comm.reduce_scatter(both.as<float>(), both.as<float>(), kCount);
  EXPECT_EQ(gpu.read(both, kCount), b);
  // All-gather: out of place, and in place.
  Buffer mine = gpu.upload(b), all = gpu.upload(a);
  comm.all_gather(mine.as<float>(), all.as<float>(), kCount);
  EXPECT_EQ(gpu.read(all, kCount), b);
  Buffer gathered = gpu.upload(a);
  comm.all_gather(gathered.as<float>(), gathered.as<float>(), kCount);
  EXPECT_EQ(gpu.read(gathered, kCount), a);
  // Broadcast from rank 0, bytes as they are.
  Buffer root = gpu.upload(b);
  comm.broadcast(root.data(), kCount * int64_t(sizeof(float)), 0);
  EXPECT_EQ(gpu.read(root, kCount), b);
  // The device barrier, and a bf16 sum (NCCL's own bf16 type; these values are exact in it).
  comm.barrier();
  std::vector<bf16> h(static_cast<size_t>(kCount));
  for (int64_t i = 0; i < kCount; ++i) h[size_t(i)] = to_bf16(a[size_t(i % 64)]);
  Buffer halves(h.size() * sizeof(bf16), Device::cuda);
  copy(gpu.ctx, halves.view(DType::bf16, kCount), make_tensor(h.data(), DType::bf16, {kCount}));
  synchronize(gpu.ctx);
  comm.all_reduce_async(halves.data(), kCount, DType::bf16).wait();
  const std::vector<float> summed = read_as_f32(gpu.ctx, halves.view(DType::bf16, kCount));
  for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(summed[size_t(i)], a[size_t(i % 64)]) << i;
  // A group of transfers to self (a pipeline stage's send and receive in one NCCL group; NCCL
  // allows a rank to be its own peer), in both orders of send and receive.
  Buffer out = gpu.upload(a), in = gpu.upload(b), back = gpu.upload(b);
  std::vector<Work> works = comm.transfer_async({{true, out.data(), kCount, DType::f32, 0, 12},
                                                 {false, in.data(), kCount, DType::f32, 0, 12}});
  ASSERT_EQ(works.size(), 2u);
  for (Work& w : works) w.wait();
  EXPECT_EQ(gpu.read(in, kCount), a);
  for (Work& w : comm.transfer_async({{false, back.data(), kCount, DType::f32, 0, 3},
                                      {true, in.data(), kCount, DType::f32, 0, 3}}))
    w.wait();
  EXPECT_EQ(gpu.read(back, kCount), a);
  // A tensor group's collective is ordered on the model's stream, the host not waiting: a copy
  // queued there after a gather reads what the gather wrote, not what was there before.
  CommTensorGroup group(comm);
  Buffer source = gpu.upload(a), target = gpu.upload(b), seen = gpu.upload(b);
  group.all_gather(target.view(DType::f32, kCount), source.view(DType::f32, kCount));
  copy(gpu.ctx, seen.view(DType::f32, kCount), target.view(DType::f32, kCount));
  group.wait();
  EXPECT_EQ(gpu.read(seen, kCount), a);
  const CommStats s = comm.stats();
  EXPECT_GT(s.bytes, 0.0);
}

TEST(Nccl, OneRankRunsEveryCollectiveOnDeviceBuffersWithKnownValues) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  if (nccl_version() == "none") GTEST_SKIP() << "this build has no NCCL";
  OneGpu gpu;
  auto bootstrap = make_single_process_communicator();
  auto nccl =
      make_nccl_communicator(*bootstrap, 0, {.timeout_s = 60, .cuda_stream = gpu.stream.get()});
  every_collective(*nccl, gpu);
  // A group split from it (tensor, pipeline and data groups are made this way).
  auto group = nccl->split(0, 0);
  every_collective(*group, gpu);
  // Host buffers go through the bootstrap communicator, as the trainer's scalars do.
  std::vector<double> host = {1.5, -2.0};
  nccl->all_reduce(host);
  EXPECT_EQ(host, (std::vector<double>{1.5, -2.0}));
}

}  // namespace
}  // namespace trainer::dist
