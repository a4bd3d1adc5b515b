// The schema: every configuration key, its type, default and meaning. Add keys here only.
#include "app/config.h"
#include "app/run_setup.h"
#include "data/plan.h"
#include "data/shard.h"
#include "dist/data_parallel.h"
#include "dist/join.h"
#include "nn/architecture.h"
#include "nn/lr_schedule.h"
#include "runtime/device.h"
#include "runtime/log.h"

namespace trainer::app {

namespace {

// model.arch's description, from the list of architectures.
std::string architecture_summaries() {
  std::string s = "The architecture:";
  for (const nn::Architecture* a : nn::architectures())
    s += fmt::format(" {} ({}){}", a->name, a->summary, a == nn::architectures().back() ? "" : ";");
  return s;
}

}  // namespace

const std::vector<KeySpec>& schema() {
  using L = std::vector<std::string>;
  static const std::vector<KeySpec> keys = {
      {"run.name", Kind::text, std::string("gpt"), "Run name: outputs go to <run.dir>/<run.name>/"},
      {"run.dir", Kind::text, std::string("runs"), "Directory holding run directories"},
      {"run.seed", Kind::integer, int64_t(1337), "Seed for initialisation, data order and sampling",
       0},
      {"run.device", Kind::text, std::string("cpu"),
       "Where the model runs: cpu, or cuda (each rank takes GPU local rank mod the node's GPUs)",
       -1e300, 1e300, kDeviceNames.names()},

      {"model.arch", Kind::text, std::string("gpt2"), architecture_summaries(), -1e300, 1e300,
       nn::architecture_names()},
      {"model.vocab_size", Kind::integer, int64_t(8192),
       "Vocabulary size V (must cover the tokenizer)", 1, 1 << 24},
      {"model.max_seq_len", Kind::integer, int64_t(256), "Learned positions (longest row)", 1,
       1 << 20},
      {"model.n_layer", Kind::integer, int64_t(6), "Transformer blocks L", 1, 1024},
      {"model.n_head", Kind::integer, int64_t(6), "Attention heads H", 1, 1024},
      {"model.n_embd", Kind::integer, int64_t(384), "Channels C (a multiple of n_head)", 1,
       1 << 16},
      {"model.n_kv_head", Kind::integer, int64_t(0),
       "llama, qwen2: key/value heads, dividing n_head (0 = n_head; 1 = multi-query)", 0, 1024},
      {"model.ffn_hidden", Kind::integer, int64_t(0),
       "llama, qwen2: SwiGLU hidden size before rounding (0 = 8/3 n_embd)", 0, 1 << 20},
      {"model.ffn_multiple_of", Kind::integer, int64_t(256),
       "llama, qwen2: the SwiGLU hidden size is rounded up to a multiple of this", 1, 1 << 16},
      {"model.head_dim", Kind::integer, int64_t(0),
       "llama, qwen2, qwen3: each head's channels (0 = n_embd / n_head; Qwen3's are 128 "
       "whatever n_embd is)",
       0, 1024},
      {"model.rope_theta", Kind::real, 10000.0,
       "llama, qwen2, neox: the rotary embeddings' base (frequencies theta^(-2i/d): above 1, or "
       "every "
       "position looks alike)",
       1, 1e12, L{}, true},
      {"model.rope_scaling", Kind::text, std::string("none"),
       "llama, qwen2, neox: how the rotary frequencies are scaled for a longer context, as Hugging "
       "Face's rope_scaling: none, linear (each divided by model.rope_scaling_factor), llama3 "
       "(Llama 3.1's: by wavelength, with the three keys below) or yarn (YaRN, Qwen's long "
       "context: by the turns over rope_original_context, with rope_beta_* and "
       "rope_attention_factor)",
       -1e300, 1e300, nn::kRopeScalingNames.names()},
      {"model.rope_scaling_factor", Kind::real, 1.0,
       "linear, llama3, yarn: how much longer the context is than the one the frequencies were "
       "trained at (Llama 3.1: 8; Qwen3 to 131072 tokens: 4)",
       1, 1e6},
      {"model.rope_low_freq_factor", Kind::real, 1.0,
       "llama3: wavelengths over rope_original_context / this are divided by the factor", 0, 1e6,
       L{}, true},
      {"model.rope_high_freq_factor", Kind::real, 4.0,
       "llama3: wavelengths under rope_original_context / this are kept (between the two: "
       "interpolated)",
       0, 1e6, L{}, true},
      {"model.rope_original_context", Kind::integer, int64_t(8192),
       "llama3, yarn: the context the frequencies were trained at (Llama 3.1: 8192; Qwen3: "
       "32768, which a yarn run must state: a folder's config.json says it or its "
       "max_position_embeddings does)",
       1, 1 << 24},
      {"model.rope_beta_fast", Kind::real, 32.0,
       "yarn: frequencies turning more than this many times over rope_original_context are kept", 0,
       1e6, L{}, true},
      {"model.rope_beta_slow", Kind::real, 1.0,
       "yarn: frequencies turning fewer than this many times over rope_original_context are "
       "divided by the factor (between the two: a linear ramp over the channel pairs)",
       0, 1e6, L{}, true},
      {"model.rope_attention_factor", Kind::real, 0.0,
       "yarn: what the rotated query and key channels are multiplied by (0: 0.1 ln(factor) + 1, "
       "Hugging Face's default)",
       0, 1e6},
      {"model.rope_truncate", Kind::boolean, true,
       "yarn: the ramp's ends rounded outwards to whole channel pairs, as Hugging Face does "
       "unless rope_scaling's truncate is false"},
      {"model.norm_eps", Kind::real, 1e-5,
       "The epsilon of every LayerNorm or RMSNorm (Hugging Face's layer_norm_epsilon, "
       "layer_norm_eps or rms_norm_eps; Qwen2: 1e-6)",
       0, 1, L{}, true},
      {"model.rotary_pct", Kind::real, 1.0,
       "neox: the fraction of each head the rotary embeddings turn (Pythia: 0.25); the rest "
       "of the head carries no position",
       0, 1, L{}, true},
      {"model.gelu", Kind::text, std::string("tanh"),
       "gpt2, neox: the MLP's GELU, GPT-2's tanh approximation or the exact one through erf "
       "(Pythia's; Hugging Face's \"gelu\")",
       -1e300, 1e300, nn::kGeluNames.names()},
      {"model.tie_embeddings", Kind::boolean, true,
       "The output head reads the token embedding (false: its own lm_head; llama, qwen2, neox)"},
      {"model.dropout", Kind::real, 0.0,
       "Dropout probability in training at every site below that is left at -1: the "
       "embeddings' sum, the attention probabilities, each residual branch's output (eval and "
       "sample never drop)",
       0, 1, L{}, false, true},
      {"model.embedding_dropout", Kind::real, -1.0,
       "Dropout on the embeddings' sum, the first block's input (GPT-2's embd_pdrop; -1: "
       "model.dropout)",
       -1, 1, L{}, false, true},
      {"model.attention_dropout", Kind::real, -1.0,
       "Dropout on the attention probabilities (GPT-2's attn_pdrop, Llama's and GPT-NeoX's "
       "attention_dropout; -1: model.dropout)",
       -1, 1, L{}, false, true},
      {"model.residual_dropout", Kind::real, -1.0,
       "Dropout on each residual branch's output before it is added (GPT-2's resid_pdrop, "
       "GPT-NeoX's hidden_dropout; -1: model.dropout)",
       -1, 1, L{}, false, true},
      {"model.precision", Kind::text, std::string("fp32"),
       "fp32, or bf16 mixed precision: bf16 matmul inputs and saved activations, fp32 master "
       "weights, optimizer state, statistics and loss",
       -1e300, 1e300, nn::kPrecisionNames.names()},
      {"model.activation_checkpointing", Kind::text, std::string("none"),
       "Recompute activations in backward to save memory: none, selective (norms and GELU) or "
       "full (the whole block from its input)",
       -1e300, 1e300, nn::kRecomputeNames.names()},
      {"model.checkpoint_layers", Kind::list, L{},
       "Blocks the checkpointing applies to: [\"0-5\", \"9\"] (empty = all)"},

      {"data.path", Kind::text, std::string("corpora/brown"),
       "Directory written by `trainer prepare`"},
      {"data.tokenizer", Kind::text, std::string("corpora/brown/tok.model"),
       "SentencePiece model the shards were made with (for sampling and checks)"},
      {"data.mode", Kind::text, std::string("stream"),
       "Batching: stream (contiguous windows), pack (documents packed into rows), bucket (length "
       "buckets, dynamic padding)",
       -1e300, 1e300, data::kModeNames.names()},
      {"data.batch_size", Kind::integer, int64_t(8), "Rows per micro-batch B (stream, pack)", 1,
       1 << 20},
      {"data.seq_len", Kind::integer, int64_t(256),
       "Row length T (stream, pack); longest row (bucket)", 1, 1 << 20},
      {"data.max_tokens", Kind::integer, int64_t(0),
       "Bucket mode: padded tokens per micro-batch (0 = batch_size * seq_len)", 0},
      {"data.drop_last", Kind::boolean, true,
       "Stream mode: drop an epoch's last batch of fewer than batch_size windows (else fill it "
       "with the epoch's first windows); a step never drops global batches at an epoch's end"},
      {"data.prefetch", Kind::integer, int64_t(4), "Batches kept ready by the loader thread", 1,
       1024},
      {"data.verify_checksums", Kind::text, std::string("first_use"),
       "When each shard's payload (checksum, offsets, token ids) is checked: all (every rank "
       "reads the whole split at start), first_use (a shard when this rank first reads from it, "
       "on the loader thread), none (headers and sizes only)",
       -1e300, 1e300, data::kVerifyNames.names()},
      {"data.epochs", Kind::integer, int64_t(0),
       "Stop after this many epochs (0 = run train.steps)", 0},
      {"data.sources", Kind::list, L{},
       "Train on a mixture of prepared corpora instead of data.path: "
       "[\"[NAME=]DIR:WEIGHT[:EPOCHS]\", "
       "...] (weights relative; EPOCHS bounds a source, else it repeats; NAME: DIR's folder "
       "name), each global batch from one source by the rule of docs/data.md (Mixtures)"},
      {"data.sources_schedule", Kind::list, L{},
       "The mixture's weights from a step on: [\"STEP:W1,W2,...\", ...], one weight per source"},

      {"optimizer.lr", Kind::real, 1e-3, "Peak learning rate", 0, 10},
      {"optimizer.min_lr", Kind::real, 1e-4, "Learning rate at the end of the decay", 0, 10},
      {"optimizer.beta1", Kind::real, 0.9,
       "AdamW beta1 (below 1: the bias correction divides by 1 - beta1^t)", 0, 1, L{}, false, true},
      {"optimizer.beta2", Kind::real, 0.95,
       "AdamW beta2 (below 1: the bias correction divides by 1 - beta2^t)", 0, 1, L{}, false, true},
      {"optimizer.eps", Kind::real, 1e-8,
       "AdamW epsilon (above 0: a parameter whose gradients are all 0 would divide 0 by 0)", 0, 1,
       L{}, true},
      {"optimizer.weight_decay", Kind::real, 0.1,
       "Decoupled weight decay on matrices (each step multiplies them by 1 - lr x weight_decay, "
       "so lr x weight_decay must stay below 1)",
       0, 10},
      {"optimizer.decay_embeddings", Kind::boolean, false, "Also decay wte and wpe"},
      {"optimizer.grad_clip", Kind::real, 1.0, "Clip the global gradient norm to this (0 = off)",
       0},

      {"schedule.warmup_steps", Kind::integer, int64_t(50), "Linear warmup steps", 0},
      {"schedule.decay", Kind::text, std::string("cosine"),
       "The decay's shape, to optimizer.min_lr (constant: none)", -1e300, 1e300,
       nn::kDecayNames.names()},
      {"schedule.decay_steps", Kind::integer, int64_t(0),
       "Decay over the last this many steps only, at optimizer.lr before them "
       "(warmup-stable-decay; 0: decay from the end of warmup)",
       0},

      {"train.steps", Kind::integer, int64_t(600), "Optimizer steps", 1},
      {"train.grad_accum", Kind::integer, int64_t(1), "Micro-batches per optimizer step", 1,
       1 << 16},
      {"train.global_batch", Kind::integer, int64_t(0),
       "Micro-batches per optimizer step over all ranks, a multiple of the number of ranks (0 = "
       "train.grad_accum on each rank): a run resumed on another number of ranks keeps its batch "
       "and data order, the accumulation adapts",
       0, 1 << 24},
      {"train.grad_accum_schedule", Kind::list, L{},
       "Dynamic global batch: [\"step:micro_batches\", ...] from that step on (per rank; over "
       "all ranks when train.global_batch is set)"},
      {"train.seq_len_schedule", Kind::list, L{},
       "Sequence-length curriculum (stream, pack): [\"step:seq_len\", ...] from that step on"},
      {"train.freeze", Kind::list, L{},
       "Parameter name patterns (* wildcards) kept fixed: no gradient, no optimizer state"},
      {"train.lora.rank", Kind::integer, int64_t(0),
       "LoRA: the adapters' rank; the base weights are then frozen and only the adapters train "
       "(0: no adapters, every parameter trains)",
       0, 4096},
      {"train.lora.alpha", Kind::real, 16.0, "LoRA: the adapters' output is scaled by alpha / rank",
       0, 1e6, L{}, true},
      {"train.lora.dropout", Kind::real, 0.0,
       "LoRA: dropout on the adapters' input in training (PEFT's lora_dropout), each adapter its "
       "own mask; the base products read their input undropped",
       0, 1, L{}, false, true},
      {"train.lora.targets", Kind::list, L{"q", "k", "v", "o", "gate", "up", "down"},
       "LoRA: the block products adapted (llama, qwen2, qwen3: q, k, v, o, gate, up, down; "
       "PEFT's q_proj ... down_proj)"},
      {"train.on_nonfinite", Kind::text, std::string("stop"),
       "A NaN/Inf loss or gradient: stop with a diagnostic, or skip the step", -1e300, 1e300,
       kNonFiniteNames.names()},
      {"train.max_consecutive_skips", Kind::integer, int64_t(5),
       "Skipped steps (train.on_nonfinite=skip, train.spike_guard.action=skip): the run stops "
       "(exit 1, no checkpoint saved) after this many in a row",
       1},
      {"train.max_skips", Kind::integer, int64_t(50),
       "Skipped steps likewise: the run stops (exit 1, no checkpoint saved) after this many in "
       "all (of this process)",
       1},
      {"train.spike_guard.action", Kind::text, std::string("off"),
       "A loss or gradient norm more than train.spike_guard.threshold standard deviations above "
       "its mean over the last train.spike_guard.window steps: skip the step, or stop with a "
       "checkpoint of the step before (exit 1)",
       -1e300, 1e300, kSpikeActionNames.names()},
      {"train.spike_guard.metric", Kind::text, std::string("both"),
       "What the spike guard watches: the loss, the gradient norm (before clipping) or both",
       -1e300, 1e300, kSpikeMetricNames.names()},
      {"train.spike_guard.window", Kind::integer, int64_t(100),
       "The spike guard's window of accepted steps; it judges nothing until the window is full", 2,
       1 << 20},
      {"train.spike_guard.threshold", Kind::real, 6.0,
       "The spike guard's threshold in standard deviations above the window's mean", 0, 1e6, L{},
       true},
      {"train.init_from", Kind::text, std::string(""),
       "Fine-tuning: start a new run from the weights of a checkpoint, a run directory or an "
       "exported model (same model and tokenizer; fresh optimizer, step 0); a checkpoint of "
       "this run, when resuming, takes precedence"},
      {"train.resume", Kind::text, std::string("auto"),
       "auto (latest checkpoint of this run, if any), none, or a checkpoint directory"},
      {"train.cuda_graphs", Kind::boolean, false,
       "CUDA: replay each unit's share of forward and backward as a CUDA graph where the batch's "
       "shape repeats (dist.sharding none; packed batches run without)"},
      {"train.attention_backward", Kind::text, std::string("deterministic"),
       "CUDA: cuDNN attention's backward writes dQ by its own product (deterministic: the same "
       "bits every run, a workspace of B x H x T^2 x 2 bytes) or accumulates it by atomic adds "
       "(fast: less memory, bits that vary between runs)",
       -1e300, 1e300, nn::kAttentionBackwardNames.names()},
      {"train.memory_check", Kind::text, std::string("refuse"),
       "A memory plan larger than the memory available (MemAvailable or the cgroup's limit; "
       "the GPU's free memory) refuses the start (refuse) or only warns (warn)",
       -1e300, 1e300, kMemoryCheckNames.names()},
      {"train.val_every", Kind::integer, int64_t(100), "Validate every N steps (0 = never)", 0},
      {"train.val_batches", Kind::integer, int64_t(20),
       "Batches per validation of each set, the same ones each time (0 = the whole split)", 0},
      {"train.val_sets", Kind::list, L{},
       "Validation sets, each evaluated and logged under its name: [\"[NAME=]DIR[:SPLIT]\", ...] "
       "(a prepared corpus with the run's tokenizer; SPLIT val by default, or heldout from "
       "prepare --val-input; NAME: DIR's folder name, _SPLIT added when not val); empty: "
       "data.path's val split"},
      {"train.eval_tasks", Kind::list, L{},
       "Downstream task files scored while training (JSON lines: HellaSwag's multiple choice "
       "or LAMBADA's last word; see trainer eval --task), written to the metrics"},
      {"train.eval_tasks_every", Kind::integer, int64_t(500),
       "Score train.eval_tasks every N steps and at the end (0 = only at the end)", 0},

      {"checkpoint.every", Kind::integer, int64_t(200),
       "Save every N steps (and at the end; 0 = only at the end)", 0},
      {"checkpoint.keep_last", Kind::integer, int64_t(3),
       "Checkpoints kept (the newest ones); a save prunes only those saved under the same "
       "keep_last and keep_every (train --force: all)",
       1},
      {"checkpoint.keep_every", Kind::integer, int64_t(0),
       "Also keep every checkpoint whose step is a multiple of this (0 = none)", 0},
      {"checkpoint.timeout_s", Kind::real, 1800.0,
       "How long ranks wait for each other's checkpoint writes (instead of dist.timeout_s)", 0.1,
       1e7},
      {"checkpoint.async", Kind::boolean, false,
       "Write periodic saves on a thread while training goes on: the step waits only for a "
       "host copy of the state (3 x 4 bytes per parameter a writing rank holds, kept for the "
       "run); the next save, a stop and the run's end wait for the write"},

      {"log.every", Kind::integer, int64_t(10), "Write a metrics line every N steps", 1},
      {"log.trace_steps", Kind::text, std::string(""),
       "Steps whose timeline every rank writes to <run>/traces/rank-R.json, as \"20-22\" or "
       "\"20\" (counted from 1; Chrome trace format: ui.perfetto.dev or chrome://tracing; "
       "scripts/merge_traces.py makes one file of the ranks')"},
      {"log.tensorboard", Kind::boolean, false,
       "Also write the metrics as a TensorBoard event file, <run>/tensorboard/ "
       "(tensorboard --logdir runs/)"},
      {"log.level", Kind::text, std::string("info"),
       "Least severe log lines shown: debug (every rank prints everything), info, warn, error",
       -1e300, 1e300, log::kLevelNames.names()},
      {"log.all_ranks", Kind::boolean, false,
       "Every rank also writes its lines to <run>/logs/rank-R.log (rank 0's are train.log)"},
      {"log.peak_gflops", Kind::real, 0.0,
       "The GEMM rate (GFLOP/s per rank) MFU is reported against; 0 = measured at start-up "
       "until stable (the log says which)",
       0},
      {"log.progress", Kind::text, std::string("auto"),
       "Live progress bar: auto (on a terminal), on, off", -1e300, 1e300, kProgressNames.names()},

      {"dist.bucket_mb", Kind::real, 25.0, "DDP gradient bucket size in MiB", 0.001, 1e6},
      {"dist.grad_dtype", Kind::text, std::string("fp32"),
       "Gradient buffer dtype: fp32, or bf16 (needs model.precision bf16; halves gradient memory "
       "and all-reduce bytes; sums are computed in fp32 and rounded)",
       -1e300, 1e300, nn::kGradDtypeNames.names()},
      {"dist.backend", Kind::text, std::string("auto"),
       "auto (MPI between CPU ranks, NCCL between GPUs when there are several), or nccl (NCCL "
       "even for one GPU, whose collectives then run for real: to measure them and their "
       "overlap on a single GPU; run.device cuda)",
       -1e300, 1e300, kBackendNames.names()},
      {"dist.timeout_s", Kind::real, 300.0,
       "A collective waiting longer than this fails every rank", 0.1, 1e6},
      {"dist.interface", Kind::text, std::string("auto"),
       "The network interface ranks on different nodes talk over (Open MPI's TCP transport, "
       "NCCL's sockets): auto (the launcher's OMPI_MCA_btl_tcp_if_include, else the interface "
       "of the address the node's hostname resolves to, else the default route's), an interface "
       "name (eth0), or a CIDR range (10.0.0.0/16) when the names differ between nodes; checked "
       "between the nodes at start-up (docs/launching.md)"},
      {"dist.tensor_parallel", Kind::integer, int64_t(1),
       "Tensor-parallel degree: groups of this many consecutive ranks (one node's GPUs) each hold "
       "one model cut Megatron-style (heads, MLP hidden units, vocabulary); the data-parallel "
       "layer and dist.sharding run across the groups. Divides the ranks, the heads, the "
       "key/value heads, the vocabulary and the MLP width",
       1, 4096},
      {"dist.sequence_parallel", Kind::boolean, false,
       "With dist.tensor_parallel > 1: the norms, residual adds and their gradients run on 1/N "
       "of each micro-batch's tokens, the tensor group's all-reduces become reduce-scatters and "
       "all-gathers, and those activations take 1/N of the memory (docs/dist.md says when it "
       "pays)"},
      {"dist.pipeline_parallel", Kind::integer, int64_t(1),
       "Pipeline stages: the layers cut into this many consecutive runs (the embedding on the "
       "first stage, the head and the loss on the last), each held by a group of "
       "dist.tensor_parallel ranks; the step's micro-batches flow through them. The ranks form "
       "tensor (innermost) x pipeline x data groups (docs/dist.md, Pipeline parallelism)",
       1, 4096},
      {"dist.pipeline_schedule", Kind::text, std::string("1f1b"),
       "The order a stage runs its micro-batches in: gpipe (every forward, then every backward: "
       "all micro-batches' activations held), 1f1b (one forward one backward: at most "
       "dist.pipeline_parallel held), interleaved (1F1B over dist.pipeline_virtual_stages "
       "chunks per stage: a bubble that many times smaller, for more transfers)",
       -1e300, 1e300, dist::kPipelineScheduleNames.names()},
      {"dist.pipeline_virtual_stages", Kind::integer, int64_t(1),
       "pipeline_schedule interleaved: chunks of layers per stage (virtual stage v runs on stage "
       "v mod dist.pipeline_parallel); at least 2",
       1, 32},
      {"dist.pipeline_layers", Kind::list, L{},
       "Layers per stage (per virtual stage, interleaved), in order, adding up to model.n_layer; "
       "empty: balanced by compute (the last stage's head counted)"},
      {"dist.sharding", Kind::text, std::string("none"),
       "What each rank holds: none (everything, DDP), optimizer (1/N of the fp32 masters and "
       "AdamW moments: ZeRO-1), gradients (also 1/N of the gradients: ZeRO-2), full (also the "
       "weights between uses: ZeRO-3, FSDP)",
       -1e300, 1e300, dist::kShardingStageNames.names()},
      {"dist.reshard_after_forward", Kind::boolean, true,
       "sharding full: free a unit's gathered weights after its forward and gather again for "
       "backward (false: keep every unit gathered until the step ends)"},
      {"dist.deterministic", Kind::boolean, false,
       "The same bits at any power-of-two number of ranks dividing the global batch: each "
       "micro-batch's gradient summed over ranks in a fixed tree, micro-batches summed in a fixed "
       "tree, the norm summed exactly (CPU runs, fp32 gradients; one reduction per micro-batch)"},
      {"dist.join", Kind::text, std::string("true"),
       "Uneven inputs: true (finished ranks join with zeros), false (stop all at the first uneven "
       "step), throw (error)",
       -1e300, 1e300, dist::kJoinModeNames.names()},
  };
  return keys;
}

}  // namespace trainer::app
