// Chat templates: how a conversation (messages with roles) becomes the text and tokens a model
// trains on, and which of those tokens count in the loss (the responses). Presets for ChatML
// and Llama 3, a plain concatenation, and a user's own header/footer strings per role from a
// JSON file. Rules in docs/data.md ("Instruction data").
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace trainer::data {

struct Message {
  std::string role;  // one of the template's roles: system, user, assistant, ...
  std::string content;
};

// The strings around each message. Template text (prefix, headers, footers) may hold the
// tokenizer's special tokens; a message's content is always ordinary text.
struct ChatTemplate {
  struct Role {
    std::string header, footer;
    bool trained = false;  // its content and footer count in the loss (the assistant's)
  };
  std::string name;    // a preset's name or the file it was read from
  std::string prefix;  // before the first message (Llama 3's <|begin_of_text|>)
  std::map<std::string, Role> roles;
  bool trim = false;  // contents lose their leading and trailing whitespace (Llama 3)
  bool eos = false;   // the tokenizer's eos ends the conversation (where the footers do not)
};

// The preset `name` (chatml, llama3, plain), or the JSON file at that path. Throws
// trainer::UsageError on an unknown name, trainer::Error naming the file and the key on a bad
// file. A Hugging Face folder's Jinja chat_template is refused by name: no Jinja engine is
// linked (use the preset that matches it).
ChatTemplate chat_template(const std::string& name_or_file);

// One stretch of rendered text: template text or a message's content, and whether its tokens
// count in the loss.
struct Rendered {
  std::string text;
  bool is_template = false;
  bool counted = false;
};

// The conversation's stretches in order; with `generation_prompt`, the assistant's header ends
// it (what `sample` continues from). Throws trainer::Error on a role the template lacks.
std::vector<Rendered> render(const ChatTemplate& t, std::span<const Message> messages,
                             bool generation_prompt = false);

// The stretches joined: the conversation as text.
std::string joined_text(std::span<const Rendered> rendered);

// A conversation as tokens, and whether each counts as a target in the loss.
struct EncodedConversation {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> counted;  // one 0/1 per token
};

// Encodes each stretch apart (template text with encode_template, contents with encode) and
// joins them. Thread-safe.
EncodedConversation encode_rendered(const Tokenizer& tok, std::span<const Rendered> rendered);

// encode_rendered of render(t, messages); with t.eos and `append_eos`, the tokenizer's eos
// follows, counted when the last message trains. Thread-safe.
EncodedConversation encode_conversation(const Tokenizer& tok, const ChatTemplate& t,
                                        std::span<const Message> messages, bool append_eos);

// The tokens that end an assistant's turn under `t`: the special tokens in its footer, and the
// tokenizer's eos. `sample` stops at any of them.
std::vector<int32_t> turn_end_tokens(const Tokenizer& tok, const ChatTemplate& t);

// The assistant's footer without its trailing whitespace ("<|im_end|>"; "" for plain): where a
// tokenizer without the template's special tokens spells the end of a turn.
std::string turn_end_text(const ChatTemplate& t);

}  // namespace trainer::data
