#include "mm/tasks/evaluation.h"

#include <nlohmann/json.hpp>

#include "mm/core/error.h"

namespace mm {
namespace {

std::string_view trim(std::string_view s) {
  const char* space = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

nlohmann::json score_json(const EvalScore& s) {
  return {{"accuracy", s.accuracy()}, {"correct", s.correct}, {"total", s.total}};
}

}  // namespace

bool exact_match(std::string_view prediction, std::string_view reference) {
  prediction = trim(prediction);
  reference = trim(reference);
  if (prediction.size() != reference.size()) return false;
  for (size_t i = 0; i < prediction.size(); ++i)
    if (lower(prediction[i]) != lower(reference[i])) return false;
  return true;
}

std::pair<std::vector<ChatMessage>, std::string> split_last_answer(const Conversation& conversation,
                                                                   const std::string& where) {
  const auto& messages = conversation.messages;
  size_t last = messages.size();
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "assistant") {
      last = i;
      break;
    }
  }
  MM_CHECK(last < messages.size(), where, ": no assistant message to take as the reference answer");
  MM_CHECK(last > 0, where, ": the assistant answer has no prompt before it");
  std::string reference;
  for (const auto& part : messages[last].content)
    if (part.kind == ContentPart::Kind::text) reference += part.text;
  return {std::vector<ChatMessage>(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(last)),
          reference};
}

nlohmann::json EvalResult::summary_json() const {
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [type, score] : by_type) types[type] = score_json(score);
  nlohmann::json out = score_json(overall);
  out["by_type"] = std::move(types);
  return out;
}

EvalResult evaluate_exact_match(VisionLanguageChat& chat, const ConversationFile& data, const EvalOptions& options) {
  MM_CHECK(options.max_new_tokens > 0, "evaluation: max_new_tokens must be > 0, got ", options.max_new_tokens);
  MM_CHECK(options.limit >= 0, "evaluation: limit must be >= 0, got ", options.limit);
  const auto available = static_cast<int64_t>(data.size());
  const int64_t total = options.limit > 0 ? std::min(options.limit, available) : available;
  MM_CHECK(total > 0, data.path().string(), ": no records to evaluate");

  GenerationConfig generation;
  generation.greedy = true;
  generation.max_new_tokens = options.max_new_tokens;

  EvalResult result;
  result.predictions.reserve(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    const Conversation conversation = data.get(static_cast<size_t>(i));
    auto [prompt, reference] = split_last_answer(conversation, data.where(static_cast<size_t>(i)));
    EvalPrediction p;
    p.index = conversation.index;
    p.type = conversation.type;
    p.reference = std::move(reference);
    try {
      chat.chat_template().set_tools(conversation.tools);  // the record's own, as in training
      p.prediction = chat.reply(prompt, generation, options.video);
    } catch (const std::exception& e) {  // a missing or broken image, tools the template refuses: which record
      fail(data.where(static_cast<size_t>(i)), ": ", e.what());
    }
    p.correct = exact_match(p.prediction, p.reference);
    for (EvalScore* score : {&result.overall, &result.by_type[p.type]}) {
      score->total += 1;
      score->correct += p.correct ? 1 : 0;
    }
    result.predictions.push_back(std::move(p));
    if (options.on_prediction) options.on_prediction(result.predictions.back(), i + 1, total);
  }
  return result;
}

}  // namespace mm
