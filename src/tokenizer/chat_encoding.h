// DeepSeek-V4 chat encoding: renders a conversation into the exact prompt string the model was trained
// on, and parses a completion (reasoning, content, DSML tool calls) back into a structured message.
// The format follows DeepSeek's reference encoder (encoding/encoding_dsv4.py of the V4 release) byte
// for byte; docs/chat_encoding.md describes it. Special tokens are plain strings here: the tokenizer
// matches them and supplies their ids, so no id is hard-coded.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::tokenizer {

// Special-token strings as they appear in the prompt.
namespace chat_tokens {
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";  // tag prefix: <｜DSML｜invoke ...>
}  // namespace chat_tokens

enum class Role { kSystem, kUser, kAssistant, kTool, kDeveloper, kLatestReminder };

// "thinking": the assistant turn opens with <think> and reasoning is rendered; "chat": </think>
// closes the (empty) reasoning right after <｜Assistant｜>.
enum class ThinkingMode { kChat, kThinking };

// The V4 release accepts no effort, "high" or "max"; only "max" changes the prompt (a fixed paragraph
// in front of the first message, thinking mode only).
enum class ReasoningEffort { kUnset, kHigh, kMax };

// Quick-instruction tasks: a message's task appends a task token after it (see docs).
enum class ChatTask { kNone, kAction, kQuery, kAuthority, kDomain, kTitle, kReadUrl };

struct ToolCall {
  std::string id;         // OpenAI call id; never rendered, only used to order tool results.
  std::string name;
  std::string arguments;  // JSON text of an object, as in OpenAI's function.arguments
};

struct Message {
  Role role = Role::kUser;
  std::string content;
  std::string reasoning_content;     // assistant
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool: which call this result answers
  // Function specs ({"name", "description", "parameters", ...}: the "function" member of an
  // OpenAI tool). Rendered on system and developer messages; ordered_json because the prompt
  // shows them with their keys in the caller's order.
  std::vector<nlohmann::ordered_json> tools;
  nlohmann::ordered_json response_format;  // system/developer; null (or any falsy JSON) = none
  ChatTask task = ChatTask::kNone;
  bool wo_eos = false;  // assistant: leave the turn open (no EOS), e.g. to continue a prefix
};

struct ChatOptions {
  ThinkingMode thinking_mode = ThinkingMode::kChat;
  // Drop reasoning of assistant turns before the last user turn (and developer turns before it).
  // Ignored, as in the reference, as soon as any message carries tools.
  bool drop_thinking = true;
  // The reference's add_default_bos_token: BOS starts the prompt unless a context is given.
  bool add_bos = true;
  ReasoningEffort reasoning_effort = ReasoningEffort::kUnset;
  // The reference renders tool-call arguments that are not valid JSON as one string parameter named
  // "arguments". With this set such arguments are an error instead.
  bool strict_tool_arguments = false;
};

// Renders `messages` as the prompt. There is no add_generation_prompt switch: as in the reference,
// a conversation ending in a user/developer turn (or a tool result) gets "<｜Assistant｜><think>" or
// "<｜Assistant｜></think>" appended; one ending in an assistant turn gets nothing. `context` is an
// already rendered prefix: it takes part in tool-result ordering and in deciding which reasoning to
// drop, but is not rendered itself (and suppresses BOS).
Result<std::string> encode_messages(std::span<const Message> messages, const ChatOptions& options,
                                    std::span<const Message> context = {});

// OpenAI-style JSON adapter. Accepts a list of messages, or an object {"messages": [...], "tools":
// [...]} whose tools go on the first message (the layout of the reference's test case 1).
// Errors name the offending message and field ("messages[3].tool_calls[0].function.name: ...").
Result<std::vector<Message>> messages_from_json(const nlohmann::ordered_json& messages_or_request);
// The same from JSON text (parsed with key order kept).
Result<std::vector<Message>> messages_from_json_text(std::string_view json_text);
// messages_from_json + encode_messages.
Result<std::string> encode_chat(const nlohmann::ordered_json& messages_or_request, const ChatOptions& options);

struct ParsedAssistant {
  std::string reasoning_content;
  std::string content;
  // Arguments are rebuilt as the reference does: {"name": value, ...} with string="true" values
  // JSON-quoted and string="false" values copied as written by the model. Ids are empty.
  std::vector<ToolCall> tool_calls;
};

struct ParseOptions {
  // The reference copies string="false" values into the arguments unchecked. With this set (the
  // default) a value that is not valid JSON is an error naming the call and parameter.
  bool validate_arguments = true;
};

// Parses one assistant completion: the text after "<｜Assistant｜><think>" (thinking mode) or
// "<｜Assistant｜></think>" (chat mode), up to and including the EOS token (which may only be
// missing after a tool-call block). Malformed output is an error, as in the reference.
Result<ParsedAssistant> parse_assistant(std::string_view text, ThinkingMode mode, const ParseOptions& options = {});

// {"role": "assistant", "content", "reasoning_content", "tool_calls": [{"type": "function", "function":
// {"name", "arguments"}}]}, the reference parser's return value.
nlohmann::ordered_json to_openai_json(const ParsedAssistant& parsed);

// json.dumps(value, ensure_ascii=False) as Python writes it (", " and ": " separators, keys in order,
// floats as repr): the serialization the prompt uses for tool schemas and non-string arguments.
std::string dump_json_like_python(const nlohmann::ordered_json& value);

std::string_view role_name(Role role);
Result<Role> role_from_name(std::string_view name);
Result<ReasoningEffort> reasoning_effort_from_name(std::string_view name);  // "", "high", "max"
Result<ChatTask> task_from_name(std::string_view name);  // "action", "query", ...

}  // namespace deepinfer::tokenizer
