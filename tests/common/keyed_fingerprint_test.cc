#include "common/keyed_fingerprint.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

std::string Fingerprint(const std::vector<std::pair<std::string, std::string>>& parts) {
  std::string f;
  for (const auto& [name, value] : parts) AppendFingerprintPart(&f, name, value);
  return f;
}

TEST(KeyedFingerprint, NamesThePartsThatDifferOrThatOneSideLacks) {
  const std::string a = Fingerprint({{"tensor data", "1"}, {"x", "2"}, {"y", "3"}});
  EXPECT_EQ(DescribeDifferingParts(a, a), "nothing");
  EXPECT_EQ(DescribeDifferingParts(a, Fingerprint({{"tensor data", "1"}, {"x", "9"}, {"y", "3"}})),
            "x");
  EXPECT_EQ(DifferingParts(a, Fingerprint({{"tensor data", "1"}, {"y", "3"}, {"z", "4"}})),
            (std::vector<std::string>{"x", "z"}));
  EXPECT_EQ(DescribeDifferingParts(a, Fingerprint({{"tensor data", "0"}, {"x", "1"}, {"y", "2"}})),
            "tensor data, x and y");
  // A fingerprint of another format is a set of names without values.
  EXPECT_EQ(DescribeDifferingParts("tiny:1", "tiny:2"), "tiny:1 and tiny:2");
}

// GGUF keys come from the file: separators in them are escaped, so a key
// cannot forge or hide another part, and nothing unprintable reaches a log.
TEST(KeyedFingerprint, NamesWithSeparatorsRoundTrip) {
  const std::string name = "a;b=c%d\n";
  const std::string a = Fingerprint({{name, "1"}, {"b", "2"}}),
                    b = Fingerprint({{name, "2"}, {"b", "2"}});
  EXPECT_EQ(a.find('\n'), std::string::npos);
  EXPECT_EQ(DifferingParts(a, b), (std::vector<std::string>{name}));
  EXPECT_EQ(FingerprintPartBytes(name, "1"), a.find(";b=") + 1);
}

TEST(KeyedFingerprint, LongListsAreCut) {
  std::string a, b;
  for (int k = 0; k < 10; ++k) {
    AppendFingerprintPart(&a, "k" + std::to_string(k), "0");
    AppendFingerprintPart(&b, "k" + std::to_string(k), "1");
  }
  EXPECT_EQ(DescribeDifferingParts(a, b), "k0, k1, k2, k3 and 6 more");
  AppendFingerprintPart(&a, std::string(1000, 'n'), "0");
  EXPECT_EQ(DescribeDifferingParts(a, b, 20).size(),
            std::string("k0, k1, k2, k3, k4, k5, k6, k7, k8, k9 and ").size() + 200);
}

}  // namespace
}  // namespace tandem
