#include "faults/faulty_connection.h"

#include "common/env.h"
#include "common/splitmix.h"
#include "transfer/messages.h"

namespace tandem::faults {

FaultyConnection::FaultyConnection(std::shared_ptr<Connection> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(plan) {
  if (plan_.put_delay.count() > 0 || !plan_.unflushed_sources.empty()) thread_ = std::thread([this] { RunDelayed(); });
}

FaultyConnection::~FaultyConnection() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool FaultyConnection::Draw(double rate) {
  if (rate <= 0) return false;
  const uint64_t h = SplitMix64(plan_.seed ^ SplitMix64(draws_++));
  return double(h >> 11) * 0x1.0p-53 < rate;
}

Status FaultyConnection::Put(const void* src, size_t bytes, const RemoteKey& key, uint64_t offset) {
  UniqueLock lock(mu_);
  if (plan_.die_after_puts >= 0 && puts_ >= plan_.die_after_puts) {
    lock.Unlock();
    inner_->Close();
    return Unavailable("injected peer death");
  }
  ++puts_;
  const bool unflushed = Unflushed(src);
  if (bytes > 0 && Draw(plan_.bit_flip_rate)) {
    const uint8_t* p = static_cast<const uint8_t*>(src);
    corrupted_.emplace_back(p, p + bytes);
    const uint64_t bit = SplitMix64(plan_.seed + uint64_t(puts_)) % (bytes * 8);
    corrupted_.back()[bit / 8] ^= uint8_t(1u << (bit % 8));
    src = corrupted_.back().data();
    ++flipped_;
  }
  if (unflushed) {
    const uint8_t* p = static_cast<const uint8_t*>(src);
    // Its own copy: the sender may reuse its pages, believing them flushed.
    auto copy = std::make_shared<std::vector<uint8_t>>(p, p + bytes);
    // Held until a Commit goes out after it (and overtakes it), then put_delay more.
    late_.push_back({Clock::time_point::max(), copy->data(), bytes, key, offset, copy});
    return Status::Ok();
  }
  if (plan_.put_delay.count() > 0) {
    delayed_.push_back({Env::Default().Now() + plan_.put_delay, src, bytes, key, offset, nullptr});
    cv_.notify_all();
    return Status::Ok();
  }
  lock.Unlock();
  return inner_->Put(src, bytes, key, offset);
}

bool FaultyConnection::Unflushed(const void* src) const {
  const auto* p = static_cast<const uint8_t*>(src);
  for (auto [begin, size] : plan_.unflushed_sources) {
    if (p >= begin && p < begin + size) return true;
  }
  return false;
}

void FaultyConnection::RunDelayed() {
  UniqueLock lock(mu_);
  while (!stop_) {
    if (delayed_.empty() && late_.empty()) {
      cv_.wait(lock.native());
      continue;
    }
    // The earlier of the two queues' fronts.
    const bool late = delayed_.empty() || (!late_.empty() && late_.front().ready < delayed_.front().ready);
    std::deque<DelayedPut>& queue = late ? late_ : delayed_;
    if (queue.front().ready == Clock::time_point::max()) {
      cv_.wait(lock.native());  // held until a message goes out
      continue;
    }
    if (Env::Default().Now() < queue.front().ready) {
      cv_.wait_until(lock.native(), queue.front().ready);
      continue;
    }
    DelayedPut put = queue.front();
    const uint64_t cleared = clears_;
    lock.Unlock();
    Status st = inner_->Put(put.src, put.bytes, put.key, put.offset);
    lock.Lock();
    if (!st.ok() && delayed_error_.ok() && !late) delayed_error_ = st;
    if (put.owned) posted_copies_.push_back(std::move(put.owned));  // until a flush covers it
    // Close() may have cleared the queue meanwhile: the front is then another put.
    if (clears_ == cleared) queue.pop_front();
    cv_.notify_all();
  }
}

Status FaultyConnection::Flush(Clock::time_point deadline) {
  if (plan_.flush_never_confirms) return Status(StatusCode::kDeadlineExceeded, "flush did not confirm (injected fault)");
  size_t covered = 0;  // unflushed puts' copies posted before this flush: it covers them
  {
    UniqueLock lock(mu_);
    if (!cv_.wait_until(lock.native(), deadline, [&]() REQUIRES(mu_) { return delayed_.empty() || stop_; })) {
      return Status(StatusCode::kDeadlineExceeded, "flush did not complete before its deadline");
    }
    if (!delayed_error_.ok()) return delayed_error_;
    covered = posted_copies_.size();
  }
  TANDEM_RETURN_IF_ERROR(inner_->Flush(deadline));
  MutexLock lock(mu_);
  for (; covered > 0 && !posted_copies_.empty(); --covered) posted_copies_.pop_front();
  return Status::Ok();
}

Status FaultyConnection::Send(std::vector<uint8_t> message) {
  // The header alone: a sealed message (transfer/message_auth.h) carries its
  // trailer after the framed bytes.
  const auto header = DecodeHeader(message);
  const bool commit = !plan_.unflushed_sources.empty() && header.ok() && header->type == MessageType::kCommit;
  std::vector<std::vector<uint8_t>> out;
  {
    MutexLock lock(mu_);
    // The wedge counts from the handshake on, so when it starts does not
    // depend on whether a heartbeat went out before the peer's Hello arrived.
    if (header.ok() && header->type == MessageType::kHello) hello_sent_ = true;
    if (plan_.drop_messages_after >= 0 && hello_sent_ && messages_sent_++ >= plan_.drop_messages_after) {
      return Status::Ok();
    }
    if (Draw(plan_.drop_message_rate)) return Status::Ok();
    const bool duplicate = Draw(plan_.duplicate_message_rate);
    if (plan_.reorder_messages && !holding_) {
      held_message_ = std::move(message);
      holding_ = true;
      return Status::Ok();
    }
    out.push_back(message);
    if (duplicate) out.push_back(message);
    if (holding_) {
      out.push_back(std::move(held_message_));
      holding_ = false;
    }
  }
  for (auto& m : out) TANDEM_RETURN_IF_ERROR(inner_->Send(std::move(m)));
  if (commit) ReleaseLatePuts();
  return Status::Ok();
}

void FaultyConnection::ReleaseLatePuts() {
  MutexLock lock(mu_);
  const auto delay = plan_.put_delay.count() > 0 ? plan_.put_delay : std::chrono::microseconds(20000);
  for (DelayedPut& p : late_) {
    if (p.ready == Clock::time_point::max()) p.ready = Env::Default().Now() + delay;
  }
  cv_.notify_all();
}

void FaultyConnection::Close() {
  inner_->Close();
  MutexLock lock(mu_);
  delayed_.clear();
  late_.clear();
  ++clears_;
  cv_.notify_all();
}

int64_t FaultyConnection::flipped_puts() const {
  MutexLock lock(mu_);
  return flipped_;
}

}  // namespace tandem::faults
