// The one precompiled header: the heavy, stable headers every torch translation unit uses.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>
