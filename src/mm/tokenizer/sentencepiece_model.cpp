#include "mm/tokenizer/sentencepiece_model.h"

#include <cstdint>
#include <cstring>

#include "mm/core/error.h"

namespace mm {
namespace {

// Field numbers of sentencepiece_model.proto.
constexpr uint32_t kModelPieces = 1, kModelTrainerSpec = 2, kModelNormalizerSpec = 3;
constexpr uint32_t kPiecePiece = 1, kPieceScore = 2, kPieceType = 3;
constexpr uint32_t kTrainerModelType = 3;
constexpr uint32_t kNormalizerCharsmap = 2;
constexpr int kTypeNormal = 1;  // SentencePiece.Type's default

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

struct Field {
  uint32_t number = 0;
  WireType wire = kVarint;
  uint64_t varint = 0;       // kVarint
  std::string_view bytes;    // kLengthDelimited payload; the raw value for fixed types
  std::string_view encoded;  // the whole field (key and value) as it appears in the input
};

class Reader {
 public:
  Reader(std::string_view data, const std::string& file) : data_(data), file_(file) {}
  bool done() const { return pos_ >= data_.size(); }

  Field next() {
    const size_t start = pos_;
    Field f;
    const uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<WireType>(key & 7);
    switch (f.wire) {
      case kVarint:
        f.varint = varint();
        break;
      case kFixed64:
        f.bytes = take(8);
        break;
      case kFixed32:
        f.bytes = take(4);
        break;
      case kLengthDelimited:
        f.bytes = take(varint());
        break;
      default:
        fail(file_, ": not a SentencePiece model (bad protobuf wire type ", static_cast<int>(f.wire), " at byte ",
             start, ")");
    }
    f.encoded = data_.substr(start, pos_ - start);
    return f;
  }

 private:
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      MM_CHECK(pos_ < data_.size(), file_, ": not a SentencePiece model (truncated protobuf)");
      const auto byte = static_cast<uint8_t>(data_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    fail(file_, ": not a SentencePiece model (bad protobuf varint)");
  }
  std::string_view take(uint64_t n) {
    MM_CHECK(n <= data_.size() - pos_, file_, ": not a SentencePiece model (truncated protobuf)");
    const auto out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  std::string_view data_;
  const std::string& file_;
  size_t pos_ = 0;
};

}  // namespace

SentencePieceModelInfo read_sentencepiece_model(std::string_view serialized, const std::string& file) {
  SentencePieceModelInfo info;
  Reader reader(serialized, file);
  while (!reader.done()) {
    const Field f = reader.next();
    if (f.number == kModelPieces && f.wire == kLengthDelimited) {
      std::string piece;
      float score = 0;
      int type = kTypeNormal;
      Reader fields(f.bytes, file);
      while (!fields.done()) {
        const Field p = fields.next();
        if (p.number == kPiecePiece && p.wire == kLengthDelimited) piece = p.bytes;
        if (p.number == kPieceScore && p.wire == kFixed32) std::memcpy(&score, p.bytes.data(), sizeof(score));
        if (p.number == kPieceType && p.wire == kVarint) type = static_cast<int>(p.varint);
      }
      info.pieces.push_back(std::move(piece));
      info.scores.push_back(score);
      info.types.push_back(type);
    } else if (f.number == kModelTrainerSpec && f.wire == kLengthDelimited) {
      Reader trainer(f.bytes, file);
      while (!trainer.done()) {
        const Field t = trainer.next();
        if (t.number == kTrainerModelType && t.wire == kVarint) info.model_type = static_cast<int>(t.varint);
      }
    } else if (f.number == kModelNormalizerSpec && f.wire == kLengthDelimited) {
      Reader normalizer(f.bytes, file);
      while (!normalizer.done()) {
        const Field n = normalizer.next();
        if (n.number == kNormalizerCharsmap && n.wire == kLengthDelimited) info.precompiled_charsmap = n.bytes;
      }
    } else if (f.number <= kModelNormalizerSpec) {
      fail(file, ": not a SentencePiece model (field ", f.number, " has wire type ", static_cast<int>(f.wire), ")");
    }
    // Self-test data (4) and the denormalizer (5) are not needed.
  }
  MM_CHECK(!info.pieces.empty(), file, ": not a SentencePiece model (no pieces)");
  return info;
}

}  // namespace mm
