// A records file for a test: a unique path in the temp directory, removed before and after.
#pragma once

#include <filesystem>
#include <string>
#include <unistd.h>

namespace loom_test {

struct TempLog {
  std::string path;
  explicit TempLog(const std::string& name) {
    path = (std::filesystem::temp_directory_path() /
            ("loom_test_" + name + "_" + std::to_string(::getpid()) + ".jsonl"))
               .string();
    std::filesystem::remove(path);
  }
  ~TempLog() { std::filesystem::remove(path); }
};

}  // namespace loom_test
