// The disk tier (L3) owns its folder (issue 26, "hostile inputs"): one tier
// per folder, and a folder (or lock file) that another user could write is
// refused.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "prefix/tiers.h"
#include "runtime/engine.h"
#include "support/process.h"
#include "support/test_models.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::MakePresetModel;

EngineOptions WithDiskTier(const std::string& dir) {
  EngineOptions opt;
  opt.tiers.host_pages = 64;
  opt.tiers.disk_dir = dir;
  opt.tiers.disk_bytes = int64_t(1) << 30;
  return opt;
}

// The one identity folder the tier made under `dir`.
fs::path OnlyFolder(const std::string& dir) {
  fs::path only;
  int n = 0;
  for (const auto& d : fs::directory_iterator(dir)) {
    if (d.is_directory()) only = d.path(), ++n;
  }
  EXPECT_EQ(n, 1);
  return only;
}

// Two engines given one folder deleted each other's in-flight files at start
// (the scan removes *.tmp), wrote the same page files and each budgeted the
// disk alone. flock is per open file, so a second tier in this process is
// refused exactly as a second process is (tests/e2e/tiers_test.cc runs two).
TEST(DiskTier, ASecondTierOnTheSameFolderIsRefused) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const std::string dir = testing::MakeTempDir();
  auto first = Engine::Create(*m->model, WithDiskTier(dir));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Engine::Create(*m->model, WithDiskTier(dir));
  ASSERT_FALSE(second.ok()) << "a second tier was given a folder another one holds";
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string why = second.status().message();
  EXPECT_NE(why.find(OnlyFolder(dir).string()), std::string::npos) << why;
  EXPECT_NE(why.find("in use by another process (pid " + std::to_string(::getpid()) + ")"),
            std::string::npos)
      << why;
  first->reset();  // the lock goes with the tier
  auto third = Engine::Create(*m->model, WithDiskTier(dir));
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

// Another user who can write the folder (or the folder above it, or the
// lock file) could plant page files that this engine would serve.
TEST(DiskTier, AFolderWritableByOthersIsRefused) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const std::string dir = testing::MakeTempDir();
  auto refused = [&](const std::string& what, const std::string& path) {
    auto e = Engine::Create(*m->model, WithDiskTier(dir));
    ASSERT_FALSE(e.ok()) << what << " was accepted";
    EXPECT_EQ(e.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(e.status().message().find(path), std::string::npos) << e.status().message();
    EXPECT_NE(e.status().message().find(what), std::string::npos) << e.status().message();
  };
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  refused("writable by its group or others (mode 0777)", dir);
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  ASSERT_TRUE(Engine::Create(*m->model, WithDiskTier(dir)).ok()) << "0700, ours: fine";
  const fs::path folder = OnlyFolder(dir);
  EXPECT_EQ(fs::status(folder).permissions() & fs::perms::all, fs::perms::owner_all) << "made 0700";
  ASSERT_EQ(::chmod(folder.c_str(), 0770), 0);
  refused("writable by its group or others (mode 0770)", folder.string());
  ASSERT_EQ(::chmod(folder.c_str(), 0700), 0);
  const std::string lock = (folder / "lock").string();
  ASSERT_EQ(::chmod(lock.c_str(), 0666), 0);
  refused("writable by its group or others (mode 0666)", lock);
  ASSERT_EQ(::chmod(lock.c_str(), 0600), 0);
  ASSERT_TRUE(Engine::Create(*m->model, WithDiskTier(dir)).ok());
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
    refused("owned by another user (uid 65534", dir);
  } else {
    auto e = Engine::Create(*m->model, WithDiskTier("/usr"));  // root's
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("owned by another user (uid 0"), std::string::npos)
        << e.status().message();
  }
}

}  // namespace
}  // namespace tandem
