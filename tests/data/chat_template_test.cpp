// Chat templates: each preset renders byte for byte as its published format writes the same
// conversation; template text becomes the tokenizer's special tokens and contents never do;
// exactly the assistant's contents and footers count in the loss; template files and every
// refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "bpe_json.h"
#include "common/temp_dir.h"
#include "data/chat_template.h"
#include "runtime/error.h"

namespace trainer::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Ids;
using testing::ids_of;
using trainer::testing::TempDir;
using testing::operator+;

// A byte-level tokenizer without merges (a byte's id is the byte) and the special tokens of
// ChatML and Llama 3 from id 256 on, as their tokenizer.json files mark them.
constexpr int32_t kImStart = 256, kImEnd = 257, kBegin = 258, kEnd = 259, kHeaderStart = 260,
                  kHeaderEnd = 261, kEot = 262;
Tokenizer chat_tokenizer() {
  json j = testing::tokenizer_json({}, {});
  const std::vector<std::string> specials = {
      "<|im_start|>",        "<|im_end|>",        "<|begin_of_text|>", "<|end_of_text|>",
      "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  for (size_t i = 0; i < specials.size(); ++i)
    j["added_tokens"].push_back(testing::added_token(256 + int(i), specials[i], true, false));
  return Tokenizer(j.dump(), "chat_tokenizer.json");
}

const std::vector<Message> kConversation = {
    {"system", "You are a helpful assistant."},
    {"user", "What is the capital of France?"},
    {"assistant", "Paris."},
    {"user", "And of Italy?"},
};

TEST(ChatTemplate, ChatmlRendersAsItsFormatSpecifies) {
  // ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message; the generation prompt is
  // the assistant's header.
  const std::string want =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
      "<|im_start|>assistant\nParis.<|im_end|>\n"
      "<|im_start|>user\nAnd of Italy?<|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(joined_text(render(chat_template("chatml"), kConversation, true)), want);
}

TEST(ChatTemplate, Llama3RendersAsItsFormatSpecifies) {
  // Meta's Llama 3 prompt format: <|begin_of_text|>, then per message a header, two newlines,
  // the content trimmed, and <|eot_id|>.
  std::vector<Message> messages = kConversation;
  messages[1].content = "  What is the capital of France?\n";  // trimmed, as Meta's template does
  const std::string want =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "You are a helpful assistant.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nParis.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nAnd of Italy?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(joined_text(render(chat_template("llama3"), messages, true)), want);
}

TEST(ChatTemplate, TemplateTextIsSpecialTokensAndOnlyResponsesCount) {
  const Tokenizer tok = chat_tokenizer();
  const ChatTemplate t = chat_template("chatml");
  const std::vector<Message> messages = {{"user", "Hi"}, {"assistant", "Yo"}};
  const EncodedConversation e = encode_conversation(tok, t, messages, true);
  const Ids want = Ids{kImStart} + ids_of("user\nHi") + Ids{kImEnd} + ids_of("\n") + Ids{kImStart} +
                   ids_of("assistant\nYo") + Ids{kImEnd} + ids_of("\n");
  EXPECT_EQ(e.tokens, want);
  EXPECT_EQ(tok.decode(e.tokens), joined_text(render(t, messages)));
  // Counted: "Yo", <|im_end|> and its newline; nothing of the prompt or the headers. ChatML
  // ends a turn with <|im_end|>, so no eos follows.
  Ids counted;
  for (size_t i = 0; i < e.tokens.size(); ++i)
    if (e.counted[i]) counted.push_back(e.tokens[i]);
  EXPECT_EQ(counted, ids_of("Yo") + Ids{kImEnd} + ids_of("\n"));
  EXPECT_EQ(turn_end_tokens(tok, t), (Ids{kEnd, kImEnd}));
  EXPECT_EQ(turn_end_text(t), "<|im_end|>");
  EXPECT_EQ(turn_end_text(chat_template("plain")), "");
}

TEST(ChatTemplate, ContentsAreOrdinaryTextEvenWhenTheySpellASpecialToken) {
  const Tokenizer tok = chat_tokenizer();
  const std::vector<Message> messages = {{"user", "<|im_end|>"}, {"assistant", "<|eot_id|>"}};
  const EncodedConversation e = encode_conversation(tok, chat_template("chatml"), messages, true);
  EXPECT_EQ(std::count(e.tokens.begin(), e.tokens.end(), kImEnd), 2);  // the two footers only
  EXPECT_EQ(std::count(e.tokens.begin(), e.tokens.end(), kEot), 0);
}

TEST(ChatTemplate, Llama3EncodesItsHeadersAsSpecialTokens) {
  const Tokenizer tok = chat_tokenizer();
  const std::vector<Message> messages = {{"user", "Hi"}, {"assistant", " Yo "}};
  const EncodedConversation e = encode_conversation(tok, chat_template("llama3"), messages, true);
  const Ids want = Ids{kBegin, kHeaderStart} + ids_of("user") + Ids{kHeaderEnd} + ids_of("\n\nHi") +
                   Ids{kEot, kHeaderStart} + ids_of("assistant") + Ids{kHeaderEnd} +
                   ids_of("\n\nYo") + Ids{kEot};
  EXPECT_EQ(e.tokens, want);
  const std::vector<uint8_t> tail(e.counted.end() - 3, e.counted.end());
  EXPECT_EQ(tail, (std::vector<uint8_t>{1, 1, 1}));  // "Yo" and <|eot_id|>
  EXPECT_EQ(std::count(e.counted.begin(), e.counted.end(), 1), 3);
}

TEST(ChatTemplate, PlainIsPromptThenCompletionThenACountedEos) {
  const Tokenizer tok = chat_tokenizer();
  const std::vector<Message> messages = {{"user", "2+2="}, {"assistant", "4"}};
  const EncodedConversation e = encode_conversation(tok, chat_template("plain"), messages, true);
  EXPECT_EQ(e.tokens, ids_of("2+2=4") + Ids{kEnd});
  EXPECT_EQ(e.counted, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1}));
  // --no-eos leaves it out; a conversation that ends with the user does not count its eos.
  EXPECT_EQ(encode_conversation(tok, chat_template("plain"), messages, false).tokens,
            ids_of("2+2=4"));
  const std::vector<Message> open = {{"user", "2+2="}};
  EXPECT_EQ(encode_conversation(tok, chat_template("plain"), open, true).counted,
            (std::vector<uint8_t>{0, 0, 0, 0, 0}));
}

TEST(ChatTemplate, AFileGivesEachRoleItsHeaderAndFooter) {
  TempDir dir("chat_template");
  const fs::path file = dir.path / "alpaca.json";
  std::ofstream(file) << R"({"prefix": "<|begin_of_text|>", "eos": true, "roles": {
      "user": {"header": "### Instruction:\n", "footer": "\n\n"},
      "assistant": {"header": "### Response:\n", "footer": ""}}})";
  const ChatTemplate t = chat_template(file.string());
  const std::vector<Message> messages = {{"user", "Add 2 and 2."}, {"assistant", "4"}};
  EXPECT_EQ(joined_text(render(t, messages)),
            "<|begin_of_text|>### Instruction:\nAdd 2 and 2.\n\n### Response:\n4");
  const Tokenizer tok = chat_tokenizer();
  const EncodedConversation e = encode_conversation(tok, t, messages, true);
  EXPECT_EQ(e.tokens.front(), kBegin);
  EXPECT_EQ(e.tokens.back(), kEnd);
  EXPECT_EQ(std::count(e.counted.begin(), e.counted.end(), 1), 2);  // "4" and the eos
  const std::vector<Message> system = {{"system", "x"}};
  EXPECT_THROW(render(t, system), Error);  // a role the file lacks
}

// Expects chat_template(arg) to throw E with a message holding `what`.
template <typename E>
void expect_refusal(const std::string& arg, const std::string& what) {
  try {
    chat_template(arg);
    FAIL() << "no error for " << arg;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, RefusesWhatItCannotRender) {
  TempDir dir("chat_template");
  expect_refusal<UsageError>("chatlm", "unknown chat template 'chatlm'");
  expect_refusal<UsageError>(dir.path.string(), "Jinja chat_template is not read");
  expect_refusal<UsageError>("template.jinja", "Jinja chat templates are not read");
  expect_refusal<Error>((dir.path / "none.json").string(), "no such file");
  auto file = [&](const std::string& text) {
    const fs::path p = dir.path / "t.json";
    std::ofstream(p) << text;
    return p.string();
  };
  expect_refusal<Error>(file("{"), "not a JSON chat template");
  expect_refusal<Error>(file(R"({"rolse": {}})"), "unknown key 'rolse'");
  expect_refusal<Error>(file(R"({"roles": {"user": {"heder": ""}}})"),
                        "unknown key 'roles.user.heder'");
  expect_refusal<Error>(file(R"({"roles": {"user": {"header": 1}}})"),
                        "roles.user.header is not a string");
  expect_refusal<Error>(file(R"({"roles": {"user": {}}})"), "roles has no 'assistant'");
  expect_refusal<Error>(file(R"({"roles": {"user": {}, "assistant": {"trained": false}}})"),
                        "no role is trained");
}

}  // namespace
}  // namespace trainer::data
