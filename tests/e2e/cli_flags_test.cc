// Every flag of the `tandem` command means one thing: where two commands take
// the same flag name, it was declared once (a flag group, bin/*_flags.h) and
// reads the same in both. Enumerates the real CLI through --help.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/process.h"

namespace tandem {
namespace {

using testing::RunTandem;

// The subcommands a --help lists.
std::vector<std::string> Subcommands(const std::string& help) {
  std::vector<std::string> out;
  std::istringstream in(help);
  bool in_list = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Subcommands:", 0) == 0) {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (line.size() < 3 || line[0] != ' ' || line[2] == ' ') break;
    out.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  return out;
}

// Each --name of a --help with its description (CLI11's layout: names and
// type from column 2, the description from column 30 and on the lines
// indented that far).
std::map<std::string, std::string> Flags(const std::string& help) {
  std::map<std::string, std::string> out;
  std::istringstream in(help);
  std::vector<std::string> names;
  auto add = [&](const std::string& text) {
    for (const std::string& n : names) out[n] += (out[n].empty() ? "" : " ") + text;
  };
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  -", 0) == 0) {
      names.clear();
      std::string spec = line.substr(2, line.find(' ', 2) - 2);
      std::istringstream parts(spec);
      for (std::string n; std::getline(parts, n, ',');) {
        if (n.rfind("--", 0) == 0) names.push_back(n);
      }
      if (line.size() > 30 && line[29] == ' ' && line[30] != ' ') add(line.substr(30));
      for (const std::string& n : names) out.try_emplace(n, "");
    } else if (line.rfind(std::string(30, ' '), 0) == 0 && !names.empty()) {
      add(line.substr(30));
    } else {
      names.clear();
    }
  }
  return out;
}

TEST(CliFlags, AFlagNameReadsTheSameInEveryCommandThatTakesIt) {
  auto top = RunTandem("--help");
  ASSERT_EQ(top.exit_code, 0) << top.output;
  std::vector<std::string> commands;
  for (const std::string& c : Subcommands(top.output)) {
    auto help = RunTandem(c + " --help");
    ASSERT_EQ(help.exit_code, 0) << c << ": " << help.output;
    const std::vector<std::string> nested = Subcommands(help.output);
    if (nested.empty()) commands.push_back(c);
    for (const std::string& n : nested) commands.push_back(c + " " + n);
  }
  ASSERT_GE(commands.size(), 15u) << "the CLI was not enumerated";
  std::map<std::string, std::map<std::string, std::vector<std::string>>> seen;  // flag -> text -> commands
  for (const std::string& c : commands) {
    auto help = RunTandem(c + " --help");
    ASSERT_EQ(help.exit_code, 0) << c << ": " << help.output;
    const auto flags = Flags(help.output);
    ASSERT_GT(flags.size(), 1u) << c << ": no flags parsed from\n" << help.output;
    for (const auto& [flag, text] : flags) seen[flag][text].push_back(c);
  }
  // Names that mean a different thing in different commands, by design, each
  // with why. Every other name several commands take is declared once (a flag
  // group, or bin/shared_flags.h) and reads the same. This list only shrinks:
  // a name that leaves it fails below too, so it cannot go stale.
  const std::map<std::string, std::string> own_meaning = {
      {"--api-key", "serve and router require it of clients; bench frontdoor is a client and sends it"},
      {"--attention", "the engines take one; bench model and bench prefill sweep or pick the benchmark's"},
      {"--chat-template", "a model-running command renders with it; router -m only tokenizes as its servers do"},
      {"--concurrency", "bench serve: a list of client levels; bench structured: requests decoded together"},
      {"--kv-dtype", "the engines take one; bench model sweeps a list"},
      {"--model", "a model-running command runs it; router -m tokenizes with it; bench model's replaces a preset"},
      {"--preset", "mkmodel and bench model: a generated model; bench agentic: a workload"},
      {"--requests", "each benchmark's own count (a burst, requests per format)"},
      {"--rounds", "each benchmark's own repetition (rounds per session, per kind, per point)"},
      {"--seed", "generate: sampling; mkmodel: the weights; bench agentic: the prompts"},
      {"--topk", "the engines take one; bench model and bench indexer measure the one given"},
  };
  std::set<std::string> twice;
  for (const auto& [flag, texts] : seen) {
    if (texts.size() < 2) continue;
    twice.insert(flag);
    if (own_meaning.count(flag)) continue;
    std::string where;
    for (const auto& [text, cmds] : texts) {
      where += "\n  '" + text + "' in:";
      for (const std::string& c : cmds) where += " [" + c + "]";
    }
    ADD_FAILURE() << flag << " is declared more than once:" << where;
  }
  for (const auto& [flag, why] : own_meaning) {
    EXPECT_TRUE(twice.count(flag)) << flag << " (" << why << ") now reads the same everywhere: take it off the list";
  }
}

}  // namespace
}  // namespace tandem
