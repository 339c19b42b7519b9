// Reading a SentencePiece ModelProto (spiece.model) at the protobuf wire level, so the tokenizer
// needs neither sentencepiece's generated protobuf headers nor protoc (nor libsentencepiece,
// see unigram_model.h): the pieces with their scores and types, the model type and the
// normalizer's precompiled charsmap. The normalizer name, dummy prefix and white-space flags are
// not needed: transformers (5.x) does not run sentencepiece for T5/umT5 but rebuilds the model as
// a `tokenizers` Unigram with its own normalizer and pre-tokenizer, which the tokenizer follows.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace mm {

struct SentencePieceModelInfo {
  int model_type = 1;                // TrainerSpec.model_type: 1 unigram, 2 BPE, 3 word, 4 char
  std::vector<std::string> pieces;   // ModelProto.pieces, in id order
  std::vector<double> scores;        // their scores (float32 in the file)
  std::vector<int> types;            // SentencePiece.Type: 1 normal, 2 unknown, 3 control, 4 user, 6 byte
  std::string precompiled_charsmap;  // NormalizerSpec.precompiled_charsmap (may be empty)
};

// `file` names the model in errors; a truncated or malformed proto fails with its name.
SentencePieceModelInfo read_sentencepiece_model(std::string_view serialized, const std::string& file);

}  // namespace mm
