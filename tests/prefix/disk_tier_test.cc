// The disk tier (L3) owns its folder (issue 26, "hostile inputs"): one tier
// per folder, a folder (or lock file) that another user could write is
// refused, and a page file is served only under the key, parent and tokens
// its checksum was computed for.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "prefix/prefix_index.h"
#include "prefix/tiers.h"
#include "prefix/tiers_internal.h"
#include "runtime/engine.h"
#include "support/engine_ask.h"
#include "support/process.h"
#include "support/test_models.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::MakePresetModel;
using testing::PseudoRandomTokens;

std::vector<int32_t> Ask(Engine& e, const std::vector<int32_t>& prompt) { return testing::AskEngine(e, prompt, 6); }

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

std::string PageName(uint64_t key) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.page", (unsigned long long)key);
  return name;
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

// The page file's checksum covered the payload only: a copy of page A's file
// under page B's name, its header's key and tokens changed to B's, passed
// every check and was served for B's prompt (A's cache, B's tokens). Now the
// checksum covers key, parent and tokens: refused on load, counted, a miss.
TEST(DiskTier, APageFileCopiedUnderAnotherKeyIsNeverServed) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const int64_t vocab = m->model->config().vocab_size;
  const std::string dir = testing::MakeTempDir();
  const auto a = PseudoRandomTokens(200, vocab, 11), b = PseudoRandomTokens(100, vocab, 12);
  {
    auto engine = Engine::Create(*m->model, WithDiskTier(dir));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    Ask(**engine, a);
  }  // shutdown finishes the disk writes
  const uint64_t key_a = PageChainKeys(a, 1, kChainRootSeed)[0], key_b = PageChainKeys(b, 1, kChainRootSeed)[0];
  const fs::path folder = OnlyFolder(dir);
  std::string bytes;
  {
    std::ifstream in(folder / PageName(key_a), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  using tiers_detail::DiskHeader;
  ASSERT_GT(bytes.size(), sizeof(DiskHeader));
  std::memcpy(bytes.data() + offsetof(DiskHeader, key), &key_b, sizeof(key_b));
  std::memcpy(bytes.data() + offsetof(DiskHeader, tokens), b.data(), kPageTokens * sizeof(int32_t));
  {
    std::ofstream out(folder / PageName(key_b), std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  std::vector<int32_t> want;
  {
    auto engine = Engine::Create(*m->model, EngineOptions{});
    ASSERT_TRUE(engine.ok());
    want = Ask(**engine, b);
  }
  auto engine = Engine::Create(*m->model, WithDiskTier(dir));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_EQ(Ask(**engine, b), want);
  const TierStats ts = (*engine)->tier_stats();
  EXPECT_EQ(ts.hit_tokens_l3, 0) << "page A's cache was served for prompt B";
  EXPECT_EQ(ts.disk_errors, 1) << "the copied file is refused and counted";
  engine->reset();  // shutdown finishes the disk writes
  // The copy is removed. The engine computed B's page itself and may have
  // written it back under the same name (when is up to the writer thread),
  // so what is asserted is that the planted bytes are gone.
  if (fs::exists(folder / PageName(key_b))) {
    std::ifstream in(folder / PageName(key_b), std::ios::binary);
    const std::string now((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(now, bytes) << "the copied file is still there";
  }
}

// Invariant 10: the tiers keep tenants apart. A prompt cached under one
// tenant (its pages in L1, L2 and the L3 files) is not found for another
// tenant, even after a restart that leaves only L3: the other computes it
// itself, with the same tokens (invariant 5); its own tenant finds it.
TEST(DiskTier, PagesOfOneTenantAreNeverServedToAnother) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const std::string dir = testing::MakeTempDir();
  const auto prompt = PseudoRandomTokens(200, m->model->config().vocab_size, 13);
  constexpr uint64_t kTenantA = 0xA, kTenantB = 0xB;
  std::vector<int32_t> want;
  {
    auto engine = Engine::Create(*m->model, WithDiskTier(dir));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    int64_t cached = -1;
    want = testing::AskEngine(**engine, prompt, 6, &cached, kTenantA);
    EXPECT_EQ(cached, 0);
    EXPECT_EQ(testing::AskEngine(**engine, prompt, 6, &cached, kTenantB), want);
    EXPECT_EQ(cached, 0) << "tenant B found tenant A's pages in L1";
    EXPECT_EQ(testing::AskEngine(**engine, prompt, 6, &cached, kTenantA), want);
    EXPECT_GE(cached, 3 * kPageTokens) << "tenant A finds its own";
  }  // shutdown finishes the disk writes
  auto engine = Engine::Create(*m->model, WithDiskTier(dir));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  int64_t cached = -1;
  EXPECT_EQ(testing::AskEngine(**engine, prompt, 6, &cached, /*cache_salt=*/0xC), want);
  EXPECT_EQ(cached, 0);
  EXPECT_EQ((*engine)->tier_stats().hit_tokens_l3, 0) << "a third tenant was served another's page files";
  EXPECT_EQ(testing::AskEngine(**engine, prompt, 6, &cached, kTenantA), want);
  EXPECT_GE(cached, 3 * kPageTokens) << "tenant A's page files serve tenant A after a restart";
  EXPECT_GT((*engine)->tier_stats().hit_tokens_l3, 0);
}

// The format's version went up with the checksum: a file of the old one is
// removed at start-up, never read as a new one.
TEST(DiskTier, PageFilesOfTheOldFormatAreRemovedNotRead) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const std::string dir = testing::MakeTempDir();
  const auto a = PseudoRandomTokens(200, m->model->config().vocab_size, 11);
  {
    auto engine = Engine::Create(*m->model, WithDiskTier(dir));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    Ask(**engine, a);
  }
  const fs::path page = OnlyFolder(dir) / PageName(PageChainKeys(a, 1, kChainRootSeed)[0]);
  {
    std::fstream f(page, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(7);
    f.put('1');  // "TDMPAGE1"
  }
  auto engine = Engine::Create(*m->model, WithDiskTier(dir));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_FALSE(fs::exists(page));
  EXPECT_EQ((*engine)->tier_stats().l3_pages, 2) << "the other two pages of the prompt stay";
}

}  // namespace
}  // namespace tandem
