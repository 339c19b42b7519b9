// Sizes read from a file (config.json) decide how much a model allocates. Before a model is built,
// its parameter count from the config is checked against the machine's memory, so that a wrong or
// hostile size (num_hidden_layers: 1000000000) is a clear error naming the key, not an
// allocation that never ends.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mm {

// Physical memory of this machine in bytes.
int64_t host_memory_bytes();

// `terms`: the model's parameter count as named parts ("text_config.num_hidden_layers (80) x
// layer", count). Fails naming `file` and the largest part when the parameters in fp32 would not
// fit in host memory.
void check_model_fits_in_memory(const std::string& file, const std::vector<std::pair<std::string, double>>& terms);

}  // namespace mm
