// The stream trace's wire form (server/openai_api.h, StreamTrace): one SSE
// comment event, ": tandem {json}", which clients that follow the SSE rules
// ignore and a router strips.
#include <nlohmann/json.hpp>

#include "server/openai_api.h"

namespace tandem {

namespace {
constexpr std::string_view kPrefix = ": tandem ";
}  // namespace

std::string StreamTraceSse(const StreamTrace& trace) {
  nlohmann::json j = nlohmann::json::object();
  if (trace.id) {
    j["id"] = *trace.id;
    j["created"] = trace.created;
  }
  if (!trace.choices.empty()) {
    nlohmann::json choices = nlohmann::json::array();
    for (const StreamTrace::Choice& c : trace.choices) {
      nlohmann::json one = {{"c", c.index}};
      if (!c.tokens.empty()) one["t"] = c.tokens;
      if (c.opened) one["o"] = 1;
      if (c.finished) one["f"] = 1;
      choices.push_back(std::move(one));
    }
    j["ch"] = std::move(choices);
  }
  if (trace.error_status != 0) j["e"] = trace.error_status;
  return std::string(kPrefix) + j.dump() + "\n\n";
}

std::optional<StreamTrace> ParseStreamTrace(std::string_view event) {
  if (event.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const auto j = nlohmann::json::parse(event.substr(kPrefix.size()), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  StreamTrace t;
  try {
    if (auto id = j.find("id"); id != j.end() && id->is_number_unsigned()) {
      t.id = id->get<uint64_t>();
      t.created = j.value("created", int64_t(0));
    }
    if (auto e = j.find("e"); e != j.end() && e->is_number_integer()) t.error_status = e->get<int>();
    if (auto ch = j.find("ch"); ch != j.end() && ch->is_array()) {
      for (const auto& c : *ch) {
        StreamTrace::Choice one;
        one.index = c.value("c", -1);
        if (auto tokens = c.find("t"); tokens != c.end()) one.tokens = tokens->get<std::vector<int32_t>>();
        one.opened = c.value("o", 0) != 0;
        one.finished = c.value("f", 0) != 0;
        t.choices.push_back(std::move(one));
      }
    }
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // not one of ours
  }
  return t;
}

}  // namespace tandem
