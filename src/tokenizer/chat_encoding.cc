#include "tokenizer/chat_encoding.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <unordered_map>
#include <utility>

namespace deepinfer::tokenizer {
namespace {

using nlohmann::ordered_json;
namespace tok = chat_tokens;

// DSML tags. The reference spells them "<" + "｜DSML｜" + tag; the constants below are the results.
constexpr std::string_view kToolCallsOpen = "<｜DSML｜tool_calls>";
constexpr std::string_view kToolCallsClose = "</｜DSML｜tool_calls>";
constexpr std::string_view kToolCallsStart = "\n\n<｜DSML｜tool_calls";  // how a completion enters a call block
constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
constexpr std::string_view kInvokeClose = "</｜DSML｜invoke";
constexpr std::string_view kParamOpen = "<｜DSML｜parameter";
constexpr std::string_view kParamClose = "/｜DSML｜parameter";  // without "<": the value's regex eats it

constexpr std::string_view kTaskTokens[] = {"",           "<｜action｜>", "<｜query｜>",    "<｜authority｜>",
                                            "<｜domain｜>", "<｜title｜>",  "<｜read_url｜>"};
constexpr std::string_view kTaskNames[] = {"", "action", "query", "authority", "domain", "title", "read_url"};

// The V4 release's "max" effort paragraph (later releases changed the wording; this is the one the
// V4 weights were trained with).
constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// The tools section as the model saw it in training, with the DSML tokens already in place; the tool
// schemas (one JSON line each) go between the two halves.
constexpr std::string_view kToolsHead =
    R"(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// ---------------------------------------------------------------------------------------------
// Python-compatible JSON output. The prompt embeds json.dumps(..., ensure_ascii=False) text, so key
// order, separators, escapes and float spelling all have to match Python's.

void append_py_string(std::string_view s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;  // non-ASCII bytes pass through (ensure_ascii=False)
        }
    }
  }
  out += '"';
}

// repr(float): shortest round-trip digits, positional notation when the decimal exponent is in
// [-4, 16), scientific ("1e+16", "1.5e-07") otherwise, and always a ".0" on integral positional values.
void append_py_float(double d, std::string& out) {
  if (std::isnan(d)) {
    out += "NaN";
    return;
  }
  if (std::isinf(d)) {
    out += d < 0 ? "-Infinity" : "Infinity";
    return;
  }
  if (d == 0) {
    out += std::signbit(d) ? "-0.0" : "0.0";
    return;
  }
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // e.g. "-1.2345e+16"
  const bool negative = sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exp10 = 0;
  std::string_view exp_text = sci.substr(e_pos + 1);
  if (!exp_text.empty() && exp_text.front() == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exp10);
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int ndigits = static_cast<int>(digits.size());
  if (negative) out += '-';
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= ndigits) {
      out += digits;
      out.append(static_cast<size_t>(decpt - ndigits), '0');
      out += ".0";
    } else {
      out += std::string_view(digits).substr(0, static_cast<size_t>(decpt));
      out += '.';
      out += std::string_view(digits).substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits[0];
    if (ndigits > 1) {
      out += '.';
      out += std::string_view(digits).substr(1);
    }
    out += exp10 < 0 ? "e-" : "e+";
    const int mag = exp10 < 0 ? -exp10 : exp10;
    if (mag < 10) out += '0';
    out += std::to_string(mag);
  }
}

void append_py_json(const ordered_json& v, std::string& out) {
  switch (v.type()) {
    case ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case ordered_json::value_t::number_integer: out += std::to_string(v.get<std::int64_t>()); break;
    case ordered_json::value_t::number_unsigned: out += std::to_string(v.get<std::uint64_t>()); break;
    case ordered_json::value_t::number_float: append_py_float(v.get<double>(), out); break;
    case ordered_json::value_t::string: append_py_string(v.get_ref<const std::string&>(), out); break;
    case ordered_json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        append_py_json(e, out);
      }
      out += ']';
      break;
    }
    case ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_py_string(key, out);
        out += ": ";
        append_py_json(value, out);
      }
      out += '}';
      break;
    }
    case ordered_json::value_t::binary: {  // never produced by parsing text; shown as a byte list
      out += '[';
      bool first = true;
      for (std::uint8_t b : v.get_binary()) {
        if (!first) out += ", ";
        first = false;
        out += std::to_string(b);
      }
      out += ']';
      break;
    }
    case ordered_json::value_t::null:
    case ordered_json::value_t::discarded: out += "null"; break;
  }
}

// Python truthiness, which decides whether the reference renders an optional field.
bool py_truthy(const ordered_json& v) {
  switch (v.type()) {
    case ordered_json::value_t::boolean: return v.get<bool>();
    case ordered_json::value_t::number_integer: return v.get<std::int64_t>() != 0;
    case ordered_json::value_t::number_unsigned: return v.get<std::uint64_t>() != 0;
    case ordered_json::value_t::number_float: return v.get<double>() != 0.0;  // NaN is truthy, as in Python
    case ordered_json::value_t::string:
    case ordered_json::value_t::array:
    case ordered_json::value_t::object:
    case ordered_json::value_t::binary: return !v.empty();
    case ordered_json::value_t::null:
    case ordered_json::value_t::discarded: return false;
  }
  return false;
}

std::string index_label(std::string_view list, size_t i) { return std::string(list) + "[" + std::to_string(i) + "]"; }

// Short, single-line excerpt of model output for error messages.
std::string excerpt(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out;
  for (char c : s.substr(0, kMax)) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  if (s.size() > kMax) out += "...";
  return "'" + out + "'";
}

// ---------------------------------------------------------------------------------------------
// Rendering.

// One prompt turn after preprocessing. The reference has no tool role in the prompt: tool results
// become <tool_result> blocks of a user turn, and consecutive user messages share one turn.
struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_use_id;
};

struct Turn {
  Role role = Role::kUser;
  const Message* msg = nullptr;  // non-user turns: the message as given
  std::vector<Block> blocks;     // user turns
  ChatTask task = ChatTask::kNone;
  bool wo_eos = false;
  bool reasoning_dropped = false;
  std::string where;  // "messages[3]", for errors
};

std::vector<Turn> merge_tool_results(std::span<const Message> msgs, std::string_view list_name) {
  std::vector<Turn> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Message& m = msgs[i];
    if (m.role == Role::kTool || m.role == Role::kUser) {
      Block block{m.role == Role::kTool, m.content, m.role == Role::kTool ? m.tool_call_id : std::string()};
      // A tool result joins any preceding user turn; a user message joins one only if that turn
      // carries no task (the task token must stay right after its own message).
      const bool join = !out.empty() && out.back().role == Role::kUser &&
                        (m.role == Role::kTool || out.back().task == ChatTask::kNone);
      if (join) {
        out.back().blocks.push_back(std::move(block));
        continue;
      }
      Turn t;
      t.role = Role::kUser;
      t.blocks.push_back(std::move(block));
      // A turn opened by a tool result carries none of the tool message's other fields.
      if (m.role == Role::kUser) {
        t.task = m.task;
        t.wo_eos = m.wo_eos;
      }
      t.where = index_label(list_name, i);
      out.push_back(std::move(t));
    } else {
      Turn t;
      t.role = m.role;
      t.msg = &m;
      t.task = m.task;
      t.wo_eos = m.wo_eos;
      t.where = index_label(list_name, i);
      out.push_back(std::move(t));
    }
  }
  return out;
}

// Tool results within a user turn follow the order of the calls in the latest assistant turn that
// made calls; results whose id is unknown sort as if they answered the first call (stable).
void order_tool_results(std::vector<Turn>& turns) {
  std::unordered_map<std::string, size_t> call_order;
  for (Turn& t : turns) {
    if (t.role == Role::kAssistant && !t.msg->tool_calls.empty()) {
      call_order.clear();
      for (size_t k = 0; k < t.msg->tool_calls.size(); ++k) {
        const std::string& id = t.msg->tool_calls[k].id;
        if (!id.empty()) call_order[id] = k;
      }
    } else if (t.role == Role::kUser) {
      std::vector<Block*> results;
      for (Block& b : t.blocks) {
        if (b.tool_result) results.push_back(&b);
      }
      if (results.size() < 2 || call_order.empty()) continue;
      const auto rank = [&](const Block& b) {
        const auto it = call_order.find(b.tool_use_id);
        return it == call_order.end() ? size_t{0} : it->second;
      };
      std::vector<Block> sorted;
      for (Block* b : results) sorted.push_back(*b);
      std::stable_sort(sorted.begin(), sorted.end(), [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
      for (size_t k = 0; k < results.size(); ++k) *results[k] = std::move(sorted[k]);
    }
  }
}

// Index of the last user or developer turn (tool results count: they are user turns), or -1.
std::ptrdiff_t last_user_index(const std::vector<Turn>& turns) {
  for (std::ptrdiff_t i = static_cast<std::ptrdiff_t>(turns.size()) - 1; i >= 0; --i) {
    const Role r = turns[static_cast<size_t>(i)].role;
    if (r == Role::kUser || r == Role::kDeveloper) return i;
  }
  return -1;
}

// Before the last user turn: assistant turns lose their reasoning and developer turns disappear.
std::vector<Turn> drop_old_reasoning(const std::vector<Turn>& turns) {
  const std::ptrdiff_t last_user = last_user_index(turns);
  std::vector<Turn> out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const Role r = turns[i].role;
    if (r == Role::kUser || r == Role::kSystem || r == Role::kLatestReminder ||
        static_cast<std::ptrdiff_t>(i) >= last_user) {
      out.push_back(turns[i]);
    } else if (r == Role::kAssistant) {
      out.push_back(turns[i]);
      out.back().reasoning_dropped = true;
    }
  }
  return out;
}

std::string render_tools(const std::vector<ordered_json>& tools) {
  std::string out(kToolsHead);
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i) out += '\n';
    append_py_json(tools[i], out);
  }
  out += kToolsTail;
  return out;
}

void append_tools_and_format(const Message& m, std::string& out) {
  if (!m.tools.empty()) {
    out += "\n\n";
    out += render_tools(m.tools);
  }
  if (py_truthy(m.response_format)) {
    out += "\n\n";
    out += kResponseFormatHead;
    append_py_json(m.response_format, out);
  }
}

void append_parameter(std::string_view name, bool is_string, std::string_view value, std::string& out) {
  out += kParamOpen;
  out += " name=\"";
  out += name;
  out += is_string ? "\" string=\"true\">" : "\" string=\"false\">";
  out += value;
  out += '<';
  out += kParamClose;
  out += '>';
}

Status append_invoke(const ToolCall& call, const ChatOptions& options, const std::string& where, std::string& out) {
  out += kInvokeOpen;
  out += " name=\"";
  out += call.name;
  out += "\">\n";
  const ordered_json args = ordered_json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded()) {
    // The reference keeps unparsable arguments visible to the model as one string parameter.
    if (options.strict_tool_arguments) return Status::invalid_argument(where + ".arguments: not valid JSON");
    append_parameter("arguments", true, call.arguments, out);
  } else if (!args.is_object()) {
    return Status::invalid_argument(where + ".arguments: expected a JSON object, got " + std::string(args.type_name()));
  } else {
    bool first = true;
    for (const auto& [key, value] : args.items()) {
      if (!first) out += '\n';
      first = false;
      if (value.is_string()) {
        append_parameter(key, true, value.get_ref<const std::string&>(), out);
      } else {
        std::string text;
        append_py_json(value, text);
        append_parameter(key, false, text, out);
      }
    }
  }
  out += '\n';
  out += kInvokeClose;
  out += '>';
  return Status::ok();
}

Status render_turn(const std::vector<Turn>& turns, size_t index, std::ptrdiff_t last_user, bool drop_thinking,
                   const ChatOptions& options, std::string& out) {
  const Turn& t = turns[index];
  const bool thinking = options.thinking_mode == ThinkingMode::kThinking;
  const auto idx = static_cast<std::ptrdiff_t>(index);

  if (index == 0 && thinking && options.reasoning_effort == ReasoningEffort::kMax) out += kReasoningEffortMax;

  switch (t.role) {
    case Role::kSystem:
      out += t.msg->content;
      append_tools_and_format(*t.msg, out);
      break;
    case Role::kDeveloper:
      if (t.msg->content.empty()) {
        return Status::invalid_argument(t.where + ".content: a developer message needs content");
      }
      out += tok::kUser;
      out += t.msg->content;
      append_tools_and_format(*t.msg, out);
      break;
    case Role::kUser:
      out += tok::kUser;
      for (size_t k = 0; k < t.blocks.size(); ++k) {
        if (k) out += "\n\n";
        const Block& b = t.blocks[k];
        if (b.tool_result) out += "<tool_result>";
        out += b.text;
        if (b.tool_result) out += "</tool_result>";
      }
      break;
    case Role::kLatestReminder:
      out += tok::kLatestReminder;
      out += t.msg->content;
      break;
    case Role::kAssistant: {
      // Reasoning is shown for turns after the last user turn, or for all turns when nothing is
      // dropped; never for the answer to a task (those turns are plain outputs). The opening <think>
      // belongs to the previous turn's transition, so only the closing tag is written here.
      const bool answers_task = index > 0 && turns[index - 1].task != ChatTask::kNone;
      if (thinking && !answers_task && (!drop_thinking || idx > last_user)) {
        if (!t.reasoning_dropped) out += t.msg->reasoning_content;
        out += tok::kThinkEnd;
      }
      out += t.msg->content;
      if (!t.msg->tool_calls.empty()) {
        out += "\n\n";
        out += kToolCallsOpen;
        out += '\n';
        for (size_t k = 0; k < t.msg->tool_calls.size(); ++k) {
          if (k) out += '\n';
          DI_RETURN_IF_ERROR(append_invoke(t.msg->tool_calls[k], options,
                                           t.where + ".tool_calls[" + std::to_string(k) + "]", out));
        }
        out += '\n';
        out += kToolCallsClose;
      }
      if (!t.wo_eos) out += tok::kEos;
      break;
    }
    case Role::kTool:  // merged into user turns before rendering
      return Status::internal(t.where + ": tool message reached rendering unmerged");
  }

  // What follows the turn: nothing if another non-assistant turn comes next; otherwise the task
  // token, or the assistant prefix after a user/developer turn.
  if (index + 1 < turns.size()) {
    const Role next = turns[index + 1].role;
    if (next != Role::kAssistant && next != Role::kLatestReminder) return Status::ok();
  }
  if (t.task != ChatTask::kNone) {
    const std::string_view task_token = kTaskTokens[static_cast<size_t>(t.task)];
    if (t.task == ChatTask::kAction) {
      out += tok::kAssistant;
      out += thinking ? tok::kThinkStart : tok::kThinkEnd;
    }
    out += task_token;
  } else if (t.role == Role::kUser || t.role == Role::kDeveloper) {
    out += tok::kAssistant;
    out += thinking && (!drop_thinking || idx >= last_user) ? tok::kThinkStart : tok::kThinkEnd;
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// JSON adapter.

Result<std::string> optional_string(const ordered_json& m, const char* key, const std::string& where) {
  const auto it = m.find(key);
  if (it == m.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Status::invalid_argument(where + "." + key + ": expected a string");
  return it->get<std::string>();
}

// The "type" of a content part as Python's f"{b.get('type')}" would print it.
Result<std::string> part_type(const ordered_json& part, const std::string& where) {
  const auto it = part.find("type");
  if (it == part.end() || it->is_null()) return std::string("None");
  if (!it->is_string()) return Status::invalid_argument(where + ".type: expected a string");
  return it->get<std::string>();
}

Result<std::string> content_from_json(const ordered_json& m, Role role, const std::string& where) {
  const std::string field = where + ".content";
  const auto it = m.find("content");
  if (it == m.end()) {
    if (role == Role::kLatestReminder) return Status::invalid_argument(field + ": missing");
    return std::string();
  }
  const ordered_json& c = *it;
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) {
    // The reference fails on these (or prints "None" into the prompt); treat them as bad input.
    if (role == Role::kUser || role == Role::kTool || role == Role::kLatestReminder)
      return Status::invalid_argument(field + ": null");
    return std::string();
  }
  if (c.is_array() && (role == Role::kUser || role == Role::kTool)) {
    std::string out;
    for (size_t k = 0; k < c.size(); ++k) {
      const std::string part_where = field + "[" + std::to_string(k) + "]";
      const ordered_json& part = c[k];
      if (!part.is_object()) return Status::invalid_argument(part_where + ": expected an object");
      DI_ASSIGN_OR_RETURN(const std::string type, part_type(part, part_where));
      if (k) out += "\n\n";  // parts are separate blocks, and blocks are joined by a blank line
      if (type == "text") {
        const auto text = part.find("text");
        if (text != part.end()) {
          if (!text->is_string()) return Status::invalid_argument(part_where + ".text: expected a string");
          out += text->get_ref<const std::string&>();
        }
      } else if (role == Role::kTool) {
        out += "[Unsupported " + type + "]";  // the reference's placeholder for non-text tool output
      } else {
        return Status::unsupported(part_where + ": content part type '" + type + "' is not supported");
      }
    }
    return out;
  }
  return Status::invalid_argument(field + ": expected a string");
}

Result<std::vector<ordered_json>> tools_from_json(const ordered_json& tools, const std::string& where) {
  std::vector<ordered_json> out;
  if (tools.is_null()) return out;
  if (!tools.is_array()) return Status::invalid_argument(where + ": expected a list");
  for (size_t k = 0; k < tools.size(); ++k) {
    const std::string tool_where = where + "[" + std::to_string(k) + "]";
    const ordered_json& tool = tools[k];
    if (!tool.is_object()) return Status::invalid_argument(tool_where + ": expected an object");
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object())
      return Status::invalid_argument(tool_where + ".function: missing or not an object");
    out.push_back(*fn);
  }
  return out;
}

Result<std::vector<ToolCall>> tool_calls_from_json(const ordered_json& calls, const std::string& where) {
  std::vector<ToolCall> out;
  if (calls.is_null()) return out;
  if (!calls.is_array()) return Status::invalid_argument(where + ": expected a list");
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string call_where = where + "[" + std::to_string(k) + "]";
    const ordered_json& call = calls[k];
    if (!call.is_object()) return Status::invalid_argument(call_where + ": expected an object");
    const auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object())
      return Status::invalid_argument(call_where + ".function: missing or not an object");
    const std::string fn_where = call_where + ".function";
    ToolCall tc;
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) return Status::invalid_argument(fn_where + ".name: expected a string");
    tc.name = name->get<std::string>();
    const auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) return Status::invalid_argument(fn_where + ".arguments: missing");
    if (args->is_string()) {
      tc.arguments = args->get<std::string>();
    } else if (args->is_object()) {
      tc.arguments = dump_json_like_python(*args);  // already parsed: render its members as they are
    } else {
      return Status::invalid_argument(fn_where + ".arguments: expected a JSON string or an object");
    }
    // The id sits on the call (OpenAI) or, in some clients, on the function.
    DI_ASSIGN_OR_RETURN(tc.id, optional_string(call, "id", call_where));
    if (tc.id.empty()) {
      DI_ASSIGN_OR_RETURN(tc.id, optional_string(*fn, "id", fn_where));
    }
    out.push_back(std::move(tc));
  }
  return out;
}

Result<Message> message_from_json(const ordered_json& m, const std::string& where) {
  if (!m.is_object()) return Status::invalid_argument(where + ": expected an object");
  Message msg;
  const auto role = m.find("role");
  if (role == m.end() || !role->is_string()) return Status::invalid_argument(where + ".role: expected a string");
  auto parsed_role = role_from_name(role->get_ref<const std::string&>());
  if (!parsed_role.is_ok()) return parsed_role.status().with_context(where + ".role");
  msg.role = parsed_role.value();
  DI_ASSIGN_OR_RETURN(msg.content, content_from_json(m, msg.role, where));
  DI_ASSIGN_OR_RETURN(msg.reasoning_content, optional_string(m, "reasoning_content", where));
  DI_ASSIGN_OR_RETURN(msg.tool_call_id, optional_string(m, "tool_call_id", where));
  if (const auto it = m.find("tool_calls"); it != m.end()) {
    DI_ASSIGN_OR_RETURN(msg.tool_calls, tool_calls_from_json(*it, where + ".tool_calls"));
  }
  if (const auto it = m.find("tools"); it != m.end()) {
    DI_ASSIGN_OR_RETURN(msg.tools, tools_from_json(*it, where + ".tools"));
  }
  if (const auto it = m.find("response_format"); it != m.end()) msg.response_format = *it;
  if (const auto it = m.find("task"); it != m.end() && !it->is_null()) {
    if (!it->is_string()) return Status::invalid_argument(where + ".task: expected a string");
    auto task = task_from_name(it->get_ref<const std::string&>());
    if (!task.is_ok()) return task.status().with_context(where + ".task");
    msg.task = task.value();
  }
  if (const auto it = m.find("wo_eos"); it != m.end() && !it->is_null()) {
    if (!it->is_boolean()) return Status::invalid_argument(where + ".wo_eos: expected a boolean");
    msg.wo_eos = it->get<bool>();
  }
  return msg;
}

// ---------------------------------------------------------------------------------------------
// Completion parsing: the reference's scanner, which reads up to the earliest of a set of stop
// strings, and its regexes, re-expressed as string tests.

struct Scan {
  size_t next;              // position after the stop string (or the end)
  std::string_view before;  // text up to the stop string
  int stop;                 // index of the stop string found, -1 if none
};

Scan read_until(std::string_view text, size_t from, std::initializer_list<std::string_view> stops) {
  size_t best = text.size();
  int which = -1;
  int k = 0;
  for (std::string_view s : stops) {
    const size_t pos = text.find(s, from);
    if (pos != std::string_view::npos && pos < best) {
      best = pos;
      which = k;
    }
    ++k;
  }
  if (which < 0) return {text.size(), text.substr(std::min(from, text.size())), -1};
  return {best + std::data(stops)[which].size(), text.substr(from, best - from), which};
}

// Byte length of the Python (Unicode) whitespace character at s[i], 0 if there is none.
size_t py_space_len(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const auto b = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c0 = b(i);
  if ((c0 >= 0x09 && c0 <= 0x0d) || (c0 >= 0x1c && c0 <= 0x20)) return 1;
  if (c0 == 0xc2 && (b(i + 1) == 0x85 || b(i + 1) == 0xa0)) return 2;  // U+0085, U+00A0
  if (c0 == 0xe1 && b(i + 1) == 0x9a && b(i + 2) == 0x80) return 3;    // U+1680
  if (c0 == 0xe2 && b(i + 1) == 0x80) {
    const unsigned c2 = b(i + 2);
    if ((c2 >= 0x80 && c2 <= 0x8a) || c2 == 0xa8 || c2 == 0xa9 || c2 == 0xaf) return 3;  // U+2000-200A, 2028/9, 202F
  }
  if (c0 == 0xe2 && b(i + 1) == 0x81 && b(i + 2) == 0x9f) return 3;  // U+205F
  if (c0 == 0xe3 && b(i + 1) == 0x80 && b(i + 2) == 0x80) return 3;  // U+3000
  return 0;
}

// The text between "<｜DSML｜invoke" and the first parameter or the invoke's end must be
// `\s*name="NAME">\n` (Python's `$` also lets one more trailing newline through, which is what an
// argument-less call looks like).
std::optional<std::string_view> match_invoke_name(std::string_view s) {
  size_t i = 0;
  while (const size_t n = py_space_len(s, i)) i += n;
  constexpr std::string_view kPrefix = "name=\"";
  if (!s.substr(i).starts_with(kPrefix)) return std::nullopt;
  const std::string_view rest = s.substr(i + kPrefix.size());
  if (rest.ends_with("\">\n")) return rest.substr(0, rest.size() - 3);
  if (rest.ends_with("\">\n\n")) return rest.substr(0, rest.size() - 4);
  return std::nullopt;
}

struct ParamMatch {
  std::string_view name;
  std::string_view value;
  bool is_string = false;
};

// The text between "<｜DSML｜parameter" and the next "/｜DSML｜parameter" must be
// ` name="NAME" string="true|false">VALUE<`. The name ends at the first `" string="` that is followed
// by a valid flag; the value runs to the final "<".
std::optional<ParamMatch> match_parameter(std::string_view s) {
  constexpr std::string_view kPrefix = " name=\"";
  constexpr std::string_view kFlag = "\" string=\"";
  if (!s.starts_with(kPrefix)) return std::nullopt;
  size_t value_end;
  if (s.ends_with("<")) {
    value_end = s.size() - 1;
  } else if (s.ends_with("<\n")) {
    value_end = s.size() - 2;
  } else {
    return std::nullopt;
  }
  for (size_t p = s.find(kFlag, kPrefix.size()); p != std::string_view::npos; p = s.find(kFlag, p + 1)) {
    const std::string_view after = s.substr(p + kFlag.size());
    ParamMatch m;
    size_t value_begin;
    if (after.starts_with("true\">")) {
      m.is_string = true;
      value_begin = p + kFlag.size() + 6;
    } else if (after.starts_with("false\">")) {
      value_begin = p + kFlag.size() + 7;
    } else {
      continue;
    }
    if (value_begin > value_end) return std::nullopt;
    m.name = s.substr(kPrefix.size(), p - kPrefix.size());
    m.value = s.substr(value_begin, value_end - value_begin);
    return m;
  }
  return std::nullopt;
}

Status parse_error(const std::string& what) { return Status::invalid_argument("assistant output: " + what); }

// Parses the tool-call block starting after "\n\n<｜DSML｜tool_calls"; *pos ends after the block.
Status parse_tool_calls(std::string_view text, size_t* pos, const ParseOptions& options, std::vector<ToolCall>* calls) {
  size_t i = *pos;
  while (i < text.size()) {
    const std::string label = "tool call " + std::to_string(calls->size());
    Scan s = read_until(text, i, {kInvokeOpen, kToolCallsClose});
    i = s.next;
    if (s.before != ">\n") {
      return parse_error(label + ": expected '>\\n' before the next tag, got " + excerpt(s.before));
    }
    if (s.stop == 1) break;
    if (s.stop < 0) return parse_error(label + ": missing </｜DSML｜tool_calls>");

    s = read_until(text, i, {kParamOpen, kInvokeClose});
    i = s.next;
    const std::optional<std::string_view> name = match_invoke_name(s.before);
    if (!name) return parse_error(label + ": malformed invoke tag " + excerpt(s.before));
    ToolCall call;
    call.name = std::string(*name);
    const std::string named = label + " (" + call.name + ")";

    std::vector<ParamMatch> params;
    int stop = s.stop;
    while (stop == 0) {
      s = read_until(text, i, {kParamClose});
      i = s.next;
      const std::optional<ParamMatch> p = match_parameter(s.before);
      if (!p) return parse_error(named + ": malformed parameter " + excerpt(s.before));
      for (const ParamMatch& q : params) {
        if (q.name == p->name) return parse_error(named + ": duplicate parameter '" + std::string(p->name) + "'");
      }
      if (!p->is_string && options.validate_arguments && !ordered_json::accept(p->value)) {
        return parse_error(named + ": parameter '" + std::string(p->name) +
                           "' has string=\"false\" but its value is not JSON: " + excerpt(p->value));
      }
      params.push_back(*p);
      s = read_until(text, i, {kParamOpen, kInvokeClose});
      i = s.next;
      stop = s.stop;
      if (s.before != ">\n")
        return parse_error(named + ": expected '>\\n' after parameter '" + std::string(p->name) + "', got " +
                           excerpt(s.before));
    }

    call.arguments = "{";
    for (size_t k = 0; k < params.size(); ++k) {
      if (k) call.arguments += ", ";
      append_py_string(params[k].name, call.arguments);
      call.arguments += ": ";
      if (params[k].is_string) {
        append_py_string(params[k].value, call.arguments);
      } else {
        call.arguments += params[k].value;
      }
    }
    call.arguments += "}";
    calls->push_back(std::move(call));
  }
  *pos = i;
  return Status::ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string dump_json_like_python(const nlohmann::ordered_json& value) {
  std::string out;
  append_py_json(value, out);
  return out;
}

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
    case Role::kDeveloper: return "developer";
    case Role::kLatestReminder: return "latest_reminder";
  }
  return "?";
}

Result<Role> role_from_name(std::string_view name) {
  for (Role r : {Role::kSystem, Role::kUser, Role::kAssistant, Role::kTool, Role::kDeveloper, Role::kLatestReminder}) {
    if (role_name(r) == name) return r;
  }
  return Status::invalid_argument("unknown role '" + std::string(name) +
                                  "' (expected system, user, assistant, tool, developer or latest_reminder)");
}

Result<ReasoningEffort> reasoning_effort_from_name(std::string_view name) {
  if (name.empty()) return ReasoningEffort::kUnset;
  if (name == "high") return ReasoningEffort::kHigh;
  if (name == "max") return ReasoningEffort::kMax;
  return Status::invalid_argument("unknown reasoning effort '" + std::string(name) + "' (expected high or max)");
}

Result<ChatTask> task_from_name(std::string_view name) {
  for (size_t k = 1; k < std::size(kTaskNames); ++k) {
    if (kTaskNames[k] == name) return static_cast<ChatTask>(k);
  }
  return Status::invalid_argument("unknown task '" + std::string(name) +
                                  "' (expected action, query, authority, domain, title or read_url)");
}

Result<std::string> encode_messages(std::span<const Message> messages, const ChatOptions& options,
                                    std::span<const Message> context) {
  // Context and messages are merged separately (a tool result never joins a context turn) but
  // ordered together (the calls it answers may be in the context).
  std::vector<Turn> full = merge_tool_results(context, "context");
  const size_t context_size = full.size();
  for (Turn& t : merge_tool_results(messages, "messages")) full.push_back(std::move(t));
  order_tool_results(full);

  std::string prompt;
  if (options.add_bos && context.empty()) prompt += tok::kBos;

  // Tool-using conversations keep every turn's reasoning: the model needs it to follow multi-step calls.
  bool drop_thinking = options.drop_thinking;
  for (const Turn& t : full) {
    if (t.msg != nullptr && !t.msg->tools.empty()) drop_thinking = false;
  }

  // Which turns are new. After dropping, the count is taken the way the reference takes it: the
  // context is pruned on its own, so its length can differ from its share of the pruned whole.
  size_t first_to_render = context_size;
  if (options.thinking_mode == ThinkingMode::kThinking && drop_thinking) {
    const std::vector<Turn> context_turns(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(context_size));
    full = drop_old_reasoning(full);
    first_to_render = std::min(drop_old_reasoning(context_turns).size(), full.size());
  }

  const std::ptrdiff_t last_user = last_user_index(full);
  for (size_t i = first_to_render; i < full.size(); ++i) {
    DI_RETURN_IF_ERROR(render_turn(full, i, last_user, drop_thinking, options, prompt));
  }
  return prompt;
}

Result<std::vector<Message>> messages_from_json(const nlohmann::ordered_json& messages_or_request) {
  const ordered_json* list = &messages_or_request;
  const ordered_json* tools = nullptr;
  if (messages_or_request.is_object()) {
    const auto it = messages_or_request.find("messages");
    if (it == messages_or_request.end() || !it->is_array())
      return Status::invalid_argument("request.messages: missing or not a list");
    list = &*it;
    const auto t = messages_or_request.find("tools");
    if (t != messages_or_request.end() && !t->is_null()) tools = &*t;
  } else if (!messages_or_request.is_array()) {
    return Status::invalid_argument("expected a list of messages or an object with \"messages\"");
  }
  std::vector<Message> out;
  for (size_t i = 0; i < list->size(); ++i) {
    DI_ASSIGN_OR_RETURN(Message m, message_from_json((*list)[i], index_label("messages", i)));
    out.push_back(std::move(m));
  }
  if (tools != nullptr) {
    // Request-level tools belong to the first message (normally the system prompt).
    if (out.empty()) return Status::invalid_argument("request.tools: given, but there are no messages");
    DI_ASSIGN_OR_RETURN(out[0].tools, tools_from_json(*tools, "request.tools"));
  }
  return out;
}

Result<std::vector<Message>> messages_from_json_text(std::string_view json_text) {
  const ordered_json j = ordered_json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::invalid_argument("chat messages: not valid JSON");
  return messages_from_json(j);
}

Result<std::string> encode_chat(const nlohmann::ordered_json& messages_or_request, const ChatOptions& options) {
  DI_ASSIGN_OR_RETURN(const std::vector<Message> messages, messages_from_json(messages_or_request));
  return encode_messages(messages, options);
}

Result<ParsedAssistant> parse_assistant(std::string_view text, ThinkingMode mode, const ParseOptions& options) {
  ParsedAssistant out;
  size_t i = 0;
  if (mode == ThinkingMode::kThinking) {
    const Scan s = read_until(text, 0, {tok::kThinkEnd, kToolCallsStart});
    if (s.stop != 0) return parse_error("missing </think> before the answer");
    out.reasoning_content = std::string(s.before);
    i = s.next;
  }
  const Scan s = read_until(text, i, {tok::kEos, kToolCallsStart});
  out.content = std::string(s.before);
  i = s.next;
  if (s.stop == 1) {
    DI_RETURN_IF_ERROR(parse_tool_calls(text, &i, options, &out.tool_calls));
    const Scan tail = read_until(text, i, {tok::kEos});
    if (!tail.before.empty()) return parse_error("unexpected text after the tool calls: " + excerpt(tail.before));
    i = tail.next;
  } else if (s.stop != 0) {
    return parse_error("missing end-of-sentence token");
  }
  if (i != text.size()) return parse_error("unexpected text after the end: " + excerpt(text.substr(i)));
  for (std::string_view sp : {tok::kBos, tok::kEos, tok::kThinkStart, tok::kThinkEnd, tok::kDsml}) {
    if (out.content.find(sp) != std::string::npos || out.reasoning_content.find(sp) != std::string::npos)
      return parse_error("special token '" + std::string(sp) + "' inside the reasoning or content");
  }
  return out;
}

nlohmann::ordered_json to_openai_json(const ParsedAssistant& parsed) {
  ordered_json calls = ordered_json::array();
  for (const ToolCall& tc : parsed.tool_calls) {
    calls.push_back({{"type", "function"}, {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
  }
  return {{"role", "assistant"},
          {"content", parsed.content},
          {"reasoning_content", parsed.reasoning_content},
          {"tool_calls", std::move(calls)}};
}

}  // namespace deepinfer::tokenizer
