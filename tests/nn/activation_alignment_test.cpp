// Every activation the plan lays out starts at kDeviceAlignment, for each architecture,
// precision and checkpointing policy: cuBLASLt and cuDNN read them as operands, and odd widths
// (a vocabulary of 31, a bf16 row of 5 channels) must not shift the next one.
#include <gtest/gtest.h>

#include "common/arch_family.h"
#include "model_test_util.h"
#include "nn/activation_plan.h"
#include "nn/architecture.h"
#include "runtime/alignment.h"

namespace trainer::nn {
namespace {

TEST(ActivationPlan, EverySlotIsDeviceAligned) {
  for (const std::string& arch : architecture_names())
    for (DType compute : {DType::f32, DType::bf16})
      for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
        ModelConfig m;
        m.arch = arch;
        m.vocab_size = 31;
        m.max_seq_len = 7;
        m.n_layer = 2;
        m.n_head = 2;
        m.n_embd = 16;
        if (trainer::testing::llama_like(arch)) m.ffn_multiple_of = 8;
        const ActivationPlan plan(m, testing::exec_for(3, 7, compute, r));
        auto check = [&](const ActSlot& s, const std::string& what) {
          if (s.offset >= 0) {
            EXPECT_EQ(s.offset % int64_t(kDeviceAlignment), 0)
                << arch << " " << dtype_name(compute) << " " << kRecomputeNames.name(r) << ": "
                << what << " at " << s.offset;
          }
        };
        for (int l = 0; l <= m.n_layer; ++l) check(plan.residual(l), "residual");
        for (int l = 0; l < m.n_layer; ++l)
          for (int a = 0; a < int(Act::kCount); ++a) {
            try {
              check(plan.block(l, Act(a)), "block activation " + std::to_string(a));
            } catch (const InternalError&) {  // not an activation of this architecture
            }
          }
        for (const ActSlot* s : {&plan.lnf, &plan.lnf_mean, &plan.lnf_rstd, &plan.ce_stats,
                                 &plan.d_res, &plan.d_ln, &plan.logits, &plan.tmp, &plan.d_branch})
          check(*s, "final slot");
        EXPECT_EQ(plan.bytes() % int64_t(kDeviceAlignment), 0);
      }
}

}  // namespace
}  // namespace trainer::nn
