// A fresh, empty directory under the system temp dir for one test, removed by the destructor.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

namespace trainer::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("trainer_" + tag + "_" + std::to_string(::getpid()) + "_" +
            std::to_string(std::random_device{}()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace trainer::testing
