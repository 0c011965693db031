// The handoff end to end in one process, over the loopback transport: the
// prefill engine computes the prompt and writes every registered buffer into
// the decode engine's pages; the decode engine continues. The colocated
// generator is the oracle: outputs must match bit for bit — and the oracle
// must catch the production bug when it is switched on.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>

#include "model/numerics.h"
#include "prefill/prefill_server.h"

#include "runtime/generator.h"
#include "support/test_models.h"
#include "support/tiny_model.h"
#include "faults/faulty_connection.h"
#include "decode/handoff_receiver.h"
#include "transfer/handshake.h"
#include "transfer/loopback.h"
#include "transfer/ucx.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using faults::FaultPlan;  // the fault library (src/faults/)
using faults::FaultyConnection;
using tandem::testing::MakePresetModel;
using tandem::testing::PseudoRandomTokens;

AttentionOptions SparseAttention(CacheDType dtype, int64_t top_k) {
  AttentionOptions a;
  a.kind = AttentionKind::kSparse;
  a.index_k_dtype = dtype;
  a.top_k = top_k;
  return a;
}

// Two engines, one loopback network between them: the prefill engine
// (prefill/prefill_engine.h, the production class) and a decode side made of
// the receiver and a greedy continuation.
struct PrefillSide {
  int32_t chunk_size = 512;
  bool prefix_cache = true;
  bool unsafe_early_commit = false;  // the incident's fault, as a transport rule (faults/faulty_connection.h)
};

class HandoffHarness {
 public:
  // use_ucx: the two engines talk over UCX on 127.0.0.1 instead of loopback.
  HandoffHarness(const Model& model, const AttentionOptions& attention, LoopbackOptions net_options,
                 ReceiverOptions receiver_options, PrefillSide prefill, FaultPlan* faults = nullptr,
                 bool use_ucx = false)
      : model_(model),
        spec_(*MakeCacheSpec(model.config(), attention)),
        net_(std::make_shared<LoopbackNetwork>(net_options)),
        decode_transport_(MakeTransport(use_ucx)),
        prefill_transport_(MakeTransport(use_ucx)),
        region_(*decode_transport_->AllocateRegion(size_t(CacheLayout(spec_.registry, layers(), kPages).TotalBytes()))),
        decode_pool_(spec_.registry, layers(), kPages, region_.data),
        receiver_(decode_pool_, region_.key, nullptr, receiver_options) {
    PrefillOptions po;
    po.engine.attention = attention;
    po.engine.cache_tokens = kPages / 2 * kPageTokens;  // pools of different sizes: offsets are the decode pool's
    po.engine.chunk_size = prefill.chunk_size;
    po.engine.prefix_cache = prefill.prefix_cache;
    po.engine.threads = 2;
    po.peer_timeout = std::chrono::minutes(10);  // this decode side sends no heartbeats
    server_ = std::move(PrefillServer::Create(model, po, std::move(prefill_transport_))).value();
    prefill_ = &server_->engine();
    if (faults) plan_ = *faults;
    if (prefill.unsafe_early_commit) {
      plan_.unflushed_sources = prefill_->engine().BufferMemory(*spec_.registry.Find("index_k"));
    }
    PrefillServer::Wrap wrap;
    if (faults != nullptr || prefill.unsafe_early_commit) {
      wrap = [plan = plan_](std::shared_ptr<Connection> c) -> std::shared_ptr<Connection> {
        return std::make_shared<FaultyConnection>(std::move(c), plan);
      };
    }
    const std::string address = use_ucx ? "127.0.0.1:0" : "prefill";
    EXPECT_TRUE(server_->Listen(address, std::move(wrap)).ok());
    const std::string target = use_ucx ? "127.0.0.1:" + std::to_string(server_->port()) : "prefill";
    ConnectionHandlers dh;
    // The decode side acts on a Commit the moment it arrives, on the
    // transport's thread: exactly when an early commit bites.
    dh.on_message = [this](Connection&, std::vector<uint8_t> m) { OnMessage(m); };
    dh.on_close = [this](Connection&, const Status&) {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      receiver_.OnPeerClosed(1, Clock::now());
      cv_.notify_all();
    };
    auto c = decode_transport_->Connect(target, dh);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    to_prefill_ = *c;
    const Hello mine{"decode", decode_pool_.layout().Fingerprint() + ";" + AttentionFingerprint(spec_.attention),
                     WeightsIdentity(model), instance_, 0, {}, {}, {}, HandshakeNumerics()};
    EXPECT_TRUE(to_prefill_->Send(mine.Encode()).ok());
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, 10s, [&] { return hello_ || closed_; }) && hello_) << "no Hello from the prefill engine";
  }
  ~HandoffHarness() {
    server_->Stop();  // before the transports go
    // The transports' handlers point into this object: they go first.
    to_prefill_.reset();
    server_.reset();
    decode_transport_.reset();
  }

  int layers() const { return int(model_.config().n_layers); }

  std::unique_ptr<Transport> MakeTransport(bool ucx) {
    if (ucx) return std::move(UcxTransport::Create()).value();
    return std::make_unique<LoopbackTransport>(net_);
  }

  // One request through prefill -> handoff -> decode. Returns the generated
  // tokens, or the error that failed the handoff.
  StatusOr<std::vector<int32_t>> Run(uint64_t id, const std::vector<int32_t>& prompt, int n_tokens) {
    std::unique_lock<std::mutex> lock(mu_);
    TANDEM_ASSIGN_OR_RETURN(Destination d, receiver_.Begin(id, prompt, 1, Clock::now()));
    d.time_budget_ms = 60000;
    d.decode_instance_id = instance_;
    n_tokens_ = n_tokens;
    if (closed_) return Unavailable("the prefill engine closed the connection");
    TANDEM_RETURN_IF_ERROR(to_prefill_->Send(d.Encode()));
    EXPECT_TRUE(cv_.wait_for(lock, 20s, [&] { return !results_.empty() || closed_; }));
    if (results_.empty()) return Unavailable("the prefill engine closed the connection");
    auto result = std::move(results_.front());
    results_.pop_front();
    return result;
  }

  void OnMessage(const std::vector<uint8_t>& bytes) {
    auto type = PeekType(bytes);
    if (!type.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    switch (*type) {
      case MessageType::kHello:
        hello_ = true;
        break;
      case MessageType::kCommit:
        results_.push_back(OnCommitMessage(bytes));
        break;
      case MessageType::kAbort: {
        auto a = Abort::Decode(bytes);
        if (!a.ok()) return;
        (void)receiver_.StartAbort(a->handoff_id, a->code, a->reason, Clock::now());
        receiver_.OnAbortAck(a->handoff_id, 1);  // the prefill side flushed before failing it
        results_.push_back(Status(StatusCode::kAborted, "the prefill engine failed the handoff: " + a->reason));
        break;
      }
      default:
        return;
    }
    cv_.notify_all();
  }

  StatusOr<std::vector<int32_t>> OnCommitMessage(const std::vector<uint8_t>& bytes) {
    TANDEM_ASSIGN_OR_RETURN(Commit commit, Commit::Decode(bytes));
    TANDEM_ASSIGN_OR_RETURN(HandoffReceiver::Ready ready, receiver_.OnCommit(commit, 1, Clock::now()));
    return Continue(ready, n_tokens_);
  }

  // Decode side: greedy continuation from the committed pages.
  std::vector<int32_t> Continue(HandoffReceiver::Ready& r, int n_tokens) {
    ForwardPass fwd(model_, spec_, decode_threads_);
    Sampler sampler;
    std::vector<int32_t> seq = r.prompt, out = {r.first_token};
    seq.push_back(r.first_token);
    std::vector<int32_t> pages = r.pages;
    std::vector<float> logits;
    while (int(out.size()) < n_tokens) {
      const int64_t pos = int64_t(seq.size()) - 1;
      if (int64_t(pages.size()) * kPageTokens <= pos) pages.push_back(decode_pool_.Allocate(1)->at(0));
      SequenceChunk step{std::span<const int32_t>(&seq.back(), 1), pos, pages, false};
      logits.clear();
      EXPECT_TRUE(fwd.Run({&step, 1}, decode_pool_, &logits).ok());
      const int32_t t = sampler.Sample(logits, SamplingParams{}, seq, pos + 1);
      seq.push_back(t);
      out.push_back(t);
    }
    decode_pool_.Release(pages);
    return out;
  }

  std::vector<int32_t> Oracle(const std::vector<int32_t>& prompt, int n_tokens) {
    Generator gen(model_, spec_, threads_, 4096);
    GenerateOptions opt;
    opt.max_tokens = n_tokens;
    opt.ignore_eos = true;
    return gen.Run(prompt, opt, nullptr)->tokens;
  }

  // The prefill engine's counts once it has settled (its stats are published
  // after each step): waits, bounded, for `done` to hold.
  PrefillEngine::Stats PrefillStats(const std::function<bool(const PrefillEngine::Stats&)>& done) {
    const auto until = Clock::now() + 10s;
    PrefillEngine::Stats s = prefill_->stats();
    while (!done(s) && Clock::now() < until) {
      std::this_thread::yield();
      s = prefill_->stats();
    }
    return s;
  }

  PagePool& decode_pool() { return decode_pool_; }
  HandoffReceiver& receiver() { return receiver_; }

  static constexpr int64_t kPages = 64;

 private:
  const Model& model_;
  const CacheSpec spec_;
  ThreadPool threads_{2}, decode_threads_{2};
  int n_tokens_ = 0;
  const uint64_t instance_ = NewInstanceId();
  std::shared_ptr<LoopbackNetwork> net_;
  std::unique_ptr<Transport> decode_transport_, prefill_transport_;
  Region region_;
  PagePool decode_pool_;
  HandoffReceiver receiver_;
  FaultPlan plan_;
  std::unique_ptr<PrefillServer> server_;
  PrefillEngine* prefill_ = nullptr;  // server_'s
  std::shared_ptr<Connection> to_prefill_;
  std::mutex mu_;  // the receiver and what follows
  std::condition_variable cv_;
  bool hello_ = false, closed_ = false;
  std::deque<StatusOr<std::vector<int32_t>>> results_;
};

std::vector<std::vector<int32_t>> Prompts(const Model& m) {
  std::vector<std::vector<int32_t>> p;
  for (size_t len : {5, 64, 65, 200, 333}) p.push_back(PseudoRandomTokens(len, m.config().vocab_size, uint32_t(len)));
  return p;
}

// On the tiny llama model and on dsa-tiny (deepseek32: kv_latent + index_k).
class Handoff : public ::testing::TestWithParam<std::string> {};

TEST_P(Handoff, OutputsMatchTheColocatedOracleBitForBit) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  for (const AttentionOptions& attention :
       {AttentionOptions{}, SparseAttention(CacheDType::kFp8E4M3Scaled, 32), SparseAttention(CacheDType::kBF16, 32)}) {
    PrefillSide so;
    so.chunk_size = 100;  // several chunks: pages are streamed per chunk and layer
    HandoffHarness h(*m->model, attention, {}, {}, so);
    const auto baseline = h.decode_pool().accounting();
    uint64_t id = 1;
    for (const auto& prompt : Prompts(*m->model)) {
      auto got = h.Run(id++, prompt, 12);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, h.Oracle(prompt, 12)) << "prompt of " << prompt.size() << " tokens";
    }
    EXPECT_EQ(h.receiver().stats().committed, 5);
    EXPECT_EQ(h.receiver().stats().verified, 5);
    EXPECT_EQ(h.decode_pool().accounting(), baseline);
    // The prefill side keeps the full pages of what it computed (0+1+1+3+5)
    // and the partial last page of the four prompts that end inside one.
    const auto s = h.PrefillStats([](const auto& s) { return s.in_flight == 0 && s.cached_pages == 14; });
    EXPECT_EQ(s.cached_pages, 14);
    EXPECT_EQ(s.pages_in_use, 0);
  }
}

// The next round of a conversation re-sends the last: the prefill engine
// computes only past its cached prefix, sends the cached pages the decode
// side lacks as they are, and the output is still the oracle's.
TEST_P(Handoff, ThePrefillSidePrefixCacheComputesOnlyTheNewTokens) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  for (const AttentionOptions& attention : {AttentionOptions{}, SparseAttention(CacheDType::kBF16, 32)}) {
    PrefillSide so;
    so.chunk_size = 100;
    HandoffHarness h(*m->model, attention, {}, {}, so);
    auto prompt = PseudoRandomTokens(300, m->model->config().vocab_size, 9);
    auto first = h.Run(1, prompt, 8);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(*first, h.Oracle(prompt, 8));
    EXPECT_EQ(h.PrefillStats([](const auto& s) { return s.in_flight == 0; }).cached_tokens, 0);
    const auto more = PseudoRandomTokens(90, m->model->config().vocab_size, 10);
    prompt.insert(prompt.end(), more.begin(), more.end());
    auto second = h.Run(2, prompt, 8);
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_EQ(*second, h.Oracle(prompt, 8));
    EXPECT_EQ(h.PrefillStats([](const auto& s) { return s.cached_tokens == 300; }).cached_tokens, 300)
        << "the first prompt was reused to the token (four full pages and 44 rows of a partial one)";
  }
}

TEST_P(Handoff, OverUcxOutputsMatchTheOracle) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  for (const AttentionOptions& attention :
       {SparseAttention(CacheDType::kFp8E4M3Scaled, 32), SparseAttention(CacheDType::kBF16, 32)}) {
    PrefillSide so;
    so.chunk_size = 100;
    HandoffHarness h(*m->model, attention, {}, {}, so, nullptr, /*use_ucx=*/true);
    uint64_t id = 1;
    for (const auto& prompt : Prompts(*m->model)) {
      auto got = h.Run(id++, prompt, 12);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, h.Oracle(prompt, 12)) << "prompt of " << prompt.size() << " tokens";
    }
    EXPECT_EQ(h.receiver().stats().committed, 5);
  }
}

TEST_P(Handoff, UnsafeEarlyCommitIsCaughtByTheOracleAndByDigests) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  const auto attention = SparseAttention(CacheDType::kBF16, 16);
  PrefillSide unsafe;
  unsafe.unsafe_early_commit = true;
  const LoopbackOptions slow_puts{50ms, 0us};
  {
    // No verification: the decode side runs on stale index-K; the oracle sees it.
    ReceiverOptions off;
    off.verify = VerifyMode::kOff;
    HandoffHarness h(*m->model, attention, slow_puts, off, unsafe);
    int mismatches = 0;
    uint64_t id = 1;
    for (const auto& prompt : Prompts(*m->model)) {
      auto got = h.Run(id++, prompt, 16);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      mismatches += *got != h.Oracle(prompt, 16);
    }
    EXPECT_GT(mismatches, 0) << "the oracle must catch reads of index-K before it landed";
  }
  {
    // Verification on: every early commit is rejected, no tokens are served.
    HandoffHarness h(*m->model, attention, slow_puts, {}, unsafe);
    int failed = 0;
    uint64_t id = 1;
    for (const auto& prompt : Prompts(*m->model)) {
      auto got = h.Run(id++, prompt, 4);
      if (!got.ok()) {
        ++failed;
        EXPECT_NE(got.status().message().find("index_k digest mismatch"), std::string::npos) << got.status().ToString();
      }
    }
    EXPECT_GT(failed, 0);
    EXPECT_EQ(h.receiver().stats().digest_mismatches, failed);
  }
}

TEST_P(Handoff, BitFlipsAreDetectedAndNeverServed) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  FaultPlan flips;
  flips.bit_flip_rate = 0.2;
  flips.seed = 11;
  HandoffHarness h(*m->model, SparseAttention(CacheDType::kFp8E4M3Scaled, 32), {}, {}, {}, &flips);
  const auto baseline = h.decode_pool().accounting();
  int failed = 0;
  uint64_t id = 1;
  for (int round = 0; round < 3; ++round) {
    for (const auto& prompt : Prompts(*m->model)) {
      auto got = h.Run(id++, prompt, 4);
      if (got.ok()) {
        EXPECT_EQ(*got, h.Oracle(prompt, 4)) << "a handoff that passed verification must be exact";
      } else {
        ++failed;
        EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
      }
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_EQ(h.receiver().stats().digest_mismatches, failed);
  EXPECT_EQ(h.decode_pool().accounting(), baseline);
}

TEST_P(Handoff, AbortQuarantinesUntilAckAndPeerCloseFreesEverything) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  HandoffHarness h(*m->model, {}, {}, {}, {});
  const auto baseline = h.decode_pool().accounting();
  const auto prompt = PseudoRandomTokens(300, m->model->config().vocab_size, 3);
  ASSERT_TRUE(h.receiver().Begin(7, prompt, 1, Clock::now()).ok());
  ASSERT_TRUE(h.receiver().Begin(8, prompt, 2, Clock::now()).ok());
  EXPECT_EQ(h.decode_pool().reserved_pages(), 10);
  auto abort = h.receiver().StartAbort(7, AbortCode::kCancelled, "client gone", Clock::now());
  ASSERT_TRUE(abort.ok());
  EXPECT_EQ(abort->code, AbortCode::kCancelled);  // what goes to the peer says why
  EXPECT_EQ(h.receiver().stats().quarantined_pages, 5);
  EXPECT_EQ(h.decode_pool().reserved_pages(), 10) << "no page is freed before the sender acknowledges";
  h.receiver().OnAbortAck(7, 2);  // not its peer: ignored
  EXPECT_EQ(h.receiver().stats().quarantined_pages, 5);
  h.receiver().OnAbortAck(7, 1);
  h.receiver().OnAbortAck(7, 1);  // duplicates are harmless
  EXPECT_EQ(h.receiver().stats().quarantined_pages, 0);
  EXPECT_EQ(h.decode_pool().reserved_pages(), 5);
  ASSERT_TRUE(h.receiver().StartAbort(8, AbortCode::kDeadline, "deadline", Clock::now()).ok());
  h.receiver().OnPeerClosed(2, Clock::now());  // the ack never comes; the connection closes
  EXPECT_EQ(h.decode_pool().accounting(), baseline);
  EXPECT_EQ(h.receiver().open_handoffs(), 0u);
  EXPECT_FALSE(h.receiver().StartAbort(8, AbortCode::kDeadline, "again", Clock::now()).ok());
}

// The sender committed before our Abort reached it: the Commit (sent after
// its flush) must release the quarantine, or those pages leak until the
// connection closes (seen in CI as 2 pages stuck after an abort storm).
TEST_P(Handoff, ACommitThatCrossesOurAbortReleasesTheQuarantine) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  HandoffHarness h(*m->model, {}, {}, {}, {});
  const auto baseline = h.decode_pool().accounting();
  const auto prompt = PseudoRandomTokens(300, m->model->config().vocab_size, 3);
  ASSERT_TRUE(h.receiver().Begin(9, prompt, 1, Clock::now()).ok());
  ASSERT_TRUE(h.receiver().StartAbort(9, AbortCode::kCancelled, "client gone", Clock::now()).ok());
  EXPECT_EQ(h.receiver().stats().quarantined_pages, 5);
  Commit late;
  late.handoff_id = 9;
  auto r = h.receiver().OnCommit(late, 1, Clock::now());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("already aborted"), std::string::npos);
  EXPECT_EQ(h.receiver().stats().quarantined_pages, 0);
  EXPECT_EQ(h.decode_pool().accounting(), baseline);
  EXPECT_EQ(h.receiver().open_handoffs(), 0u);
}

// Regression: the Commit's first token was never range-checked before it
// joined the decode batch, and the next step's validation failed every
// request in that batch. Now a bad Commit fails its own handoff only, and one
// from another peer changes nothing at all.
TEST_P(Handoff, ABadCommitFailsOnlyItsOwnHandoff) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  ReceiverOptions ro;
  ro.vocab_size = m->model->config().vocab_size;
  HandoffHarness h(*m->model, {}, {}, ro, {});
  const auto baseline = h.decode_pool().accounting();
  const auto prompt = PseudoRandomTokens(300, m->model->config().vocab_size, 3);
  auto d11 = h.receiver().Begin(11, prompt, 1, Clock::now());
  auto d12 = h.receiver().Begin(12, prompt, 1, Clock::now());
  ASSERT_TRUE(d11.ok() && d12.ok());
  Commit bad;
  bad.handoff_id = 11;
  bad.pages_digest = PagesDigest(d11->pages);
  bad.first_token = int32_t(ro.vocab_size);  // one past the vocabulary
  auto r = h.receiver().OnCommit(bad, 1, Clock::now());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos) << r.status().message();
  EXPECT_EQ(h.receiver().open_handoffs(), 1u) << "only handoff 11 ended";
  Commit other_reservation;
  other_reservation.handoff_id = 12;
  other_reservation.pages_digest = PagesDigest(d11->pages);
  r = h.receiver().OnCommit(other_reservation, 1, Clock::now());
  EXPECT_NE(r.status().message().find("another page reservation"), std::string::npos) << r.status().message();
  EXPECT_EQ(h.receiver().open_handoffs(), 0u);
  EXPECT_EQ(h.decode_pool().accounting(), baseline);
  auto d13 = h.receiver().Begin(13, prompt, 1, Clock::now());
  ASSERT_TRUE(d13.ok());
  Commit foreign;
  foreign.handoff_id = 13;
  foreign.pages_digest = PagesDigest(d13->pages);
  r = h.receiver().OnCommit(foreign, 2, Clock::now());  // peer 2 never served handoff 13
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(h.receiver().open_handoffs(), 1u) << "a commit from another peer changes nothing";
  ASSERT_TRUE(h.receiver().StartAbort(13, AbortCode::kStopping, "test over", Clock::now()).ok());
  h.receiver().OnAbortAck(13, 1);
  EXPECT_EQ(h.decode_pool().accounting(), baseline);
  // A real handoff after all that is exact.
  auto got = h.Run(14, prompt, 4);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
}

TEST_P(Handoff, PeerDeathMidTransferFailsCleanly) {
  auto m = MakePresetModel(GetParam(), TensorType::kF32);
  FaultPlan death;
  // Mid-transfer on both models: a 300-token prompt is at least one put per
  // layer and buffer (runs of adjacent pages coalesce), as few as 6 on
  // dsa-tiny's 3 layers x 2 buffers.
  death.die_after_puts = 3;
  HandoffHarness h(*m->model, {}, {}, {}, {}, &death);
  const auto baseline = h.decode_pool().accounting();
  auto got = h.Run(1, PseudoRandomTokens(300, m->model->config().vocab_size, 5), 4);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  EXPECT_EQ(h.decode_pool().accounting(), baseline);
  // Nothing of the prefill pool is held beyond its prefix cache (the pages it
  // computed before the peer died are correct, and may be cached).
  EXPECT_EQ(h.PrefillStats([](const auto& s) { return s.in_flight == 0 && s.pages_in_use == 0; }).pages_in_use, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, Handoff, tandem::testing::kTestModels, tandem::testing::ModelInstanceName);

}  // namespace
}  // namespace tandem::transfer
