// API keys and CORS as rules, without sockets (server/access.h).
#include "server/access.h"

#include <gtest/gtest.h>

#include <fstream>

#include "support/process.h"

namespace tandem {
namespace {

TEST(Access, KeysAreComparedWholeAndOnlyTheApiRoutesNeedThem) {
  EXPECT_TRUE(ConstantTimeEqual("sk-secret-1", "sk-secret-1"));
  EXPECT_FALSE(ConstantTimeEqual("sk-secret-1", "sk-secret-2"));
  EXPECT_FALSE(ConstantTimeEqual("sk-secret", "sk-secret-1"));  // a prefix is not the key
  EXPECT_FALSE(ConstantTimeEqual("", "x"));
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/keys") << "# team keys\n\n  sk-first-key  \nsk-second-key\n";
  auto p = AccessPolicy::Load("", dir + "/keys", "");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->api_keys, (std::vector<std::string>{"sk-first-key", "sk-second-key"}));
  EXPECT_TRUE(p->Authorized("/v1/chat/completions", "Bearer sk-second-key"));
  EXPECT_TRUE(p->Authorized("/v1/chat/completions", "bearer sk-second-key"));  // the scheme is case-insensitive
  EXPECT_FALSE(p->Authorized("/v1/chat/completions", "Bearer SK-SECOND-KEY"));  // the key is not
  EXPECT_FALSE(p->Authorized("/v1/chat/completions", "Bearer sk-second-ke"));
  EXPECT_FALSE(p->Authorized("/v1/models", "sk-first-key"));  // not a bearer token
  EXPECT_FALSE(p->Authorized("/v1/models", ""));
  EXPECT_TRUE(p->Authorized("/health", ""));
  EXPECT_TRUE(p->Authorized("/metrics", ""));
  EXPECT_TRUE(AccessPolicy{}.Authorized("/v1/models", ""));  // no keys configured: open
  EXPECT_FALSE(AccessPolicy::Load("", dir + "/missing", "").ok());
  std::ofstream(dir + "/empty") << "# nothing\n";
  EXPECT_NE(AccessPolicy::Load("", dir + "/empty", "").status().message().find("holds no key"), std::string::npos);
  EXPECT_NE(AccessPolicy::Load("short", "", "").status().message().find("at least 8"), std::string::npos);
  // A key file that holds nothing is an error even beside --api-key; a byte-order mark is not part of a key.
  EXPECT_FALSE(AccessPolicy::Load("sk-command-line", dir + "/empty", "").ok());
  std::ofstream(dir + "/bom") << "\xEF\xBB\xBFsk-after-a-bom\n";
  auto bom = AccessPolicy::Load("", dir + "/bom", "");
  ASSERT_TRUE(bom.ok());
  EXPECT_TRUE(bom->Authorized("/v1/models", "Bearer sk-after-a-bom"));
}

// Invariant 10: a client's key is not an operator's.
TEST(Access, AdminRoutesTakeOnlyAnOperatorsKey) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/keys") << "sk-client-key-0001\n";
  std::ofstream(dir + "/admin") << "# operators\nadm-operator-key-0001\n";
  auto p = AccessPolicy::Load("", dir + "/keys", "");
  ASSERT_TRUE(p.ok());
  // Without admin keys /admin/ is closed: a client key is refused as such.
  EXPECT_EQ(p->Check("/admin/drain", "Bearer sk-client-key-0001"), Access::kForbidden);
  EXPECT_EQ(p->Check("/admin/drain", ""), Access::kUnauthorized);
  EXPECT_EQ(AccessPolicy{}.Check("/admin/drain", ""), Access::kUnauthorized) << "closed on a server without keys";
  ASSERT_TRUE(p->LoadAdminKeys(dir + "/admin").ok());
  EXPECT_EQ(p->Check("/admin/drain", "Bearer adm-operator-key-0001"), Access::kAllowed);
  EXPECT_EQ(p->Check("/admin/drain", "bearer adm-operator-key-0001"), Access::kAllowed);
  EXPECT_EQ(p->Check("/admin/drain", "Bearer sk-client-key-0001"), Access::kForbidden);
  EXPECT_EQ(p->Check("/admin/drain", "Bearer adm-operator-key-000"), Access::kUnauthorized);
  EXPECT_EQ(p->Check("/admin/drain", "adm-operator-key-0001"), Access::kUnauthorized);  // not a bearer token
  // The operator's key is not a client's either.
  EXPECT_EQ(p->Check("/v1/models", "Bearer adm-operator-key-0001"), Access::kUnauthorized);
  EXPECT_EQ(p->Check("/v1/models", "Bearer sk-client-key-0001"), Access::kAllowed);
  // A key in both files, or a short one, is refused at load.
  auto both = AccessPolicy::Load("", dir + "/keys", "");
  std::ofstream(dir + "/shared") << "sk-client-key-0001\n";
  EXPECT_NE(both->LoadAdminKeys(dir + "/shared").message().find("also a client's"), std::string::npos);
  std::ofstream(dir + "/short") << "adm-short\n";
  EXPECT_NE(both->LoadAdminKeys(dir + "/short").message().find("at least 16"), std::string::npos);
  EXPECT_NE(both->LoadAdminKeys(dir + "/missing").message().find("--admin-key-file"), std::string::npos);
  // An admin key alone (an open API) still guards /admin/.
  AccessPolicy open;
  ASSERT_TRUE(open.LoadAdminKeys(dir + "/admin").ok());
  EXPECT_EQ(open.Check("/v1/models", ""), Access::kAllowed);
  EXPECT_EQ(open.Check("/admin/drain", ""), Access::kUnauthorized);
  EXPECT_EQ(open.Check("/admin/drain", "Bearer adm-operator-key-0001"), Access::kAllowed);
}

// Invariant 10: the tenant of a request's cached prefixes. Its key's by
// default (the same on a process that checks keys and one that only passes
// the header on: a router and its decode servers agree); a cache_salt names
// a shared namespace whatever the key; no token: the one shared namespace.
TEST(Access, ACacheSaltNamesTheTenantTheSameWayOnEveryProcess) {
  const uint64_t one = CacheSaltFor("Bearer sk-client-key-0001", std::nullopt);
  const uint64_t two = CacheSaltFor("Bearer sk-client-key-0002", std::nullopt);
  EXPECT_NE(one, 0u);
  EXPECT_NE(one, two);
  EXPECT_EQ(CacheSaltFor("Bearer sk-client-key-0001", std::nullopt), one);
  EXPECT_EQ(CacheSaltFor("bearer sk-client-key-0001", std::nullopt), one) << "the scheme is case-insensitive";
  EXPECT_EQ(CacheSaltFor("", std::nullopt), 0u);
  const uint64_t team = CacheSaltFor("Bearer sk-client-key-0001", std::string("team"));
  EXPECT_EQ(CacheSaltFor("Bearer sk-client-key-0002", std::string("team")), team);
  EXPECT_EQ(CacheSaltFor("", std::string("team")), team);
  EXPECT_NE(team, one);
  EXPECT_NE(CacheSaltFor("", std::string("sk-client-key-0001")), one) << "a salt is never a key's";
}

TEST(Access, CorsHeadersOnlyForTheConfiguredOrigin) {
  EXPECT_TRUE(AccessPolicy{}.CorsHeaders("https://evil.example", false).empty());
  AccessPolicy one;
  one.cors_origin = "https://app.example";
  EXPECT_TRUE(one.CorsHeaders("https://evil.example", true).empty());
  auto h = one.CorsHeaders("https://app.example", false);
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "https://app.example");
  EXPECT_EQ(h["Vary"], "Origin");
  EXPECT_EQ(h.count("Access-Control-Allow-Methods"), 0u);
  h = one.CorsHeaders("https://app.example", true);
  EXPECT_EQ(h["Access-Control-Allow-Headers"], "Authorization, Content-Type");
  AccessPolicy any;
  any.cors_origin = "*";
  EXPECT_EQ(any.CorsHeaders("https://anywhere.example", false)["Access-Control-Allow-Origin"], "*");
  EXPECT_TRUE(any.CorsHeaders("", false).empty());  // not a browser's cross-origin request
}

}  // namespace
}  // namespace tandem
