// What the live-peer fuzz targets share (hostile_peer_fuzzer.cc,
// hostile_prefill_fuzzer.cc): the model they serve and a handoff header put
// around bytes of the script's choosing.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "model/gguf.h"
#include "model/model.h"
#include "model/presets.h"
#include "transfer/messages.h"

namespace tandem::fuzz {

// The `micro` preset with seeded random weights; the model reads its tensors
// in place, so `bytes` lives as long as it does.
struct MicroModel {
  std::vector<uint8_t> bytes;
  std::unique_ptr<Model> model;
};

inline void BuildMicroModel(MicroModel* m) {
  auto writer = BuildRandomModel(*FindPreset("micro"), TensorType::kF32, 7);
  m->bytes = writer->Serialize();
  m->model = std::move(Model::FromGguf(std::move(GgufFile::Parse(m->bytes)).value())).value();
}

// `body` behind a valid frame header of message type `type` (1..6).
inline std::vector<uint8_t> WithHeader(uint16_t type, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> framed(kHandoffHeaderBytes);
  const uint32_t magic = kHandoffMagic, n = uint32_t(body.size());
  const uint16_t version = kHandoffVersion;
  std::memcpy(framed.data(), &magic, 4);
  std::memcpy(framed.data() + 4, &version, 2);
  std::memcpy(framed.data() + 6, &type, 2);
  std::memcpy(framed.data() + 8, &n, 4);
  framed.insert(framed.end(), body.begin(), body.end());
  return framed;
}

}  // namespace tandem::fuzz
