// The C++ runtime comes before libtorch in every program's symbol search order
// (cmake/Torch.cmake). The torch 2.11 wheels export a copy of std::filesystem whose remove_all
// needs a GCC 13 libstdc++ function; where it won the lookup, every remove_all in an mmtrain
// process on an older libstdc++ (Debian 12) crashed. The pinned torch exports no such copy, so
// these tests check the order itself, which is what keeps any wheel's copies from winning.
#include <dlfcn.h>
#include <link.h>

#include <string>
#include <vector>

#include "testing.h"

namespace {

// The shared objects of this process in load order: the order in which symbols are looked up.
std::vector<std::string> loaded_objects() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name ? info->dlpi_name : "");
        return 0;
      },
      &names);
  return names;
}

// Index of the first name containing `part`, or -1.
int first_with(const std::vector<std::string>& names, const std::string& part) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].find(part) != std::string::npos) return static_cast<int>(i);
  return -1;
}

TEST(LibraryOrder, TheCppRuntimeIsSearchedBeforeTorch) {
  const auto names = loaded_objects();
  const int runtime = first_with(names, "libstdc++.so");
  ASSERT_GE(runtime, 0);
  for (const char* torch_lib : {"libtorch.so", "libtorch_cpu.so", "libc10.so", "libtorch_cuda.so"}) {
    const int at = first_with(names, torch_lib);
    if (at >= 0) {
      EXPECT_LT(runtime, at) << torch_lib << " is searched before libstdc++";
    }
  }
  EXPECT_GE(first_with(names, "libtorch_cpu.so"), 0);  // torch is there to be ordered after it
}

TEST(LibraryOrder, FilesystemCallsResolveToTheCppRuntime) {
  // std::filesystem::remove_all(const path&), the function that crashed, as the process finds it.
  void* found = dlsym(RTLD_DEFAULT, "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE");
  ASSERT_NE(found, nullptr);
  Dl_info info{};
  ASSERT_NE(dladdr(found, &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("libstdc++.so"), std::string::npos) << info.dli_fname;
}

TEST(LibraryOrder, TheMmtrainProgramNamesTheCppRuntimeFirst) {
  // The product binary's own dependency list (its DT_NEEDED order is its search order).
  auto [status, out] = mm::testing::run_command("readelf -d " + mm::testing::kMmtrain, false);
  ASSERT_EQ(status, 0) << out;
  const auto runtime = out.find("[libstdc++.so");
  ASSERT_NE(runtime, std::string::npos) << out;
  for (const char* torch_lib : {"[libtorch", "[libc10"}) {
    const auto at = out.find(torch_lib);
    if (at != std::string::npos) {
      EXPECT_LT(runtime, at) << out;
    }
  }
  EXPECT_LT(runtime, out.find("[libmmtrain.so")) << out;
}

}  // namespace
