// The check that the nodes reach each other on the chosen interface; see network.h.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pmix.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dist/network.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kAddressKey = "trainer.network.address";
constexpr const char* kVerdictKey = "trainer.network.verdict";

// A socket, closed at scope exit.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

sockaddr_in socket_address(const std::string& address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  return a;
}

// A listening socket on `address` (any free port); the port it got.
std::pair<Socket, int> listen_on(const std::string& address) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = socket_address(address, 0);
  socklen_t len = sizeof a;
  CHECK(s.fd() >= 0 && ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::listen(s.fd(), SOMAXCONN) == 0 &&
            ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&a), &len) == 0,
        "the network check cannot listen on {}: {}", address, std::strerror(errno));
  return {std::move(s), ntohs(a.sin_port)};
}

// PMIx for the length of the check (it counts its users: MPI keeps its own).
class Pmix {
 public:
  Pmix() { ok_ = PMIx_Init(&me_, nullptr, 0) == PMIX_SUCCESS; }
  ~Pmix() {
    if (ok_) PMIx_Finalize(nullptr, 0);
  }
  Pmix(const Pmix&) = delete;
  Pmix& operator=(const Pmix&) = delete;
  bool ok() const { return ok_; }

  // Publishes `value` under `key` to every rank, and waits for every rank's (timeout_s).
  void exchange(const char* key, const std::string& value, double timeout_s) {
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = const_cast<char*>(value.c_str());
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &v);
    if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
    pmix_proc_t all;
    PMIX_PROC_LOAD(&all, me_.nspace, PMIX_RANK_WILDCARD);
    pmix_info_t info[2];
    bool collect = true;
    int seconds = std::max(1, int(timeout_s));
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
    if (rc == PMIX_SUCCESS) rc = PMIx_Fence(&all, 1, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    CHECK(rc == PMIX_SUCCESS, "the network check's exchange through PMIx failed: {}",
          PMIx_Error_string(rc));
  }

  // Rank `rank`'s string under `key`.
  std::string get(int rank, const char* key) {
    pmix_proc_t p;
    PMIX_PROC_LOAD(&p, me_.nspace, uint32_t(rank));
    pmix_value_t* v = nullptr;
    const pmix_status_t rc = PMIx_Get(&p, key, nullptr, 0, &v);
    CHECK(rc == PMIX_SUCCESS && v && v->type == PMIX_STRING,
          "the network check cannot read rank {}'s {} through PMIx: {}", rank, key,
          PMIx_Error_string(rc));
    std::string out = v->data.string ? v->data.string : "";
    PMIX_VALUE_RELEASE(v);
    return out;
  }

 private:
  pmix_proc_t me_{};
  bool ok_ = false;
};

struct Endpoint {
  std::string host, interface, address;
  int port = 0;  // 0: not its node's first rank
  int rank = 0;
};

Endpoint parse_endpoint(int rank, const std::string& host, const std::string& text) {
  Endpoint e{host, "", "", 0, rank};
  char iface[128] = {}, addr[64] = {};
  if (std::sscanf(text.c_str(), "%127s %63s %d", iface, addr, &e.port) == 3) {
    e.interface = iface;
    e.address = addr;
  }
  return e;
}

// Connects to every endpoint at once (non-blocking) from `from`; the first failure, or nothing.
std::optional<std::string> connect_all(const Endpoint& from, const std::vector<Endpoint>& to,
                                       double timeout_s) {
  std::vector<Socket> sockets;
  std::vector<pollfd> fds;
  std::vector<const Endpoint*> targets;
  auto failure = [&](const Endpoint& e, const std::string& why) {
    return fmt::format("{} (rank {}, {} {}) cannot reach {} (rank {}) at {}:{} on its {}: {}",
                       from.host, from.rank, from.interface, from.address, e.host, e.rank,
                       e.address, e.port, e.interface, why);
  };
  for (const Endpoint& e : to) {
    if (e.address.empty()) return failure(e, "it published no address");
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in local = socket_address(from.address, 0), remote = socket_address(e.address, e.port);
    if (s.fd() < 0 || ::bind(s.fd(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
      return failure(e, std::strerror(errno));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0 &&
        errno != EINPROGRESS)
      return failure(e, std::strerror(errno));
    fds.push_back({s.fd(), POLLOUT, 0});
    sockets.push_back(std::move(s));
    targets.push_back(&e);
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  size_t pending = fds.size();
  while (pending > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    if (::poll(fds.data(), fds.size(), int(left.count())) < 0 && errno != EINTR)
      THROW_ERROR("the network check's poll() failed on {}: {}", from.host, std::strerror(errno));
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return failure(*targets[i], std::strerror(err));
      fds[i].fd = -1;  // connected: poll ignores it from now on
      --pending;
    }
  }
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].fd >= 0)
      return failure(*targets[i], fmt::format("no answer within {:.0f} s", timeout_s));
  return std::nullopt;
}

// The first rank of each of the next kProbedNodes nodes after `me`'s, in rank order around the
// ring (every other node's, on fewer nodes): each node checks its successors, so every node is
// reached by some other, with a bounded number of sockets per node on any cluster.
std::vector<Endpoint> next_nodes(const std::vector<Endpoint>& all, const Endpoint& me) {
  constexpr size_t kProbedNodes = 64;
  std::vector<Endpoint> out;
  const size_t n = all.size();
  for (size_t k = 1; k < n && out.size() < kProbedNodes; ++k) {
    const Endpoint& e = all[(size_t(me.rank) + k) % n];
    if ((e.port > 0 || e.address.empty()) && e.host != me.host) out.push_back(e);
  }
  return out;
}

}  // namespace

void check_network(const NetworkChoice& choice, const LaunchInfo& launch, double timeout_s) {
  if (launch.nodes <= 1 || choice.address.empty()) return;
  Pmix pmix;
  if (!pmix.ok()) {
    log::warn(
        "the network check between nodes is skipped: no PMIx (launch with mpirun or srun "
        "--mpi=pmix)");
    return;
  }
  const bool first_of_node = launch.local_rank == 0;
  std::optional<std::pair<Socket, int>> listener;
  if (first_of_node) listener.emplace(listen_on(choice.address));
  pmix.exchange(
      kAddressKey,
      fmt::format("{} {} {}", choice.interface, choice.address, listener ? listener->second : 0),
      timeout_s);
  std::vector<Endpoint> all;
  for (int r = 0; r < launch.world_size; ++r)
    all.push_back(parse_endpoint(r, pmix.get(r, PMIX_HOSTNAME), pmix.get(r, kAddressKey)));
  const Endpoint& me = all[size_t(launch.rank)];
  // A connection inside a cluster takes milliseconds; one that has not come in 30 s will not.
  // The other ranks wait for this one's verdict that much longer.
  const double connect_s = std::min(timeout_s / 2, 30.0);
  std::optional<std::string> failure;
  if (first_of_node) failure = connect_all(me, next_nodes(all, me), connect_s);
  pmix.exchange(kVerdictKey, failure.value_or(""), timeout_s + connect_s);
  int failed = 0;
  std::string first;
  for (int r = 0; r < launch.world_size; ++r)
    if (std::string v = pmix.get(r, kVerdictKey); !v.empty()) {
      ++failed;
      if (first.empty()) first = v;
    }
  if (failed > 0)
    THROW_ERROR(
        "the network check between nodes failed: {}{}; the collectives would use {} ({}): set "
        "dist.interface to the interface the nodes reach each other on",
        first,
        failed > 1 ? fmt::format(" (and {} more node(s) cannot reach others)", failed - 1)
                   : std::string(),
        choice.setting, choice.why);
}

}  // namespace trainer::dist
