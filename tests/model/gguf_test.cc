#include "model/gguf.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(Gguf, Placeholder) { EXPECT_TRUE(true); }

}  // namespace
}  // namespace tandem
