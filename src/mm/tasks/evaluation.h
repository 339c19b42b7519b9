// Exact-match evaluation of a vision-language model on conversations with reference answers.
// For each record, the prompt is the conversation up to its last assistant message and the
// reference is that message's text; the model answers greedily and the answer counts as correct
// when it equals the reference after trimming surrounding whitespace, ignoring ASCII case (as
// most VQA exact-match scripts do, minus their punctuation and article stripping).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mm/data/conversation.h"
#include "mm/tasks/vision_language_chat.h"

namespace mm {

// Trimmed (ASCII whitespace), ASCII-case-insensitive equality. Non-ASCII bytes compare exactly.
bool exact_match(std::string_view prediction, std::string_view reference);

// Splits a conversation at its last assistant message: {messages before it, its text parts
// joined}. Throws mm::Error naming `where` when there is no assistant message or nothing before it.
std::pair<std::vector<ChatMessage>, std::string> split_last_answer(const Conversation& conversation,
                                                                   const std::string& where);

struct EvalPrediction {
  int64_t index = -1;      // the record's position in its file
  std::string type;        // the record's "type" ("" when it has none)
  std::string reference;
  std::string prediction;
  bool correct = false;
};

struct EvalScore {
  int64_t correct = 0;
  int64_t total = 0;
  double accuracy() const { return total > 0 ? static_cast<double>(correct) / total : 0.0; }
};

struct EvalResult {
  EvalScore overall;
  std::map<std::string, EvalScore> by_type;  // records without a type count under ""
  std::vector<EvalPrediction> predictions;   // in file order

  // {"accuracy", "correct", "total", "by_type": {type: {"accuracy", "correct", "total"}}}
  nlohmann::json summary_json() const;
};

struct EvalOptions {
  int64_t max_new_tokens = 32;
  int64_t limit = 0;  // score only the first `limit` records (0: all)
  VideoOptions video;
  // Called after each record (e.g. to draw progress); done counts records scored so far.
  std::function<void(const EvalPrediction& prediction, int64_t done, int64_t total)> on_prediction;
};

// Greedy answers for the records of `data`, scored by exact_match. A record that cannot be read
// (malformed, missing media, no assistant answer) is an mm::Error naming file:line: a score over
// a silently shrunken set would mislead.
EvalResult evaluate_exact_match(VisionLanguageChat& chat, const ConversationFile& data, const EvalOptions& options);

}  // namespace mm
