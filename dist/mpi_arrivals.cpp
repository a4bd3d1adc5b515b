// Arrival notices and pings; see mpi_arrivals.h.
#include "dist/mpi_arrivals.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace trainer::dist {

namespace {

constexpr int kArriveTag = 7;
constexpr int kPingTag = 9;
constexpr int kAnswerTag = 10;

// Tests `r` without blocking; true when it completed.
bool completed(MPI_Request& r, MPI_Status* status = MPI_STATUS_IGNORE) {
  int flag = 0;
  return r != MPI_REQUEST_NULL && MPI_Test(&r, &flag, status) == MPI_SUCCESS && flag;
}

void cancel(MPI_Request& r) {
  if (r == MPI_REQUEST_NULL) return;
  MPI_Cancel(&r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

}  // namespace

MpiArrivals::MpiArrivals(MPI_Comm comm, int rank, int size)
    : comm_(comm), rank_(rank), size_(size) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (size_ <= kAllToAll) {
      targets_.push_back(p);
      sources_.push_back(p);
    } else if (rank_ == 0) {
      sources_.push_back(p);
    } else if (p == 0) {
      targets_.push_back(p);
    }
  }
}

void MpiArrivals::start() {
  if (started_) return;
  started_ = true;
  arrived_.assign(size_t(size_), -1);
  arrive_buf_.assign(size_t(size_), -1);
  arrive_recv_.assign(size_t(size_), MPI_REQUEST_NULL);
  answered_.assign(size_t(size_), 0);
  answer_buf_.assign(size_t(size_), 0);
  answer_recv_.assign(size_t(size_), MPI_REQUEST_NULL);
  for (int p : sources_)
    MPI_Irecv(&arrive_buf_[size_t(p)], 1, MPI_INT64_T, p, kArriveTag, comm_,
              &arrive_recv_[size_t(p)]);
  MPI_Irecv(&ping_in_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kPingTag, comm_, &ping_recv_);
}

void MpiArrivals::announce(int64_t seq) {
  send(seq, targets_, kArriveTag);
}

void MpiArrivals::send(int64_t value, const std::vector<int>& to, int tag) {
  auto s = std::make_unique<PendingSend>();
  s->value = value;
  for (int p : to) {
    s->reqs.emplace_back();
    MPI_Isend(&s->value, 1, MPI_INT64_T, p, tag, comm_, &s->reqs.back());
  }
  sends_.push_back(std::move(s));
}

void MpiArrivals::poll() {
  if (!started_) return;
  for (int p : sources_) {
    MPI_Request& r = arrive_recv_[size_t(p)];
    while (completed(r)) {
      arrived_[size_t(p)] = std::max(arrived_[size_t(p)], arrive_buf_[size_t(p)]);
      MPI_Irecv(&arrive_buf_[size_t(p)], 1, MPI_INT64_T, p, kArriveTag, comm_, &r);
    }
    MPI_Request& a = answer_recv_[size_t(p)];
    while (completed(a)) {  // answers to older rounds too: the receive stays posted
      answered_[size_t(p)] = std::max(answered_[size_t(p)], answer_buf_[size_t(p)]);
      MPI_Irecv(&answer_buf_[size_t(p)], 1, MPI_INT64_T, p, kAnswerTag, comm_, &a);
    }
  }
  MPI_Status status;
  while (completed(ping_recv_, &status)) {  // a peer asks: answer with its round
    send(ping_in_, {status.MPI_SOURCE}, kAnswerTag);
    MPI_Irecv(&ping_in_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kPingTag, comm_, &ping_recv_);
  }
  drain_sends();
}

void MpiArrivals::drain_sends() {
  while (!sends_.empty()) {
    int flag = 0;
    auto& s = *sends_.front();
    MPI_Testall(int(s.reqs.size()), s.reqs.data(), &flag, MPI_STATUSES_IGNORE);
    if (!flag) break;
    sends_.pop_front();
  }
}

void MpiArrivals::ping(int64_t seq) {
  start();
  if (seq == pinged_seq_) return;
  pinged_seq_ = seq;
  ++ping_round_;
  for (int p : sources_) {
    MPI_Request& a = answer_recv_[size_t(p)];
    if (a == MPI_REQUEST_NULL)
      MPI_Irecv(&answer_buf_[size_t(p)], 1, MPI_INT64_T, p, kAnswerTag, comm_, &a);
  }
  send(ping_round_, sources_, kPingTag);
}

std::vector<int> MpiArrivals::missing(int64_t seq) const {
  std::vector<int> out;
  for (int p : sources_)
    if (arrived_.empty() || arrived_[size_t(p)] < seq) out.push_back(p);
  return out;
}

std::vector<int> MpiArrivals::silent() const {
  std::vector<int> out;
  if (ping_round_ == 0) return out;
  for (int p : sources_)
    if (answered_[size_t(p)] < ping_round_) out.push_back(p);
  return out;
}

void MpiArrivals::shutdown() {
  if (!started_) return;
  for (MPI_Request& r : arrive_recv_) cancel(r);
  for (MPI_Request& r : answer_recv_) cancel(r);
  cancel(ping_recv_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!sends_.empty() && std::chrono::steady_clock::now() < deadline) {
    drain_sends();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (auto& s : sends_)
    for (MPI_Request& r : s->reqs)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  sends_.clear();
}

}  // namespace trainer::dist
