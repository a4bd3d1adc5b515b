// Chat templates: presets, template files, rendering and encoding conversations.
#include "data/chat_template.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Note [Chat template presets]
// chatml: each message is "<|im_start|>{role}\n{content}<|im_end|>\n" (OpenAI's ChatML, which
//   Qwen2, Qwen2.5 and Qwen3 use); no default system message is inserted (Qwen2.5's own
//   template adds one when a conversation has none: write it into the data).
// llama3: "<|begin_of_text|>", then each message is
//   "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>" with the content
//   trimmed, as Meta's Llama 3 prompt format and its Hugging Face template write it (Llama
//   3.1's template also writes a knowledge-cutoff date into the system message: write it into
//   the data where it is wanted).
// plain: the contents alone, back to back, and the tokenizer's eos after the last: a prompt and
//   its completion for a base model.
// In each, the assistant's content and footer count in the loss; the prefix, every header and
// every other role's message do not.
ChatTemplate preset(const std::string& name) {
  ChatTemplate t;
  t.name = name;
  if (name == "chatml") {
    for (const std::string r : {"system", "user", "assistant", "tool"})
      t.roles[r] = {"<|im_start|>" + r + "\n", "<|im_end|>\n", r == "assistant"};
  } else if (name == "llama3") {
    t.prefix = "<|begin_of_text|>";
    t.trim = true;
    for (const std::string r : {"system", "user", "assistant", "ipython"})
      t.roles[r] = {"<|start_header_id|>" + r + "<|end_header_id|>\n\n", "<|eot_id|>",
                    r == "assistant"};
  } else if (name == "plain") {
    t.eos = true;
    for (const std::string r : {"system", "user", "assistant", "tool"})
      t.roles[r] = {"", "", r == "assistant"};
  } else {
    throw UsageError(fmt::format(
        "unknown chat template '{}' (chatml, llama3, plain, or a .json file of your own)", name));
  }
  return t;
}

// A template file: {"prefix": "...", "trim": false, "eos": false, "roles": {"user": {"header":
// "...", "footer": "..."}, "assistant": {"header": "...", "footer": "...", "trained": true}}}.
ChatTemplate read_template_file(const fs::path& path) {
  const std::string where = path.string();
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    THROW_ERROR("{}: not a JSON chat template: {}", where, e.what());
  }
  CHECK(j.is_object(), "{}: a chat template is a JSON object", where);
  auto string_of = [&](const json& o, const char* key, const std::string& at) {
    auto it = o.find(key);
    if (it == o.end()) return std::string();
    CHECK(it->is_string(), "{}: {}{} is not a string", where, at, key);
    return it->get<std::string>();
  };
  auto bool_of = [&](const json& o, const char* key, const std::string& at) {
    auto it = o.find(key);
    if (it == o.end()) return false;
    CHECK(it->is_boolean(), "{}: {}{} is not true or false", where, at, key);
    return it->get<bool>();
  };
  for (const auto& [key, value] : j.items())
    CHECK(key == "prefix" || key == "trim" || key == "eos" || key == "roles",
          "{}: unknown key '{}' (prefix, trim, eos, roles)", where, key);
  ChatTemplate t;
  t.name = where;
  t.prefix = string_of(j, "prefix", "");
  t.trim = bool_of(j, "trim", "");
  t.eos = bool_of(j, "eos", "");
  auto roles = j.find("roles");
  CHECK(roles != j.end() && roles->is_object(), "{}: no 'roles' object", where);
  for (const auto& [role, spec] : roles->items()) {
    const std::string at = "roles." + role + ".";
    CHECK(spec.is_object(), "{}: roles.{} is not an object", where, role);
    for (const auto& [key, value] : spec.items())
      CHECK(key == "header" || key == "footer" || key == "trained",
            "{}: unknown key '{}{}' (header, footer, trained)", where, at, key);
    const bool trained =
        spec.contains("trained") ? bool_of(spec, "trained", at) : role == "assistant";
    t.roles[role] = {string_of(spec, "header", at), string_of(spec, "footer", at), trained};
  }
  for (const char* role : {"user", "assistant"})
    CHECK(t.roles.count(role), "{}: roles has no '{}' (prompt/completion data and sample use it)",
          where, role);
  bool any_trained = false;
  for (const auto& [role, r] : t.roles) any_trained = any_trained || r.trained;
  CHECK(any_trained, "{}: no role is trained, so nothing would count in the loss", where);
  return t;
}

std::string_view trimmed(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

ChatTemplate chat_template(const std::string& name_or_file) {
  std::error_code ec;
  const fs::path path(name_or_file);
  if (fs::is_directory(path, ec))
    throw UsageError(fmt::format(
        "{} is a folder: a Hugging Face folder's Jinja chat_template is not read (no Jinja "
        "engine is linked); choose the preset it matches (chatml, llama3) or a .json template",
        name_or_file));
  if (name_or_file.ends_with(".jinja"))
    throw UsageError(fmt::format(
        "{}: Jinja chat templates are not read (no Jinja engine is linked); choose the preset "
        "it matches (chatml, llama3) or a .json template",
        name_or_file));
  if (name_or_file.ends_with(".json")) {
    CHECK(fs::is_regular_file(path, ec), "chat template {}: no such file", name_or_file);
    return read_template_file(path);
  }
  return preset(name_or_file);
}

std::vector<Rendered> render(const ChatTemplate& t, std::span<const Message> messages,
                             bool generation_prompt) {
  std::vector<Rendered> out;
  auto add = [&](std::string_view text, bool is_template, bool counted) {
    if (!text.empty()) out.push_back({std::string(text), is_template, counted});
  };
  add(t.prefix, true, false);
  for (const Message& m : messages) {
    auto it = t.roles.find(m.role);
    CHECK(it != t.roles.end(), "role '{}' is not in chat template {}", m.role, t.name);
    const ChatTemplate::Role& r = it->second;
    add(r.header, true, false);
    add(t.trim ? trimmed(m.content) : std::string_view(m.content), false, r.trained);
    add(r.footer, true, r.trained);
  }
  if (generation_prompt) add(t.roles.at("assistant").header, true, false);
  return out;
}

std::string joined_text(std::span<const Rendered> rendered) {
  std::string text;
  for (const Rendered& r : rendered) text += r.text;
  return text;
}

EncodedConversation encode_rendered(const Tokenizer& tok, std::span<const Rendered> rendered) {
  EncodedConversation out;
  for (const Rendered& r : rendered) {
    const std::vector<int32_t> ids =
        r.is_template ? tok.encode_template(r.text) : tok.encode(r.text);
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.counted.insert(out.counted.end(), ids.size(), r.counted ? 1 : 0);
  }
  return out;
}

EncodedConversation encode_conversation(const Tokenizer& tok, const ChatTemplate& t,
                                        std::span<const Message> messages, bool append_eos) {
  EncodedConversation out = encode_rendered(tok, render(t, messages));
  if (t.eos && append_eos && tok.eos_id() >= 0) {
    const bool last_trained = !messages.empty() && t.roles.at(messages.back().role).trained;
    out.tokens.push_back(tok.eos_id());
    out.counted.push_back(last_trained ? 1 : 0);
  }
  return out;
}

std::vector<int32_t> turn_end_tokens(const Tokenizer& tok, const ChatTemplate& t) {
  std::vector<int32_t> ends;
  if (tok.eos_id() >= 0) ends.push_back(tok.eos_id());
  const std::string& footer = t.roles.at("assistant").footer;
  for (const auto& [text, id] : tok.special_tokens())
    if (footer.find(text) != std::string::npos) ends.push_back(id);
  return ends;
}

std::string turn_end_text(const ChatTemplate& t) {
  const std::string& footer = t.roles.at("assistant").footer;
  return footer.substr(0, footer.find_last_not_of(" \t\r\n") + 1);
}

}  // namespace trainer::data
