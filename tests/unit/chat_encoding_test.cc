// DeepSeek-V4 chat encoding (tokenizer/chat_encoding.h): the reference's four golden prompts byte for
// byte, parsing assistant turns back (fixtures/README.md, chat_encoding/), round trips, the rules the
// goldens do not reach (tool-result order, dropped reasoning, tasks, effort, context) and errors.
#include "tokenizer/chat_encoding.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace deepinfer::tokenizer {
namespace {

using nlohmann::ordered_json;

const std::string kBos = std::string(chat_tokens::kBos);
const std::string kEos = std::string(chat_tokens::kEos);

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::string(DEEPINFER_FIXTURES_DIR) + "/chat_encoding/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChatOptions mode(ThinkingMode m) {
  ChatOptions o;
  o.thinking_mode = m;
  return o;
}

std::string encode_fixture(int n, ThinkingMode m) {
  auto messages = messages_from_json_text(read_fixture("test_input_" + std::to_string(n) + ".json"));
  EXPECT_TRUE(messages.is_ok()) << messages.status().to_string();
  if (!messages.is_ok()) return "";
  auto prompt = encode_messages(messages.value(), mode(m));
  EXPECT_TRUE(prompt.is_ok()) << prompt.status().to_string();
  return prompt.is_ok() ? prompt.value() : "";
}

ParsedAssistant parse_ok(std::string_view text, ThinkingMode m, ParseOptions opts = {}) {
  auto parsed = parse_assistant(text, m, opts);
  EXPECT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  return parsed.is_ok() ? parsed.value() : ParsedAssistant{};
}

ordered_json args_json(const ToolCall& tc) { return ordered_json::parse(tc.arguments, nullptr, false); }

Message user(std::string content) {
  Message m;
  m.role = Role::kUser;
  m.content = std::move(content);
  return m;
}

Message assistant(std::string content, std::string reasoning = "", std::vector<ToolCall> calls = {}) {
  Message m;
  m.role = Role::kAssistant;
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  m.tool_calls = std::move(calls);
  return m;
}

Message tool_result(std::string id, std::string content) {
  Message m;
  m.role = Role::kTool;
  m.tool_call_id = std::move(id);
  m.content = std::move(content);
  return m;
}

std::string encode_ok(const std::vector<Message>& messages, const ChatOptions& options,
                      const std::vector<Message>& context = {}) {
  auto prompt = encode_messages(messages, options, context);
  EXPECT_TRUE(prompt.is_ok()) << prompt.status().to_string();
  return prompt.is_ok() ? prompt.value() : "";
}

// Expects an error whose message contains `needle` (the field or index it must name).
template <typename T>
void expect_error(const Result<T>& r, const std::string& needle) {
  ASSERT_FALSE(r.is_ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
}

// --- the reference's goldens -----------------------------------------------------------------

TEST(ChatEncodingGolden, Case1ThinkingWithTools) {
  EXPECT_EQ(encode_fixture(1, ThinkingMode::kThinking), read_fixture("test_output_1.txt"));
}

TEST(ChatEncodingGolden, Case2ThinkingWithoutTools) {
  EXPECT_EQ(encode_fixture(2, ThinkingMode::kThinking), read_fixture("test_output_2.txt"));
}

TEST(ChatEncodingGolden, Case3DeveloperToolsAndLatestReminder) {
  EXPECT_EQ(encode_fixture(3, ThinkingMode::kThinking), read_fixture("test_output_3.txt"));
}

TEST(ChatEncodingGolden, Case4ActionTaskInChatMode) {
  EXPECT_EQ(encode_fixture(4, ThinkingMode::kChat), read_fixture("test_output_4.txt"));
}

// Case 1 is {"messages", "tools"}; the reference's test puts the tools on the first message.
TEST(ChatEncodingGolden, Case1RequestToolsGoOnFirstMessage) {
  const ordered_json request = ordered_json::parse(read_fixture("test_input_1.json"), nullptr, false);
  ASSERT_TRUE(request.is_object());
  auto messages = messages_from_json(request);
  ASSERT_TRUE(messages.is_ok()) << messages.status().to_string();
  ASSERT_EQ(messages->size(), 5u);
  ASSERT_EQ((*messages)[0].tools.size(), 2u);
  EXPECT_EQ((*messages)[0].tools[0]["name"], "get_weather");
  for (size_t i = 1; i < messages->size(); ++i) EXPECT_TRUE((*messages)[i].tools.empty());
  auto prompt = encode_chat(request, mode(ThinkingMode::kThinking));
  ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
  EXPECT_EQ(prompt.value(), read_fixture("test_output_1.txt"));
}

// What fixtures/README.md says parsing case 1's assistant turns gives (the reference's test too).
TEST(ChatEncodingGolden, Case1AssistantTurnsParseBack) {
  const std::string prompt = read_fixture("test_output_1.txt");
  const std::string marker = "<｜Assistant｜><think>";
  const size_t first = prompt.find(marker) + marker.size();
  const size_t first_end = prompt.find("<｜User｜>", first);
  ASSERT_NE(first_end, std::string::npos);
  const ParsedAssistant call = parse_ok(std::string_view(prompt).substr(first, first_end - first),
                                        ThinkingMode::kThinking);
  EXPECT_EQ(call.reasoning_content,
            "The user wants to know the weather in Beijing. I should use the get_weather tool.");
  EXPECT_EQ(call.content, "");
  ASSERT_EQ(call.tool_calls.size(), 1u);
  EXPECT_EQ(call.tool_calls[0].name, "get_weather");
  EXPECT_EQ(args_json(call.tool_calls[0]), ordered_json::parse(R"({"location": "Beijing", "unit": "celsius"})"));
  EXPECT_EQ(call.tool_calls[0].arguments, R"({"location": "Beijing", "unit": "celsius"})");

  const size_t last = prompt.rfind(marker) + marker.size();
  const ParsedAssistant final_turn = parse_ok(std::string_view(prompt).substr(last), ThinkingMode::kThinking);
  EXPECT_EQ(final_turn.reasoning_content, "Got the weather data. Let me format a nice response.");
  EXPECT_NE(final_turn.content.find("22°C"), std::string::npos);
  EXPECT_TRUE(final_turn.tool_calls.empty());

  const ordered_json openai = to_openai_json(call);
  EXPECT_EQ(openai["role"], "assistant");
  EXPECT_EQ(openai["tool_calls"][0]["type"], "function");
  EXPECT_EQ(openai["tool_calls"][0]["function"]["name"], "get_weather");
}

TEST(ChatEncodingGolden, Case2DropsEarlierReasoningAndParsesLastTurn) {
  const std::string prompt = read_fixture("test_output_2.txt");
  EXPECT_EQ(prompt.find("The user said hello"), std::string::npos);
  const std::string marker = "<｜Assistant｜><think>";
  const ParsedAssistant last =
      parse_ok(std::string_view(prompt).substr(prompt.rfind(marker) + marker.size()), ThinkingMode::kThinking);
  EXPECT_EQ(last.reasoning_content, "The user asks about the capital of France. It is Paris.");
  EXPECT_EQ(last.content, "The capital of France is Paris.");
  EXPECT_TRUE(last.tool_calls.empty());
}

TEST(ChatEncodingGolden, Case3ToolCallParsesBack) {
  const std::string prompt = read_fixture("test_output_3.txt");
  const std::string marker = "<｜Assistant｜><think>";
  const size_t start = prompt.find(marker) + marker.size();
  const size_t end = prompt.find("<｜User｜>", start);
  const ParsedAssistant call = parse_ok(std::string_view(prompt).substr(start, end - start), ThinkingMode::kThinking);
  EXPECT_EQ(call.reasoning_content, "用户想知道小柴胡冲剂和布洛芬能否一起服用。");
  ASSERT_EQ(call.tool_calls.size(), 1u);
  EXPECT_EQ(call.tool_calls[0].name, "search");
  EXPECT_EQ(call.tool_calls[0].arguments, R"({"queries": "小柴胡冲剂 布洛芬 相互作用 一起吃"})");
}

// --- round trips -----------------------------------------------------------------------------

std::vector<ToolCall> varied_calls() {
  return {
      {"c1", "get_weather", R"({"location": "Beijing", "unit": "celsius"})"},
      {"c2", "mixed",
       R"({"n": 3, "x": -2.5, "big": 1e+16, "ok": true, "none": null, "list": [1, "two", {"k": []}],)"
       R"( "obj": {"z": 1, "a": 2}, "quote": "say \"hi\"\nnext line", "angle": "a<b>c", "uni": "北京 22°C"})"},
      {"c3", "no_args", "{}"},
  };
}

TEST(ChatEncodingRoundTrip, ThinkingModeToolCalls) {
  const std::vector<Message> msgs = {user("go"), assistant("Let me check.", "Need tools.", varied_calls())};
  const std::string prompt = encode_ok(msgs, mode(ThinkingMode::kThinking));
  const std::string prefix = kBos + "<｜User｜>go<｜Assistant｜><think>";
  ASSERT_EQ(prompt.substr(0, prefix.size()), prefix);
  const ParsedAssistant parsed = parse_ok(std::string_view(prompt).substr(prefix.size()), ThinkingMode::kThinking);
  EXPECT_EQ(parsed.reasoning_content, "Need tools.");
  EXPECT_EQ(parsed.content, "Let me check.");
  const std::vector<ToolCall> calls = varied_calls();
  ASSERT_EQ(parsed.tool_calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(parsed.tool_calls[i].name, calls[i].name);
    // Arguments written in Python's json.dumps style come back byte for byte.
    EXPECT_EQ(parsed.tool_calls[i].arguments, calls[i].arguments);
    EXPECT_EQ(args_json(parsed.tool_calls[i]), args_json(calls[i]));
  }
}

TEST(ChatEncodingRoundTrip, ChatModeCompactArguments) {
  const std::vector<ToolCall> calls = {{"", "f", R"({"a":1,"b":"x","c":[true,false]})"}};
  const std::string prompt = encode_ok({user("q"), assistant("", "", calls)}, mode(ThinkingMode::kChat));
  const std::string prefix = kBos + "<｜User｜>q<｜Assistant｜></think>";
  ASSERT_EQ(prompt.substr(0, prefix.size()), prefix);
  const ParsedAssistant parsed = parse_ok(std::string_view(prompt).substr(prefix.size()), ThinkingMode::kChat);
  EXPECT_EQ(parsed.reasoning_content, "");
  EXPECT_EQ(parsed.content, "");
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].arguments, R"({"a": 1, "b": "x", "c": [true, false]})");
  EXPECT_EQ(args_json(parsed.tool_calls[0]), args_json(calls[0]));
}

TEST(ChatEncodingRoundTrip, PlainAnswer) {
  const ParsedAssistant p = parse_ok("Hello there." + kEos, ThinkingMode::kChat);
  EXPECT_EQ(p.content, "Hello there.");
  EXPECT_EQ(p.reasoning_content, "");
  EXPECT_TRUE(p.tool_calls.empty());
}

// --- rules the goldens do not reach ----------------------------------------------------------

TEST(ChatEncodingRules, ToolResultsFollowCallOrder) {
  const std::vector<ToolCall> calls = {{"c1", "a", "{}"}, {"c2", "b", "{}"}};
  const std::vector<Message> msgs = {user("q"), assistant("", "", calls), tool_result("c2", "R2"),
                                     tool_result("c1", "R1")};
  EXPECT_EQ(encode_ok(msgs, mode(ThinkingMode::kChat)),
            kBos + "<｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n\n"
                   "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"b\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" +
                kEos + "<｜User｜><tool_result>R1</tool_result>\n\n<tool_result>R2</tool_result><｜Assistant｜></think>");
}

TEST(ChatEncodingRules, ConsecutiveUserMessagesAndToolResultsShareATurn) {
  EXPECT_EQ(encode_ok({user("a"), user("b")}, mode(ThinkingMode::kChat)),
            kBos + "<｜User｜>a\n\nb<｜Assistant｜></think>");
  const std::vector<Message> msgs = {user("q"), assistant("", "", {{"c1", "f", "{}"}}), tool_result("c1", "R"),
                                     user("and now?")};
  const std::string prompt = encode_ok(msgs, mode(ThinkingMode::kChat));
  const std::string tail = "<｜User｜><tool_result>R</tool_result>\n\nand now?<｜Assistant｜></think>";
  EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail);
}

TEST(ChatEncodingRules, DropThinkingRemovesOldReasoningAndDeveloperTurns) {
  Message system;
  system.role = Role::kSystem;
  system.content = "S";
  Message developer;
  developer.role = Role::kDeveloper;
  developer.content = "D1";
  const std::vector<Message> msgs = {system, developer, assistant("A1", "R1"), user("U2")};
  EXPECT_EQ(encode_ok(msgs, mode(ThinkingMode::kThinking)),
            kBos + "SA1" + kEos + "<｜User｜>U2<｜Assistant｜><think>");
  ChatOptions keep = mode(ThinkingMode::kThinking);
  keep.drop_thinking = false;
  EXPECT_EQ(encode_ok(msgs, keep),
            kBos + "S<｜User｜>D1<｜Assistant｜><think>R1</think>A1" + kEos + "<｜User｜>U2<｜Assistant｜><think>");
  // Chat mode never shows reasoning and drops nothing.
  EXPECT_EQ(encode_ok(msgs, mode(ThinkingMode::kChat)),
            kBos + "S<｜User｜>D1<｜Assistant｜></think>A1" + kEos + "<｜User｜>U2<｜Assistant｜></think>");
}

TEST(ChatEncodingRules, TaskTokens) {
  Message q = user("q");
  q.task = ChatTask::kQuery;
  EXPECT_EQ(encode_ok({q}, mode(ThinkingMode::kChat)), kBos + "<｜User｜>q<｜query｜>");
  q.task = ChatTask::kAction;
  EXPECT_EQ(encode_ok({q}, mode(ThinkingMode::kThinking)), kBos + "<｜User｜>q<｜Assistant｜><think><｜action｜>");
  // A title task on an assistant turn; the turn answering a task carries no reasoning.
  Message answered = assistant("a");
  answered.task = ChatTask::kTitle;
  EXPECT_EQ(encode_ok({user("u"), answered, assistant("T", "never shown")}, mode(ThinkingMode::kThinking)),
            kBos + "<｜User｜>u<｜Assistant｜><think></think>a" + kEos + "<｜title｜>T" + kEos);
}

TEST(ChatEncodingRules, ReasoningEffortMaxPrefixesThinkingPrompts) {
  ChatOptions o = mode(ThinkingMode::kThinking);
  o.reasoning_effort = ReasoningEffort::kMax;
  const std::string prompt = encode_ok({user("q")}, o);
  const std::string head = kBos + "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very";
  EXPECT_EQ(prompt.substr(0, head.size()), head);
  const std::string tail = "no assumption is left unchecked.\n\n<｜User｜>q<｜Assistant｜><think>";
  EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail);
  o.reasoning_effort = ReasoningEffort::kHigh;
  EXPECT_EQ(encode_ok({user("q")}, o), kBos + "<｜User｜>q<｜Assistant｜><think>");
  ChatOptions chat = mode(ThinkingMode::kChat);
  chat.reasoning_effort = ReasoningEffort::kMax;
  EXPECT_EQ(encode_ok({user("q")}, chat), kBos + "<｜User｜>q<｜Assistant｜></think>");
}

TEST(ChatEncodingRules, ContextIsNotRenderedAndSuppressesBos) {
  const std::vector<Message> context = {user("a"), assistant("b", "r")};
  const std::vector<Message> next = {user("c")};
  const std::string incremental = encode_ok(next, mode(ThinkingMode::kThinking), context);
  EXPECT_EQ(incremental, "<｜User｜>c<｜Assistant｜><think>");
  const std::string whole = encode_ok({context[0], context[1], next[0]}, mode(ThinkingMode::kThinking));
  EXPECT_EQ(whole, kBos + "<｜User｜>a<｜Assistant｜></think>b" + kEos + incremental);
  ChatOptions no_bos = mode(ThinkingMode::kChat);
  no_bos.add_bos = false;
  EXPECT_EQ(encode_ok(next, no_bos), "<｜User｜>c<｜Assistant｜></think>");
}

TEST(ChatEncodingRules, WoEosLeavesTheTurnOpen) {
  Message partial = assistant("The answer is");
  partial.wo_eos = true;
  EXPECT_EQ(encode_ok({user("q"), partial}, mode(ThinkingMode::kChat)),
            kBos + "<｜User｜>q<｜Assistant｜></think>The answer is");
}

TEST(ChatEncodingRules, ResponseFormatOnSystem) {
  auto prompt = encode_chat(ordered_json::parse(R"([{"role": "system", "content": "S",
      "response_format": {"type": "json_schema", "schema": {"b": 1, "a": [0.5]}}}, {"role": "user", "content": "q"}])"),
                            mode(ThinkingMode::kChat));
  ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
  EXPECT_EQ(prompt.value(), kBos +
                                "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
                                "reply:\n{\"type\": \"json_schema\", \"schema\": {\"b\": 1, \"a\": [0.5]}}"
                                "<｜User｜>q<｜Assistant｜></think>");
}

// The reference renders arguments that are not JSON as one string parameter named "arguments".
TEST(ChatEncodingRules, UnparsableArgumentsFollowTheReference) {
  const std::vector<Message> msgs = {user("q"), assistant("", "", {{"", "f", "not json"}})};
  const std::string prompt = encode_ok(msgs, mode(ThinkingMode::kChat));
  EXPECT_NE(prompt.find("<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>"),
            std::string::npos);
  ChatOptions strict = mode(ThinkingMode::kChat);
  strict.strict_tool_arguments = true;
  expect_error(encode_messages(msgs, strict), "messages[1].tool_calls[0].arguments");
}

TEST(ChatEncodingRules, ArgumentsGivenAsObjectMatchStringForm) {
  const char* as_string = R"([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"type":
      "function", "function": {"name": "f", "arguments": "{\"b\": 1.0, \"a\": \"x\"}"}}]}])";
  const char* as_object = R"([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"type":
      "function", "function": {"name": "f", "arguments": {"b": 1.0, "a": "x"}}}]}])";
  auto a = encode_chat(ordered_json::parse(as_string), mode(ThinkingMode::kChat));
  auto b = encode_chat(ordered_json::parse(as_object), mode(ThinkingMode::kChat));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a.value(), b.value());
  EXPECT_NE(a->find("<｜DSML｜parameter name=\"b\" string=\"false\">1.0</｜DSML｜parameter>\n"
                    "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>"),
            std::string::npos);
}

TEST(ChatEncodingRules, ToolContentPartsAreFlattened) {
  auto prompt = encode_chat(ordered_json::parse(R"([{"role": "user", "content": "q"},
      {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "one"}, {"type": "image"},
       {"type": "text", "text": "two"}]}])"),
                            mode(ThinkingMode::kChat));
  ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
  EXPECT_EQ(prompt.value(),
            kBos + "<｜User｜>q\n\n<tool_result>one\n\n[Unsupported image]\n\ntwo</tool_result><｜Assistant｜></think>");
}

// Python's json.dumps(..., ensure_ascii=False), checked against CPython 3 output.
TEST(ChatEncodingRules, JsonDumpMatchesPython) {
  ordered_json floats = ordered_json::array();
  for (double d : {1e16, 1e15, 0.0001, 1e-05, 1.5, -0.0, 123456789012345678.0, 5e-324, 1e22, 0.1, 1.0 / 3, 2.5e-7,
                   100.0}) {
    floats.push_back(d);
  }
  floats.push_back(-7);
  floats.push_back(18446744073709551615ull);
  EXPECT_EQ(dump_json_like_python(floats),
            "[1e+16, 1000000000000000.0, 0.0001, 1e-05, 1.5, -0.0, 1.2345678901234568e+17, 5e-324, 1e+22, 0.1, "
            "0.3333333333333333, 2.5e-07, 100.0, -7, 18446744073709551615]");
  const ordered_json obj =
      ordered_json::parse("{\"z\": 1, \"a\": [true, null, {}], \"k\": \"\\\"\\\\\\n\\t\\u0001\\u007f中/\"}");
  EXPECT_EQ(dump_json_like_python(obj), "{\"z\": 1, \"a\": [true, null, {}], \"k\": \"\\\"\\\\\\n\\t\\u0001\x7f中/\"}");
}

// --- errors ----------------------------------------------------------------------------------

TEST(ChatEncodingErrors, BadMessagesNameTheField) {
  expect_error(messages_from_json(ordered_json::parse(
                   R"([{"role": "user", "content": "a"}, {"role": "assistant"}, {"role": "robot"}])")),
               "messages[2].role: unknown role 'robot'");
  expect_error(messages_from_json(ordered_json::parse(R"([{"content": "a"}])")), "messages[0].role");
  expect_error(messages_from_json(ordered_json::parse(
                   R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])")),
               "messages[0].tool_calls[0].function.name");
  expect_error(messages_from_json(ordered_json::parse(
                   R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}])")),
               "messages[0].tool_calls[0].function.arguments");
  expect_error(messages_from_json(ordered_json::parse(R"([{"role": "user", "content": "q", "task": "dance"}])")),
               "messages[0].task: unknown task 'dance'");
  expect_error(messages_from_json(ordered_json::parse(R"([{"role": "user", "content": null}])")),
               "messages[0].content");
  expect_error(messages_from_json(ordered_json::parse(R"([{"role": "system", "content": [1]}])")),
               "messages[0].content");
  expect_error(messages_from_json(ordered_json::parse(R"([{"role": "system", "tools": [{"type": "function"}]}])")),
               "messages[0].tools[0].function");
  expect_error(messages_from_json(ordered_json::parse(R"({"tools": [], "messages": []})")), "request.tools");
  expect_error(messages_from_json(ordered_json::parse(R"({"model": "x"})")), "request.messages");
  expect_error(messages_from_json(ordered_json::parse("42")), "list of messages");
  expect_error(messages_from_json_text("[{\"role\": "), "not valid JSON");
  expect_error(role_from_name("function"), "unknown role 'function'");
  expect_error(reasoning_effort_from_name("low"), "unknown reasoning effort 'low'");
}

TEST(ChatEncodingErrors, BadConversationsNameTheMessage) {
  Message developer;
  developer.role = Role::kDeveloper;
  expect_error(encode_messages(std::vector<Message>{user("q"), developer}, mode(ThinkingMode::kChat)),
               "messages[1].content");
  expect_error(encode_messages(std::vector<Message>{user("q"), assistant("", "", {{"", "f", "{}"}, {"", "g", "[1]"}})},
                               mode(ThinkingMode::kChat)),
               "messages[1].tool_calls[1].arguments: expected a JSON object");
}

TEST(ChatEncodingErrors, MalformedCompletions) {
  const std::string block = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  const std::string close = "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos;
  const auto param = [](const std::string& name, const std::string& flag, const std::string& value) {
    return "<｜DSML｜parameter name=\"" + name + "\" string=\"" + flag + "\">" + value + "</｜DSML｜parameter>\n";
  };
  expect_error(parse_assistant("no end of reasoning" + kEos, ThinkingMode::kThinking), "missing </think>");
  expect_error(parse_assistant("r" + block + param("a", "true", "x") + close, ThinkingMode::kThinking),
               "missing </think>");
  expect_error(parse_assistant("no eos", ThinkingMode::kChat), "missing end-of-sentence");
  expect_error(parse_assistant("done" + kEos + "more", ThinkingMode::kChat), "unexpected text after the end");
  expect_error(parse_assistant("a <think> b" + kEos, ThinkingMode::kChat), "special token '<think>'");
  expect_error(parse_assistant(block + param("a", "true", "1") + param("a", "true", "2") + close, ThinkingMode::kChat),
               "duplicate parameter 'a'");
  expect_error(parse_assistant(block + param("a", "maybe", "1") + close, ThinkingMode::kChat),
               "tool call 0 (f): malformed parameter");
  expect_error(parse_assistant("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"f\">\n" + close, ThinkingMode::kChat),
               "tool call 0: malformed invoke tag");
  expect_error(parse_assistant(block + close + "tail", ThinkingMode::kChat), "unexpected text after the end");
  expect_error(parse_assistant(block + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>junk" + kEos, ThinkingMode::kChat),
               "unexpected text after the tool calls");

  // string="false" values that are not JSON: the reference passes them through; we reject them unless asked not to.
  const std::string bad_value = block + param("n", "false", "not-json") + close;
  expect_error(parse_assistant(bad_value, ThinkingMode::kChat), "parameter 'n' has string=\"false\"");
  ParseOptions lenient;
  lenient.validate_arguments = false;
  const ParsedAssistant p = parse_ok(bad_value, ThinkingMode::kChat, lenient);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"n\": not-json}");
}

}  // namespace
}  // namespace deepinfer::tokenizer
