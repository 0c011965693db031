#include "discovery/kv_events_wire.h"

#include <msgpack.hpp>

namespace tandem::discovery {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackKeys(Packer& p, const std::vector<uint64_t>& keys) {
  p.pack_array(uint32_t(keys.size()));
  for (uint64_t k : keys) p.pack_uint64(k);
}

// A msgpack integer as int64/uint64, refusing anything else.
bool AsUint64(const msgpack::object& o, uint64_t* out) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return (*out = o.via.u64), true;
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return (*out = uint64_t(o.via.i64)), true;  // a signed hash's bits
  return false;
}

bool AsString(const msgpack::object& o, std::string* out) {
  if (o.type == msgpack::type::NIL) return out->clear(), true;
  if (o.type != msgpack::type::STR) return false;
  out->assign(o.via.str.ptr, o.via.str.size);
  return true;
}

Status Keys(const msgpack::object& o, std::vector<uint64_t>* out, size_t* budget) {
  if (o.type != msgpack::type::ARRAY) return InvalidArgument("a KV event's keys are not an array");
  if (o.via.array.size > *budget) return InvalidArgument("a KV event batch holds too many keys");
  *budget -= o.via.array.size;
  out->reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    uint64_t k = 0;
    if (!AsUint64(o.via.array.ptr[i], &k)) return InvalidArgument("a KV event's key is not an integer");
    out->push_back(k);
  }
  return Status::Ok();
}

StatusOr<KvEvent> DecodeEvent(const msgpack::object& o, size_t* budget, bool keep_tokens) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size == 0) return InvalidArgument("a KV event is not an array");
  const msgpack::object* f = o.via.array.ptr;
  const uint32_t n = o.via.array.size;
  std::string kind;
  if (!AsString(f[0], &kind) || kind.empty()) return InvalidArgument("a KV event's kind is not a string");
  KvEvent e;
  if (kind == "BlockStored") {
    if (n < 5) return InvalidArgument("a BlockStored event has " + std::to_string(n) + " fields, not 5 or more");
    e.kind = KvEvent::Kind::kStored;
    TANDEM_RETURN_IF_ERROR(Keys(f[1], &e.keys, budget));
    if (f[2].type != msgpack::type::NIL) {
      if (!AsUint64(f[2], &e.parent)) return InvalidArgument("a BlockStored parent is not an integer");
      e.has_parent = true;
    }
    if (f[3].type != msgpack::type::ARRAY) return InvalidArgument("a BlockStored event's tokens are not an array");
    if (f[3].via.array.size > *budget) return InvalidArgument("a KV event batch holds too many tokens");
    *budget -= f[3].via.array.size;
    for (uint32_t i = 0; i < f[3].via.array.size; ++i) {
      uint64_t t = 0;
      if (!AsUint64(f[3].via.array.ptr[i], &t) || t > uint64_t(INT32_MAX)) {
        return InvalidArgument("a BlockStored token is not a token id");
      }
      if (keep_tokens) e.tokens.push_back(int32_t(t));
    }
    uint64_t bs = 0;
    if (!AsUint64(f[4], &bs) || bs == 0 || bs > (1u << 20)) return InvalidArgument("a BlockStored block size is not valid");
    e.block_size = int64_t(bs);
    if (n >= 7 && !AsString(f[6], &e.medium)) return InvalidArgument("a BlockStored medium is not a string");
  } else if (kind == "BlockRemoved") {
    if (n < 2) return InvalidArgument("a BlockRemoved event has no keys");
    e.kind = KvEvent::Kind::kRemoved;
    TANDEM_RETURN_IF_ERROR(Keys(f[1], &e.keys, budget));
    if (n >= 3 && !AsString(f[2], &e.medium)) return InvalidArgument("a BlockRemoved medium is not a string");
  } else if (kind == "AllBlocksCleared") {
    e.kind = KvEvent::Kind::kCleared;
  } else {
    return NotFound("unknown KV event kind '" + kind.substr(0, 64) + "'");
  }
  return e;
}

// Before msgpack builds anything: every container's declared size, summed,
// may not exceed the payload's bytes (each element takes at least one), so
// what the parser reserves stays within a small multiple of the payload.
struct SizeCheck : msgpack::v2::null_visitor {
  size_t budget = 0;
  bool over = false;
  bool start_array(uint32_t n) { return take(n); }
  bool start_map(uint32_t n) { return take(size_t(n) * 2); }
  bool take(size_t n) {
    if (n > budget) return !(over = true);
    budget -= n;
    return true;
  }
  void parse_error(size_t, size_t) {}
  void insufficient_bytes(size_t, size_t) {}
};

}  // namespace

std::string EncodeKvEventBatch(const KvEventBatch& batch) {
  msgpack::sbuffer buf;
  Packer p(buf);
  p.pack_array(2);
  p.pack_double(batch.ts);
  p.pack_array(uint32_t(batch.events.size()));
  for (const KvEvent& e : batch.events) {
    switch (e.kind) {
      case KvEvent::Kind::kStored:
        p.pack_array(7);
        p.pack(std::string("BlockStored"));
        PackKeys(p, e.keys);
        if (e.has_parent) {
          p.pack_uint64(e.parent);
        } else {
          p.pack_nil();
        }
        p.pack_array(uint32_t(e.tokens.size()));
        for (int32_t t : e.tokens) p.pack_int32(t);
        p.pack_int64(e.block_size);
        p.pack_nil();  // lora id
        p.pack(e.medium);
        break;
      case KvEvent::Kind::kRemoved:
        p.pack_array(3);
        p.pack(std::string("BlockRemoved"));
        PackKeys(p, e.keys);
        p.pack(e.medium);
        break;
      case KvEvent::Kind::kCleared:
        p.pack_array(1);
        p.pack(std::string("AllBlocksCleared"));
        break;
    }
  }
  return std::string(buf.data(), buf.size());
}

StatusOr<KvEventBatch> DecodeKvEventBatch(const std::string& payload, size_t max_items, bool keep_tokens) {
  msgpack::object_handle handle;
  try {
    SizeCheck check;
    check.budget = payload.size();
    size_t off = 0;
    if (!msgpack::v2::parse(payload.data(), payload.size(), off, check) || check.over) {
      return InvalidArgument("a KV event batch is not msgpack, or declares more elements than it holds");
    }
    // Limits on every container the parser may build, before it builds it.
    const msgpack::unpack_limit limit(max_items, max_items, 256, 0, 0, 32);
    handle = msgpack::unpack(payload.data(), payload.size(), nullptr, nullptr, limit);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("a KV event batch is not msgpack within its limits: ") + e.what());
  }
  const msgpack::object& o = handle.get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size < 2) return InvalidArgument("a KV event batch is not [ts, events]");
  KvEventBatch batch;
  const msgpack::object& ts = o.via.array.ptr[0];
  if (ts.type == msgpack::type::FLOAT64 || ts.type == msgpack::type::FLOAT32) {
    batch.ts = ts.via.f64;
  } else if (ts.type == msgpack::type::POSITIVE_INTEGER) {
    batch.ts = double(ts.via.u64);
  } else {
    return InvalidArgument("a KV event batch's timestamp is not a number");
  }
  const msgpack::object& events = o.via.array.ptr[1];
  if (events.type != msgpack::type::ARRAY) return InvalidArgument("a KV event batch's events are not an array");
  size_t budget = max_items;
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    auto e = DecodeEvent(events.via.array.ptr[i], &budget, keep_tokens);
    if (e.status().code() == StatusCode::kNotFound) continue;  // a kind this build does not know
    if (!e.ok()) return e.status();
    batch.events.push_back(std::move(e).value());
  }
  return batch;
}

std::string EncodeSequence(int64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint64_t(seq) >> (56 - 8 * i));
  return out;
}

StatusOr<int64_t> DecodeSequence(const std::string& frame) {
  if (frame.size() != 8) return InvalidArgument("a KV event sequence number is " + std::to_string(frame.size()) + " bytes, not 8");
  uint64_t v = 0;
  for (unsigned char c : frame) v = (v << 8) | c;
  return int64_t(v);
}

}  // namespace tandem::discovery
