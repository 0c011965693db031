#include "node/supervisor.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/log.h"

namespace tandem::node {

Supervisor::Supervisor(std::string state_path, int budget) : path_(std::move(state_path)), budget_(budget) {}

void Supervisor::Started(const std::string& child) {
  children_[child].up = true;
  Write();
}

std::chrono::milliseconds Supervisor::Down(const std::string& child, const std::string& how) {
  ChildState& c = children_[child];
  c.up = false;
  c.last_exit = how;
  const auto now = Env::Default().Now();
  while (!c.recent.empty() && now - c.recent.front() > kWindow) c.recent.pop_front();
  if (int(c.recent.size()) >= budget_) {
    TLOG_ERROR("tandem serve --disagg: the %s %s; it was restarted %zu times in the last %lld s (the budget): "
               "stopping\n", child.c_str(), how.c_str(), c.recent.size(),
               static_cast<long long>(kWindow.count()));
    Write();
    return std::chrono::milliseconds(-1);
  }
  c.recent.push_back(now);
  ++c.restarts;
  const auto backoff = std::min<std::chrono::milliseconds>(
      std::chrono::milliseconds(int64_t(100) << std::min<size_t>(c.recent.size() - 1, 6)), std::chrono::seconds(5));
  TLOG_WARN("tandem serve --disagg: the %s %s; restarting it in %lld ms (restart %d, %zu of %d within a minute)\n",
            child.c_str(), how.c_str(), static_cast<long long>(backoff.count()), c.restarts, c.recent.size(), budget_);
  Write();
  return backoff;
}

std::chrono::milliseconds Supervisor::Drained(const std::string& child) {
  ChildState& c = children_[child];
  const auto now = Env::Default().Now();
  while (!c.recent_drains.empty() && now - c.recent_drains.front() > kWindow) c.recent_drains.pop_front();
  if (c.recent_drains.size() >= kDrainsPerWindow) {
    return Down(child, "exited cleanly " + std::to_string(c.recent_drains.size() + 1) + " times within a minute");
  }
  c.recent_drains.push_back(now);
  c.up = false;
  c.last_exit = "drained";
  ++c.drains;
  TLOG_INFO("tandem serve --disagg: the %s drained and exited; starting it again (drain %d, no restart budget "
            "spent)\n", child.c_str(), c.drains);
  Write();
  return std::chrono::milliseconds(100);
}

void Supervisor::Write() const {
  nlohmann::json state = nlohmann::json::object();
  for (const auto& [name, c] : children_) {
    state[name] = {{"up", c.up}, {"restarts", c.restarts}, {"drains", c.drains}, {"last_exit", c.last_exit}};
  }
  // Written whole, then renamed: a reader never sees half a file.
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json({{"children", state}}).dump() << "\n";
    if (!out) return (void)TLOG_WARN("tandem serve --disagg: cannot write %s\n", tmp.c_str());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
}

}  // namespace tandem::node
