// TESTS AND DEBUGGING (the fault library, linked by bin/ and tests): page
// poisoning, like an allocator's scribbling. As a PagePool page hook, every
// page is filled with kPoisonByte in every buffer of every layer the moment
// it is freed or reserved (--debug-poison-pages), so a read before its data
// has landed gives garbage, caught by verification, instead of stale bytes
// that happen to be right.
#pragma once

#include <cstdint>

#include "cache/page_pool.h"

namespace tandem::faults {

// f32/bf16 0x5A5A.. ~ 1.5e16, f16 203, fp8 e4m3 20: finite, and far from any real cache row.
inline constexpr uint8_t kPoisonByte = 0x5A;

void PoisonPage(PagePool& pool, int32_t page);
inline PagePool::PageHook PoisonPages() { return &PoisonPage; }

}  // namespace tandem::faults
