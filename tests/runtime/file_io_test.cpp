#include <gtest/gtest.h>

#include <string>

#include "common/temp_dir.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer {

namespace fs = std::filesystem;

class FileIo : public ::testing::Test {
 protected:
  testing::TempDir tmp_{"fileio"};
  const fs::path& dir_ = tmp_.path;
};

TEST_F(FileIo, AtomicWriteReplacesAndLeavesNoTemporary) {
  write_file_atomic(dir_ / "a.txt", "first");
  write_file_atomic(dir_ / "a.txt", "second");
  EXPECT_EQ(read_file(dir_ / "a.txt"), "second");
  EXPECT_FALSE(fs::exists(dir_ / "a.txt.tmp"));
}

TEST_F(FileIo, UncommittedOutputIsRemoved) {
  {
    OutputFile out(dir_ / "partial");
    out.write("abc", 3);
  }
  EXPECT_FALSE(fs::exists(dir_ / "partial"));
}

TEST_F(FileIo, MissingFileNamesThePath) {
  try {
    MappedFile m(dir_ / "nope.bin");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.bin"), std::string::npos);
  }
  EXPECT_THROW(read_file(dir_ / "nope.txt"), Error);
}

TEST_F(FileIo, MapReadsTheBytes) {
  write_file_atomic(dir_ / "m", "hello");
  MappedFile m(dir_ / "m");
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), 5), "hello");
}

TEST(Crc32, KnownValueAndChaining) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);
}

}  // namespace trainer
