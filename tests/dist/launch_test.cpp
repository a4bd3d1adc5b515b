// Launch discovery: each launcher's variables, precedence, and clear errors for half-set or
// out-of-range environments.
#include <gtest/gtest.h>

#include <map>

#include "dist/launch.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace trainer::dist {
namespace {

LaunchInfo discover(const std::map<std::string, std::string>& vars) {
  return discover_launch([&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    discover(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Launch, NoEnvironmentIsOneProcess) {
  LaunchInfo l = discover({});
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.world_size, 1);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.launcher, "single");
  EXPECT_FALSE(l.distributed());
}

TEST(Launch, OpenMpi) {
  LaunchInfo l = discover({{"OMPI_COMM_WORLD_RANK", "5"},
                           {"OMPI_COMM_WORLD_SIZE", "8"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(l.launcher, "mpirun");
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.world_size, 8);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 4);
  EXPECT_EQ(l.node, 1);
  EXPECT_EQ(l.nodes, 2);
}

TEST(Launch, SlurmSrun) {
  LaunchInfo l = discover({{"SLURM_PROCID", "3"},
                           {"SLURM_NTASKS", "4"},
                           {"SLURM_STEP_NUM_TASKS", "4"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_NODEID", "1"},
                           {"SLURM_STEP_NUM_NODES", "2"},
                           {"SLURM_NTASKS_PER_NODE", "2"}});
  EXPECT_EQ(l.launcher, "srun");
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 2);
  EXPECT_EQ(l.node, 1);
  EXPECT_EQ(l.nodes, 2);
}

TEST(Launch, TorchrunStyle) {
  LaunchInfo l = discover({{"RANK", "2"},
                           {"WORLD_SIZE", "4"},
                           {"LOCAL_RANK", "0"},
                           {"LOCAL_WORLD_SIZE", "2"},
                           {"GROUP_RANK", "1"}});
  EXPECT_EQ(l.launcher, "env");
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.node, 1);
}

TEST(Launch, MpirunTakesPrecedenceOverSlurmAllocation) {
  LaunchInfo l = discover({{"OMPI_COMM_WORLD_RANK", "1"},
                           {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"SLURM_PROCID", "0"},
                           {"SLURM_NTASKS", "1"},
                           {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(l.launcher, "mpirun");
  EXPECT_EQ(l.rank, 1);
}

TEST(Launch, HalfSetEnvironmentsAreClearErrors) {
  EXPECT_NE(error_of({{"RANK", "0"}}).find("WORLD_SIZE is unset"), std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "2"}}).find("RANK is unset"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("LOCAL_RANK is not"),
            std::string::npos);
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "0"}}).find("OMPI_COMM_WORLD_SIZE"),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}}).find("SLURM_NTASKS"),
            std::string::npos);
}

TEST(Launch, OutOfRangeAndGarbageAreClearErrors) {
  EXPECT_NE(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}})
                .find("rank 4 is outside [0, 4)"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}})
                .find("rank -1 is outside"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1x"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}})
                .find("RANK='1x' is not an integer"),
            std::string::npos);
  EXPECT_NE(
      error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"LOCAL_RANK", "0"}}).find("world size 0"),
      std::string::npos);
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "0"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})
                .find("local rank 3"),
            std::string::npos);
}

TEST(Launch, MoreRanksOnANodeThanGpusIsRefusedWithTheFix) {
  LaunchInfo l;
  l.rank = 5;
  l.world_size = 8;
  l.local_rank = 1;
  l.local_size = 4;
  l.node = 1;
  EXPECT_NO_THROW(check_ranks_per_node(l, 4));
  EXPECT_NO_THROW(check_ranks_per_node(l, 8));
  try {
    check_ranks_per_node(l, 2);
    ADD_FAILURE() << "4 ranks on 2 GPUs accepted";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("4 ranks run on node 1 but it has 2 GPU(s)"), std::string::npos) << m;
    EXPECT_NE(m.find("--ntasks-per-node=2"), std::string::npos) << m;
  }
}

// Local rank 0 binds device 0 where there is a GPU; without one (or without the CUDA
// backend) nothing is bound and the answer is -1, not device 0.
TEST(Launch, BindDeviceBindsTheLocalRanksGpuOrNothing) {
  LaunchInfo l;
  l.local_rank = 0;
  l.local_size = 1;
  EXPECT_EQ(bind_device(l), cuda_device_count() > 0 ? 0 : -1);
}

}  // namespace
}  // namespace trainer::dist
