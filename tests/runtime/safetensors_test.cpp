#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace trainer {

namespace fs = std::filesystem;

static fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("trainer_st_" + name);
}

TEST(Safetensors, RoundTrip) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int32_t> b = {7, -8};
  SafetensorsWriter w;
  w.add("h.0.weight", DType::f32, {2, 3}, a.data());
  w.add("ids", DType::i32, {2}, b.data());
  w.set_metadata("format", "pt");
  fs::path p = temp_path("roundtrip.safetensors");
  w.write(p);
  SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorEntry& t = f.get("h.0.weight");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(t.data, a.data(), 24), 0);  // the 6 floats of a
  EXPECT_EQ(static_cast<const int32_t*>(f.get("ids").data)[1], -8);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_THROW(f.get("missing"), Error);
  fs::remove(p);
}

TEST(Safetensors, TruncatedFileIsAClearError) {
  std::vector<float> a(1000, 1.0f);
  SafetensorsWriter w;
  w.add("x", DType::f32, {1000}, a.data());
  fs::path p = temp_path("trunc.safetensors");
  w.write(p);
  fs::resize_file(p, fs::file_size(p) - 100);  // into x's 4000 data bytes, which end the file
  try {
    SafetensorsFile f(p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("trunc.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  }
  fs::remove(p);
}

}  // namespace trainer
