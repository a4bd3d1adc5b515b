// The config schema: unknown keys, types, ranges, choices, overrides and their messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "app/config.h"
#include "app/dropout_keys.h"
#include "app/refusals.h"
#include "app/run_setup.h"
#include "common/temp_dir.h"
#include "runtime/error.h"

namespace trainer::app {

using trainer::testing::TempDir;

namespace {

// The UsageError message of merging `yaml` into a default config.
std::string yaml_error(const std::string& yaml) {
  Config c;
  try {
    c.merge_yaml(yaml, "test.yaml");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string override_error(const std::string& assignment) {
  Config c;
  try {
    c.apply_override(assignment);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Config, UnknownKeyNamesItsLineAndSuggestsTheKey) {
  std::string e = yaml_error("optimizer:\n  lr: 0.1\n  wieght_decay: 0.2\n");
  EXPECT_NE(e.find("test.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'optimizer.wieght_decay'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'optimizer.weight_decay'"), std::string::npos) << e;
  // A misspelt section is matched by the whole dotted keys it holds.
  e = yaml_error("modle:\n  n_layer: 2\n");
  EXPECT_NE(e.find("unknown section 'modle' (did you mean 'model.n_layer'?)"), std::string::npos)
      << e;
}

TEST(Config, EmptyOrNonMappingConfigsAreErrors) {
  EXPECT_NE(yaml_error("").find("the config is empty"), std::string::npos);
  EXPECT_NE(yaml_error("# only a comment\n").find("the config is empty"), std::string::npos);
  EXPECT_NE(yaml_error("- a\n- b\n").find("must be a mapping"), std::string::npos);
  EXPECT_NE(yaml_error("just words\n").find("must be a mapping"), std::string::npos);
  TempDir dir("config_dir");
  try {
    Config::load(dir.path.string(), {});
    FAIL() << "a directory was accepted as a config";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

TEST(Config, MinLrAboveLrIsAnError) {
  Config c;
  c.apply_override("optimizer.min_lr=0.01");
  c.apply_override("optimizer.lr=0.001");
  EXPECT_THROW(resolve_run(c), UsageError);
}

TEST(Config, WrongTypeNamesKeyValueAndLine) {
  std::string e = yaml_error("model:\n  n_layer: six\n");
  EXPECT_NE(e.find("test.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("model.n_layer = 'six' is not an integer"), std::string::npos) << e;
  e = yaml_error("train:\n  freeze: wte.weight\n");
  EXPECT_NE(e.find("is not a list of strings"), std::string::npos) << e;
  e = yaml_error("data:\n  drop_last: maybe\n");
  EXPECT_NE(e.find("true or false"), std::string::npos) << e;
}

TEST(Config, RangeAndChoices) {
  EXPECT_NE(yaml_error("optimizer:\n  beta1: 2\n").find("out of range"), std::string::npos);
  EXPECT_NE(yaml_error("data:\n  mode: packed\n").find("not one of stream, pack, bucket"),
            std::string::npos);
  EXPECT_NE(yaml_error("model: [1, 2\n").find("malformed YAML"), std::string::npos);
}

// Note [Model keys]: every model.* key of the schema either defines the model (the table that
// reads, writes and compares models) or says how it runs (precision, recomputation), and a
// model written into a config reads back as itself.
TEST(Config, ModelKeysAreTheSchemasModelKeysThatDefineTheModel) {
  std::set<std::string> runs = {"model.precision", "model.activation_checkpointing",
                                "model.checkpoint_layers"};
  runs.insert(dropout_keys().begin(), dropout_keys().end());  // training's choice, not the model
  std::set<std::string> defines(model_keys().begin(), model_keys().end());
  for (const KeySpec& k : schema())
    if (k.key.starts_with("model."))
      EXPECT_TRUE(defines.erase(k.key) == 1 || runs.contains(k.key)) << k.key;
  EXPECT_TRUE(defines.empty()) << "not in the schema: " << *defines.begin();
  Config c;
  nn::ModelConfig m = stated_model(c);
  m.arch = "llama", m.n_layer = 3, m.n_kv_head = 2, m.rope_theta = 5e5f, m.rotary_pct = 0.5;
  m.tie_embeddings = false, m.gelu = nn::GeluForm::erf, m.ffn_hidden = 100;
  m.rope_scaling = nn::RopeScaling::yarn, m.rope_factor = 4, m.rope_beta_fast = 8;
  m.rope_beta_slow = 0.5f, m.rope_attention_factor = 1.5f, m.rope_truncate = false;
  set_model_keys(c, m);
  const nn::ModelConfig back = stated_model(c);
  EXPECT_EQ(back.arch, "llama");
  EXPECT_EQ(back.n_layer, 3);
  EXPECT_EQ(back.n_kv_head, 2);
  EXPECT_EQ(back.ffn_hidden, 100);
  EXPECT_EQ(back.rope_theta, 5e5f);
  EXPECT_EQ(back.rotary_pct, 0.5);
  EXPECT_FALSE(back.tie_embeddings);
  EXPECT_EQ(back.gelu, nn::GeluForm::erf);
  EXPECT_EQ(back.rope_scaling, nn::RopeScaling::yarn);
  EXPECT_EQ(back.rope_factor, 4.0f);
  EXPECT_EQ(back.rope_beta_fast, 8.0f);
  EXPECT_EQ(back.rope_beta_slow, 0.5f);
  EXPECT_EQ(back.rope_attention_factor, 1.5f);
  EXPECT_FALSE(back.rope_truncate);
}

// Each site's dropout is its own key, or model.dropout's where that key is -1. A source's rates
// (inherit_dropout) fill the sites the config leaves out, and none when it states model.dropout.
TEST(Config, DropoutSitesTakeModelDropoutUnlessSet) {
  Config c;
  EXPECT_FALSE(stated_model(c).dropout.any());
  c.apply_override("model.dropout=0.1");
  c.apply_override("model.attention_dropout=0.25");
  const nn::DropoutRates r = stated_model(c).dropout;
  EXPECT_EQ(r.embedding, 0.1f);
  EXPECT_EQ(r.attention, 0.25f);
  EXPECT_EQ(r.residual, 0.1f);
  Config d;
  d.apply_override("model.residual_dropout=0.3");
  inherit_dropout(d, {0.05f, 0.0f, 0.2f});
  const nn::DropoutRates inherited = stated_model(d).dropout;
  EXPECT_EQ(inherited.embedding, 0.05f);
  EXPECT_EQ(inherited.attention, 0.0f);
  EXPECT_EQ(inherited.residual, 0.3f);  // stated: kept
  inherit_dropout(c, {0.05f, 0.0f, 0.2f});
  EXPECT_EQ(stated_model(c).dropout, r);  // model.dropout stated: nothing inherited
  c.apply_override("model.residual_dropout=-0.5");
  EXPECT_THROW(stated_model(c), UsageError);
}

TEST(Config, OverridesApplyAfterTheFileAndAreChecked) {
  Config c;
  c.merge_yaml("optimizer:\n  lr: 0.5\n", "a.yaml");
  c.apply_override("optimizer.lr=0.25");
  c.apply_override("train.freeze=[wpe.weight, 'h.0.*']");
  EXPECT_DOUBLE_EQ(c.real("optimizer.lr"), 0.25);
  EXPECT_EQ(c.list("train.freeze").size(), 2u);
  EXPECT_NE(override_error("optimizer.lr").find("expected key=value"), std::string::npos);
  EXPECT_NE(override_error("=3").find("expected key=value"), std::string::npos);
  EXPECT_NE(override_error("optimizer.lrr=3").find("did you mean 'optimizer.lr'"),
            std::string::npos);
  EXPECT_NE(override_error("model.n_head=two").find("model.n_head"), std::string::npos);
}

TEST(Config, ResolvedYamlRoundTrips) {
  Config a;
  a.apply_override("model.n_layer=3");
  a.apply_override("train.grad_accum_schedule=['0:1', '100:2']");
  Config b;
  b.merge_yaml(a.to_yaml(), "resolved.yaml");
  EXPECT_EQ(a.to_yaml(), b.to_yaml());
  EXPECT_EQ(a.digest(), b.digest());
  EXPECT_NE(a.digest(), Config().digest());
}

TEST(Config, SchedulesAndPatterns) {
  Config c;
  c.apply_override("train.grad_accum_schedule=['10:2', '20:4']");
  const StepSchedule s = parse_schedule(c, "train.grad_accum_schedule");
  EXPECT_EQ(s.at(5, 9), 9);
  EXPECT_EQ(s.at(10, 9), 2);
  EXPECT_EQ(s.at(99, 9), 4);
  c.apply_override("train.seq_len_schedule=['5-64']");
  EXPECT_THROW(parse_schedule(c, "train.seq_len_schedule"), UsageError);
  c.apply_override("train.seq_len_schedule=['5:64', '3:32']");  // steps must increase
  EXPECT_THROW(parse_schedule(c, "train.seq_len_schedule"), UsageError);
  c.apply_override("train.seq_len_schedule=['5:9999']");  // beyond data.seq_len: an error
  EXPECT_THROW(resolve_run(c), UsageError);
  EXPECT_TRUE(matches_any("h.3.attn.c_attn.weight", {"h.*.attn.*"}));
  EXPECT_TRUE(matches_any("wpe.weight", {"x", "wpe.weight"}));
  EXPECT_FALSE(matches_any("h.3.mlp.c_fc.weight", {"h.*.attn.*"}));
}

// Keys that cannot go together, refused at resolution with both named.
TEST(Config, ConflictingKeysAreUsageErrors) {
  auto message = [](std::initializer_list<const char*> sets) {
    Config c;
    for (const char* s : sets) c.apply_override(s);
    try {
      resolve_run(c);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message({"train.grad_accum=2", "train.global_batch=8"})
                .find("train.grad_accum = 2 and train.global_batch = 8 both set the batch"),
            std::string::npos);
  EXPECT_NE(message({"model.precision=bf16", "dist.grad_dtype=bf16", "dist.deterministic=true"})
                .find("dist.deterministic needs dist.grad_dtype = fp32"),
            std::string::npos);
  EXPECT_NE(message({"run.device=cuda", "dist.deterministic=true"})
                .find("dist.deterministic is implemented for CPU runs"),
            std::string::npos);
  EXPECT_NE(message({"dist.backend=nccl"}).find("dist.backend = nccl needs run.device = cuda"),
            std::string::npos);
  EXPECT_EQ(message({"train.global_batch=8", "dist.deterministic=true"}), "(accepted)");
  // CUDA graphs: on a GPU, without sharding (Note [CUDA graphs]).
  EXPECT_NE(message({"train.cuda_graphs=true"}).find("train.cuda_graphs needs run.device = cuda"),
            std::string::npos);
  EXPECT_NE(message({"run.device=cuda", "train.cuda_graphs=true", "dist.sharding=full"})
                .find("train.cuda_graphs runs with dist.sharding = none only"),
            std::string::npos);
  EXPECT_EQ(message({"run.device=cuda", "train.cuda_graphs=true", "dist.backend=nccl"}),
            "(accepted)");
  // Pipeline options without a pipeline, or at odds with the schedule.
  EXPECT_NE(message({"dist.pipeline_virtual_stages=2"})
                .find("dist.pipeline_virtual_stages = 2 with dist.pipeline_schedule = 1f1b"),
            std::string::npos);
  EXPECT_NE(message({"dist.pipeline_parallel=2", "dist.pipeline_schedule=interleaved"})
                .find("the interleaved schedule runs 2 or more virtual stages"),
            std::string::npos);
  // The rotary scaling keys: each type reads its own, the others stay at their defaults.
  EXPECT_NE(message({"model.arch=llama", "model.rope_scaling_factor=8"})
                .find("model.rope_scaling_factor = 8 needs model.rope_scaling = linear, llama3 "
                      "or yarn"),
            std::string::npos);
  EXPECT_NE(message({"model.arch=llama", "model.rope_scaling=linear", "model.rope_scaling_factor=2",
                     "model.rope_original_context=4096"})
                .find("needs model.rope_scaling = llama3 or yarn (model.rope_scaling = linear)"),
            std::string::npos);
  EXPECT_NE(message({"model.arch=llama", "model.rope_scaling=yarn", "model.rope_scaling_factor=4",
                     "model.rope_high_freq_factor=8"})
                .find("need model.rope_scaling = llama3 (model.rope_scaling = yarn)"),
            std::string::npos);
  EXPECT_NE(message({"model.arch=llama", "model.rope_scaling=llama3", "model.rope_scaling_factor=8",
                     "model.rope_beta_fast=16"})
                .find("rope_truncate need model.rope_scaling = yarn (model.rope_scaling = llama3)"),
            std::string::npos);
  EXPECT_NE(
      message({"model.arch=llama", "model.rope_scaling=llama3", "model.rope_low_freq_factor=4"})
          .find("model.rope_high_freq_factor (4) must exceed model.rope_low_freq_factor (4)"),
      std::string::npos);
  EXPECT_NE(message({"model.rope_scaling=linear", "model.rope_scaling_factor=2"})
                .find("model.rope_scaling = linear needs model.arch = llama or neox"),
            std::string::npos);
  {
    Config c;
    EXPECT_THROW(c.apply_override("model.norm_eps=0"), UsageError);  // the schema's (0, 1]
  }
  EXPECT_EQ(message({"model.arch=llama", "model.rope_scaling=llama3", "model.rope_scaling_factor=8",
                     "model.norm_eps=1e-6"}),
            "(accepted)");
  EXPECT_EQ(message({"model.arch=qwen3", "model.rope_scaling=yarn", "model.rope_scaling_factor=4",
                     "model.rope_original_context=32768", "model.rope_truncate=false"}),
            "(accepted)");
  // A pipeline on GPUs (its transfers over NCCL) is accepted, with every schedule.
  for (const char* schedule : {"gpipe", "1f1b", "interleaved"}) {
    Config gpus;
    for (const char* s : {"run.device=cuda", "dist.pipeline_parallel=2", "model.n_layer=8"})
      gpus.apply_override(s);
    gpus.apply_override(std::string("dist.pipeline_schedule=") + schedule);
    if (std::string(schedule) == "interleaved")
      gpus.apply_override("dist.pipeline_virtual_stages=2");
    EXPECT_EQ(resolve_run(gpus).pipeline_parallel, 2) << schedule;
  }
}

// Every refusal of a combination (Note [Refusals]) is explained in docs/errors.md: its message
// up to the first parenthesis or colon, as written there (placeholders included).
TEST(Config, EveryRefusalIsDocumented) {
  std::ifstream in(std::string(TRAINER_SOURCE_DIR) + "/docs/errors.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(doc.empty());
  const std::vector<std::string> messages = refusal_messages();
  EXPECT_GE(messages.size(), 10u);
  for (const std::string& m : messages) {
    const std::string head = m.substr(0, std::min(m.find(" ("), m.find(": ")));
    EXPECT_NE(doc.find("`" + head), std::string::npos) << "docs/errors.md lacks: " << head;
  }
}

TEST(Config, ModelShapeErrorsAreUsageErrors) {
  Config c;
  c.apply_override("model.n_embd=100");
  c.apply_override("model.n_head=3");
  EXPECT_THROW(model_config(c), UsageError);
}

}  // namespace trainer::app
