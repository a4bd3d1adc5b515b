// Choosing the network interface; see network.h. The check between nodes is in
// network_check.cpp.
#include "dist/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "runtime/error.h"

namespace trainer::dist {

// Note [Choosing the network]
// Open MPI's TCP transport uses every interface it finds unless told otherwise, and a node
// often has several: a management network, a container bridge, a link that reaches no other
// node. Its first message over one that does not reach the peer ends the job with "Unable to
// connect to the peer" at some collective, or waits out TCP's timeouts. So the trainer chooses
// before MPI_Init (dist.interface; under "auto" the launcher's own setting, else the interface
// holding the address this host's name resolves to, which is the one the cluster's other
// nodes know it by, else that of the default route), tells Open MPI and NCCL, logs it with each
// rank's host, and checks that the nodes reach each other on it before the first collective.

namespace {

std::string getenv_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The address `host` resolves to (IPv4), or "".
std::string resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return "";
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(res);
  return text;
}

// The interface of the default IPv4 route (/proc/net/route), or "".
std::string default_route_interface() {
  std::ifstream in("/proc/net/route");
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, destination;
    if (fields >> name >> destination && destination == "00000000") return name;
  }
  return "";
}

uint32_t ipv4(const std::string& text) {
  in_addr a{};
  return ::inet_pton(AF_INET, text.c_str(), &a) == 1 ? ntohl(a.s_addr) : 0;
}

// Whether `text` is an IPv4 CIDR range ("10.0.0.0/16"); its base and prefix if so.
bool parse_cidr(const std::string& text, uint32_t& base, int& prefix) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return false;
  in_addr a{};
  if (::inet_pton(AF_INET, text.substr(0, slash).c_str(), &a) != 1) return false;
  char* end = nullptr;
  const long p = std::strtol(text.c_str() + slash + 1, &end, 10);
  if (!end || end == text.c_str() + slash + 1 || *end != '\0' || p < 0 || p > 32) return false;
  base = ntohl(a.s_addr);
  prefix = int(p);
  return true;
}

}  // namespace

void check_interface_setting(const std::string& setting, const std::string& why) {
  uint32_t base = 0;
  int prefix = 0;
  USAGE_CHECK(setting.find('/') == std::string::npos || parse_cidr(setting, base, prefix),
              "{} {}: not a CIDR range (an IPv4 address, '/', and a prefix of 0 to 32 bits, like "
              "10.0.0.0/16)",
              why, setting);
}

namespace {

// The first of this host's interfaces that `setting` (a name or a CIDR range) selects.
const Interface* find_interface(const std::string& setting, const std::vector<Interface>& all) {
  uint32_t base = 0;
  int prefix = 0;
  const bool cidr = parse_cidr(setting, base, prefix);
  const uint32_t mask = prefix == 0 ? 0 : ~uint32_t(0) << (32 - prefix);
  for (const Interface& i : all)
    if (cidr ? (ipv4(i.address) & mask) == (base & mask) : i.name == setting) return &i;
  return nullptr;
}

NetworkChoice chosen(const std::string& setting, const Interface& i, std::string why) {
  return {setting, i.name, i.address, std::move(why)};
}

// The choice of `setting`, checked against this host's interfaces.
NetworkChoice checked(const std::string& setting, const LaunchInfo& launch, const NetworkEnv& env,
                      const std::string& why) {
  check_interface_setting(setting, why);
  const bool range = setting.find('/') != std::string::npos;
  const Interface* i = find_interface(setting, env.interfaces);
  const std::string where = fmt::format("{} (rank {})", env.host, launch.rank);
  if (!i)
    throw UsageError(
        fmt::format("{} {}: {} has {} (it has {}); name one every node has, or a CIDR range of the "
                    "cluster's network (dist.interface: 10.0.0.0/16)",
                    why, setting, where, range ? "no interface in that range" : "no such interface",
                    describe(env.interfaces)));
  if (!i->up)
    throw UsageError(
        fmt::format("{} {}: interface {} is down on {}", why, setting, i->name, where));
  if (i->loopback && launch.nodes > 1)
    throw UsageError(fmt::format(
        "{} {}: {} is this host's loopback interface, but the job's {} ranks span {} nodes, "
        "which it cannot reach; choose one of {}'s other interfaces ({})",
        why, setting, i->name, launch.world_size, launch.nodes, env.host,
        describe(env.interfaces)));
  return chosen(setting, *i, why);
}

}  // namespace

std::vector<Interface> host_interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                sizeof text);
    const uint32_t mask =
        a->ifa_netmask
            ? ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr)
            : 0;
    out.push_back({a->ifa_name, text, std::popcount(mask), (a->ifa_flags & IFF_LOOPBACK) != 0,
                   (a->ifa_flags & IFF_UP) != 0});
  }
  ::freeifaddrs(list);
  return out;
}

std::string describe(const std::vector<Interface>& interfaces) {
  std::string out;
  for (const Interface& i : interfaces)
    out += fmt::format("{}{} {}/{}{}", out.empty() ? "" : ", ", i.name, i.address, i.prefix,
                       i.up ? "" : " (down)");
  return out.empty() ? "no IPv4 interface" : out;
}

NetworkEnv network_env() {
  NetworkEnv env;
  env.host = host_name();
  env.interfaces = host_interfaces();
  env.host_address = resolve(env.host);
  env.route_interface = default_route_interface();
  env.launcher_include = getenv_or_empty("OMPI_MCA_btl_tcp_if_include");
  env.launcher_exclude = getenv_or_empty("OMPI_MCA_btl_tcp_if_exclude");
  return env;
}

NetworkChoice choose_network(const std::string& wanted, const LaunchInfo& launch,
                             const NetworkEnv& env) {
  if (wanted != "auto") {
    const std::string& other =
        !env.launcher_include.empty() ? env.launcher_include : env.launcher_exclude;
    if (!other.empty() && other != wanted)
      throw UsageError(fmt::format(
          "dist.interface is {} but the launcher sets OMPI_MCA_btl_tcp_if_{}={} (mpirun --mca "
          "or the environment): set one of the two",
          wanted, !env.launcher_include.empty() ? "include" : "exclude", other));
    return checked(wanted, launch, env, "dist.interface");
  }
  // The launcher's own setting stands, whole; a list ("eth0,ib0") is checked by its first entry.
  if (!env.launcher_include.empty()) {
    NetworkChoice c = checked(env.launcher_include.substr(0, env.launcher_include.find(',')),
                              launch, env, "OMPI_MCA_btl_tcp_if_include");
    c.setting = env.launcher_include;
    return c;
  }
  if (!env.launcher_exclude.empty())
    return {"", "", "",
            "Open MPI's own choice (OMPI_MCA_btl_tcp_if_exclude=" + env.launcher_exclude + ")"};
  if (launch.nodes <= 1) return {"", "", "", "one node: the ranks share memory"};
  for (const Interface& i : env.interfaces)
    if (!i.loopback && i.up && i.address == env.host_address)
      return chosen(i.name, i, fmt::format("the address {} resolves to", env.host));
  for (const Interface& i : env.interfaces)
    if (!i.loopback && i.up && i.name == env.route_interface)
      return chosen(i.name, i, "the default route's");
  throw UsageError(fmt::format(
      "dist.interface is auto but {} neither resolves to one of {}'s interfaces nor has a "
      "default route: set dist.interface to the interface the nodes reach each other on ({})",
      env.host, env.host, describe(env.interfaces)));
}

void apply_network(const NetworkChoice& choice) {
  if (choice.setting.empty()) return;
  ::setenv("OMPI_MCA_btl_tcp_if_include", choice.setting.c_str(), 1);
  if (!choice.interface.empty()) ::setenv("NCCL_SOCKET_IFNAME", choice.interface.c_str(), 0);
}

std::string describe(const NetworkChoice& choice) {
  if (choice.interface.empty()) return choice.why;
  return fmt::format("{} ({}, {})", choice.interface, choice.address, choice.why);
}

}  // namespace trainer::dist
