// Choosing the network interface between nodes (Note [Choosing the network]): what auto picks,
// and every wrong choice refused naming the interface and the host's interfaces.
#include <gtest/gtest.h>

#include "dist/network.h"
#include "runtime/error.h"

namespace trainer::dist {
namespace {

// node2 of a two-node job: loopback, the cluster's eth0, and mgmt0 that reaches no other node.
NetworkEnv node2() {
  NetworkEnv env;
  env.host = "node2";
  env.interfaces = {{"lo", "127.0.0.1", 8, true, true},
                    {"mgmt0", "10.78.2.1", 24, false, true},
                    {"eth0", "10.77.0.12", 24, false, true}};
  env.host_address = "10.77.0.12";
  return env;
}

LaunchInfo two_nodes() {
  LaunchInfo l;
  l.rank = 2;
  l.world_size = 4;
  l.local_size = 2;
  l.node = 1;
  l.nodes = 2;
  l.launcher = "srun";
  return l;
}

std::string refusal(const std::string& wanted, const NetworkEnv& env, const LaunchInfo& l) {
  try {
    choose_network(wanted, l, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Network, AutoTakesTheInterfaceOfTheHostsAddress) {
  const NetworkChoice c = choose_network("auto", two_nodes(), node2());
  EXPECT_EQ(c.setting, "eth0");
  EXPECT_EQ(c.address, "10.77.0.12");
  EXPECT_EQ(c.why, "the address node2 resolves to");
  NetworkEnv unresolved = node2();
  unresolved.host_address = "";
  unresolved.route_interface = "mgmt0";
  EXPECT_EQ(choose_network("auto", two_nodes(), unresolved).interface, "mgmt0");
  unresolved.route_interface = "";
  EXPECT_NE(refusal("auto", unresolved, two_nodes()).find("set dist.interface"), std::string::npos);
}

TEST(Network, AutoKeepsTheLaunchersChoiceAndOneNodeNeedsNone) {
  NetworkEnv env = node2();
  env.launcher_include = "mgmt0,eth0";
  const NetworkChoice c = choose_network("auto", two_nodes(), env);
  EXPECT_EQ(c.interface, "mgmt0");
  EXPECT_EQ(c.setting, "mgmt0,eth0");  // what Open MPI is told stays the launcher's whole list
  LaunchInfo one = two_nodes();
  one.nodes = 1;
  one.node = 0;
  EXPECT_TRUE(choose_network("auto", one, node2()).setting.empty());
}

TEST(Network, ANameOrARangeSelectsTheInterface) {
  EXPECT_EQ(choose_network("eth0", two_nodes(), node2()).address, "10.77.0.12");
  const NetworkChoice c = choose_network("10.77.0.0/16", two_nodes(), node2());
  EXPECT_EQ(c.setting, "10.77.0.0/16");
  EXPECT_EQ(c.interface, "eth0");
}

TEST(Network, WrongChoicesNameTheInterfaceAndTheHostsInterfaces) {
  std::string m = refusal("eth9", node2(), two_nodes());
  EXPECT_NE(m.find("dist.interface eth9: node2 (rank 2) has no such interface (it has lo "
                   "127.0.0.1/8, mgmt0 10.78.2.1/24, eth0 10.77.0.12/24)"),
            std::string::npos)
      << m;
  m = refusal("lo", node2(), two_nodes());
  EXPECT_NE(m.find("lo is this host's loopback interface, but the job's 4 ranks span 2 nodes"),
            std::string::npos)
      << m;
  EXPECT_NE(refusal("192.168.0.0/16", node2(), two_nodes()).find("no interface in that range"),
            std::string::npos);
  for (const char* bad : {"10.0.0.0/33", "300.0.0.0/8", "10.0.0.0/", "10.0.0/8", "/16"})
    EXPECT_NE(refusal(bad, node2(), two_nodes()).find(std::string(bad) + ": not a CIDR range"),
              std::string::npos)
        << bad;
  NetworkEnv down = node2();
  down.interfaces[2].up = false;
  EXPECT_NE(refusal("eth0", down, two_nodes()).find("interface eth0 is down on node2"),
            std::string::npos);
  NetworkEnv launcher = node2();
  launcher.launcher_include = "mgmt0";
  m = refusal("eth0", launcher, two_nodes());
  EXPECT_NE(m.find("dist.interface is eth0 but the launcher sets "
                   "OMPI_MCA_btl_tcp_if_include=mgmt0"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace trainer::dist
