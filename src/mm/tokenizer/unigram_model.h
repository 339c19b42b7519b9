// The Unigram segmentation of `tokenizers` (models/unigram, encode_optimized), which transformers
// runs for T5/umT5 tokenizers converted from spiece.model: the Viterbi path of highest total
// piece score over the word's characters; a character no piece starts with becomes <unk> with
// score min_score - 10; consecutive <unk>s are fused into one. Ties keep the earliest-found path
// (a later candidate must score strictly higher), as `tokenizers` does.
//
// Written here rather than calling libsentencepiece: Debian's libsentencepiece exports its own
// bundled copy of protobuf-lite, whose symbols interpose on the system libprotobuf that our
// TensorBoard writer links, and the process crashes while loading.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mm {

class UnigramModel {
 public:
  UnigramModel() = default;
  // pieces[i] and scores[i] for id i (every piece of spiece.model, control ones included, as the
  // conversion keeps them); unk_id: the <unk> piece.
  UnigramModel(std::vector<std::string> pieces, const std::vector<double>& scores, int64_t unk_id);

  // Appends the ids of one pre-tokenized word (valid UTF-8).
  void encode(std::string_view word, std::vector<int64_t>& ids) const;

  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  int64_t unk_id() const { return unk_id_; }
  const std::string& piece(int64_t id) const { return pieces_[static_cast<size_t>(id)]; }
  // The id of a piece, or -1.
  int64_t piece_to_id(std::string_view piece) const;

 private:
  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::unordered_map<std::string, int64_t> ids_;
  std::vector<size_t> lengths_by_first_byte_[256];  // distinct piece byte lengths, per first byte
  double unk_score_ = 0;
  int64_t unk_id_ = 0;
};

}  // namespace mm
