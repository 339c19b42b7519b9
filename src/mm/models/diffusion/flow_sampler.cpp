#include "mm/models/diffusion/flow_sampler.h"

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/models/diffusion/flow_match_euler.h"
#include "mm/models/diffusion/unipc.h"

namespace mm {

std::unique_ptr<FlowSampler> make_flow_sampler(const std::filesystem::path& scheduler_config_json) {
  const auto json = read_json_file(scheduler_config_json);
  const JsonView root(json, scheduler_config_json.string());
  const auto name = root.get_or<std::string>("_class_name", "");
  if (name == "FlowMatchEulerDiscreteScheduler")
    return std::make_unique<FlowMatchEulerScheduler>(FlowMatchEulerConfig::from_file(scheduler_config_json));
  if (name == "UniPCMultistepScheduler")
    return std::make_unique<UniPCScheduler>(UniPCConfig::from_file(scheduler_config_json));
  fail(root.where("_class_name"), ": '", name,
       "' is not a supported sampler (supported: FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler)");
}

}  // namespace mm
