#include "mm/core/run_config.h"

#include "mm/core/error.h"

namespace mm {

void apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  MM_CHECK(eq != std::string::npos && eq > 0, "override '", assignment,
           "' is not of the form key.path=value");
  const std::string path = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    fail("override '", assignment, "': value is not valid YAML: ", e.msg);
  }
  std::vector<std::string> keys;
  for (size_t start = 0;;) {
    const auto dot = path.find('.', start);
    keys.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // yaml-cpp nodes are handles: walk with copies, which alias the same tree.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    MM_CHECK(!keys[i].empty(), "override '", assignment, "' has an empty key");
    YAML::Node next = chain.back()[keys[i]];
    MM_CHECK(!next.IsDefined() || next.IsNull() || next.IsMap(), "override '", assignment,
             "': '", keys[i], "' is not a mapping");
    chain.push_back(next);
  }
  chain.back()[keys.back()] = value;
}

YAML::Node load_run_config(const std::filesystem::path& path,
                           const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path.string());
  } catch (const YAML::BadFile&) {
    fail("cannot open run config ", path.string());
  } catch (const YAML::Exception& e) {
    fail(path.string(), ":", e.mark.line + 1, ": ", e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  MM_CHECK(root.IsMap(), path.string(), ": the run config must be a mapping");
  for (const auto& o : overrides) apply_override(root, o);
  return root;
}

}  // namespace mm
