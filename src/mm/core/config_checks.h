// Checks every model config shares, with errors that name the key.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace mm {

// The sizes a config sets must be positive: fails at the first that is not, naming it as
// "<where><key> must be positive, got <value>" (where: e.g. "config.json: vision_config.").
void require_positive(const std::string& where, std::initializer_list<std::pair<const char*, int64_t>> sizes);

}  // namespace mm
