// The network a job's ranks talk over between nodes (Note [Choosing the network]): which
// interface Open MPI's TCP transport and NCCL's sockets use, chosen before MPI starts, and a
// check that every node reaches the others on it before any collective depends on it.
#pragma once

#include <string>
#include <vector>

#include "dist/launch.h"

namespace trainer::dist {

// One IPv4 address of a network interface of this host.
struct Interface {
  std::string name;     // "eth0"
  std::string address;  // "10.0.0.5"
  int prefix = 0;       // 24 for a /24
  bool loopback = false;
  bool up = false;
};

// This host's interfaces with an IPv4 address (getifaddrs), in the kernel's order.
std::vector<Interface> host_interfaces();

// "lo 127.0.0.1/8, eth0 10.0.0.5/24": for messages.
std::string describe(const std::vector<Interface>& interfaces);

// What the job's environment says before the choice.
struct NetworkEnv {
  std::string host;  // this host's name
  std::vector<Interface> interfaces;
  std::string host_address;      // what `host` resolves to here ("" when it does not)
  std::string route_interface;   // the interface of the default route ("" when none)
  std::string launcher_include;  // OMPI_MCA_btl_tcp_if_include as the launcher set it
  std::string launcher_exclude;  // OMPI_MCA_btl_tcp_if_exclude as the launcher set it
};

// The environment of this process.
NetworkEnv network_env();

// The interface this rank's collectives use between nodes.
struct NetworkChoice {
  std::string setting;    // what Open MPI is told (btl_tcp_if_include): a name or a CIDR range
  std::string interface;  // this host's interface for it ("" when the launcher's exclude rules)
  std::string address;    // its address
  std::string why;        // "dist.interface", "the address node1 resolves to", ...
};

// Throws UsageError when `setting` (dist.interface, or what `why` names) has a '/' but is no
// IPv4 CIDR range: a malformed value is refused on every launch, a single process's too.
void check_interface_setting(const std::string& setting, const std::string& why = "dist.interface");

// Chooses the interface for dist.interface = `wanted` ("auto", an interface name, or an IPv4
// CIDR range such as 10.0.0.0/16) on a rank of `launch`. Throws UsageError naming the
// interface and this host's interfaces when it does not exist here, is down or has no IPv4
// address, is loopback while the job spans several nodes, or contradicts the launcher's
// OMPI_MCA_btl_tcp_if_include/exclude; under "auto" the launcher's setting is kept, else the
// interface of the address this host's name resolves to, else that of the default route.
NetworkChoice choose_network(const std::string& wanted, const LaunchInfo& launch,
                             const NetworkEnv& env);

// Tells Open MPI (OMPI_MCA_btl_tcp_if_include) and NCCL (NCCL_SOCKET_IFNAME, unless set) to
// use the choice; before MPI_Init.
void apply_network(const NetworkChoice& choice);

// "eth0 (10.0.0.5, the address node1 resolves to)": for the start-up log.
std::string describe(const NetworkChoice& choice);

// After MPI_Init, before any message between ranks: the first rank of each node listens on
// its chosen address and connects to every other node's (their addresses exchanged through
// the launcher's PMIx, not the network under test), within timeout_s (30 s at most). Throws
// trainer::Error on every rank naming the nodes, addresses and interfaces when one node cannot
// reach another, instead of a hang or Open MPI's failure at the first collective. Does nothing
// on one node or without PMIx (a launcher other than mpirun or srun --mpi=pmix).
void check_network(const NetworkChoice& choice, const LaunchInfo& launch, double timeout_s);

}  // namespace trainer::dist
