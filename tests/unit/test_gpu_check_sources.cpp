// `./mm gpu-check` builds tests/gpu/gpu_check.cpp on the GPU machine from a fixed list of library
// sources (tests/gpu/CMakeLists.txt: that machine lacks the Debian packages the full library
// links). A file the check reaches but the list lacks is a link error found only where a GPU is
// lent; these tests find it in every build: one follows gpu_check.cpp's includes ("mm/..." and
// "unit/...") and requires the .cpp beside every header it reaches to be in the list; the other
// links the list as that machine does, from this build's object files, which also finds a
// definition in a file of another name (html_unescape.h's html5_entity, in html5_entities.cpp)
// and a listed file nothing needs.
#include <cxxabi.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::kSourceDir;

namespace {

// The files `file` includes by a quoted path, resolved under src/ or tests/.
std::vector<fs::path> quoted_includes(const fs::path& file) {
  static const std::regex include(R"(^\s*#\s*include\s*"((mm|unit)/[^"]+)\")");
  std::vector<fs::path> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, include)) continue;
    out.push_back(kSourceDir / (m[2].str() == "mm" ? "src" : "tests") / m[1].str());
  }
  return out;
}

// The sources the closure of `start` needs: the .cpp of every header reached, transitively.
std::set<std::string> needed_sources(const fs::path& start) {
  std::set<std::string> needed;
  std::set<fs::path> seen;
  std::vector<fs::path> todo = {start};
  while (!todo.empty()) {
    const fs::path file = todo.back();
    todo.pop_back();
    if (!seen.insert(file).second || !fs::exists(file)) continue;
    for (auto& next : quoted_includes(file)) todo.push_back(next);
    if (file.extension() == ".h") {
      auto source = file;
      source.replace_extension(".cpp");
      if (fs::exists(source)) {
        todo.push_back(source);
        needed.insert(fs::relative(source, kSourceDir).string());
      }
    }
  }
  return needed;
}

std::set<std::string> listed_sources() {
  std::ifstream in(kSourceDir / "tests/gpu/CMakeLists.txt");
  static const std::regex entry(R"(\$\{MM_ROOT\}/(src/mm/\S+\.cpp))");
  std::set<std::string> out;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) out.insert(m[1].str());
  }
  return out;
}

}  // namespace

TEST(GpuCheck, ItsSourceListHoldsEverySourceItsIncludesReach) {
  const auto needed = needed_sources(kSourceDir / "tests/gpu/gpu_check.cpp");
  const auto listed = listed_sources();
  ASSERT_GT(needed.size(), 20u);
  for (const auto& source : needed)
    EXPECT_TRUE(listed.count(source)) << source << " is reached from tests/gpu/gpu_check.cpp but missing from "
                                      << "MM_GPU_SOURCES in tests/gpu/CMakeLists.txt";
}

// The symbols of an object file by `nm -P`: defined ones, and undefined ones (type U).
struct ObjectSymbols {
  std::set<std::string> defined, undefined;
};

ObjectSymbols symbols_of(const fs::path& object) {
  ObjectSymbols out;
  const std::string command = "nm -P --no-sort '" + object.string() + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) return out;
  char line[8192];
  while (std::fgets(line, sizeof line, pipe.get())) {
    std::istringstream fields(line);
    std::string name, type;
    if (!(fields >> name >> type) || type.size() != 1) continue;
    (type == "U" ? out.undefined : out.defined).insert(name);
  }
  return out;
}

std::string demangled(const std::string& name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && text ? std::string(text.get()) : name;
}

TEST(GpuCheck, ItsSourceListLinksAndHoldsNothingUnneeded) {
  const fs::path build = fs::path(MM_TEST_GOLDEN_DIR).parent_path();
  std::map<std::string, ObjectSymbols> objects;
  // The program's own sources (tests/gpu/), then the library sources it lists.
  for (const char* own : {"gpu_check.cpp", "host_sync_counter.cpp"})
    objects[std::string("tests/gpu/") + own] =
        symbols_of(build / "tests/CMakeFiles/gpu_check.dir/gpu" / (std::string(own) + ".o"));
  for (const auto& source : listed_sources()) {
    const auto object = build / "CMakeFiles/mmtrain_lib.dir" / (source + ".o");
    ASSERT_TRUE(fs::exists(object)) << object << ": the object of a listed source is not in this build";
    objects[source] = symbols_of(object);
  }
  ASSERT_GT(objects["tests/gpu/gpu_check.cpp"].undefined.size(), 100u) << "nm read nothing";
  // Symbols of namespace mm (functions, methods, vtables, typeinfo): what only our sources define.
  static const std::regex in_mm("^_Z(T[VIS])?N?K?2mm");
  std::set<std::string> defined, undefined;
  for (const auto& [source, symbols] : objects) {
    defined.insert(symbols.defined.begin(), symbols.defined.end());
    undefined.insert(symbols.undefined.begin(), symbols.undefined.end());
  }
  std::vector<std::string> missing;
  for (const auto& name : undefined)
    if (std::regex_search(name, in_mm) && !defined.count(name)) missing.push_back(demangled(name));
  EXPECT_TRUE(missing.empty()) << missing.size() << " symbols of namespace mm stay undefined when gpu_check links "
                               << "MM_GPU_SOURCES (tests/gpu/CMakeLists.txt), e.g. " << missing.front()
                               << ": list the source that defines them";
  for (const auto& [source, symbols] : objects) {
    if (source.rfind("tests/gpu/", 0) == 0) continue;
    // An object never lists its own definitions as undefined, so `undefined` holds others' needs.
    bool used = false;
    for (const auto& name : symbols.defined) used = used || undefined.count(name) > 0;
    EXPECT_TRUE(used) << source << " is listed in tests/gpu/CMakeLists.txt but nothing there needs it";
  }
}
