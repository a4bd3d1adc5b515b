// Which ranks run on which host, for messages: a lost or slow node is named as the node, with
// its ranks, not as so many separate ranks.
#pragma once

#include <string>
#include <vector>

namespace trainer::dist {

// "0-1" or "0, 2, 5": ranks in ascending order, runs of consecutive ranks joined.
std::string rank_list(const std::vector<int>& ranks);

// `ranks` grouped by host ("ranks 2-3 on node2 (all of its 2), rank 5 on node3"); the hosts
// whose every rank is among them are marked, since that is a node lost, cut off or slow rather
// than a rank. Without hosts (empty `hosts`): "ranks 2-3". With `roles` (each world rank's
// GridShape::role), each rank says what it is to the model: "rank 1 (pipeline stage 1) on a".
std::string ranks_on_hosts(const std::vector<int>& ranks, const std::vector<std::string>& hosts,
                           const std::vector<std::string>& roles = {});

// One rank as messages name it: "rank 1 (pipeline stage 1) on node2", its role and host where
// `roles` and `hosts` (each world rank's; either may be empty) know them.
std::string rank_name(int rank, const std::vector<std::string>& hosts,
                      const std::vector<std::string>& roles);

// The hosts whose every rank is in `ranks`, in order of first appearance.
std::vector<std::string> whole_hosts(const std::vector<int>& ranks,
                                     const std::vector<std::string>& hosts);

// Who a timed-out collective waits for, for its error: `silent` (world ranks that do not
// answer: dead, stopped or cut off) and `late` (ranks that answer but never arrived), by host
// (`hosts`: each world rank's; empty when unknown). A node every rank of which is silent is
// named as lost; when that is every node of the collective (`members`, world ranks) but this
// rank's own (`self`), this node may be the one cut off. "every rank arrived ..." when both
// are empty. `roles` as for ranks_on_hosts.
std::string describe_missing(const std::vector<int>& silent, const std::vector<int>& late,
                             const std::vector<std::string>& hosts, int self,
                             const std::vector<int>& members,
                             const std::vector<std::string>& roles = {});

// The placement for the start-up log: "node1: ranks 0-1; node2: ranks 2-3".
std::string placement(const std::vector<std::string>& hosts);

}  // namespace trainer::dist
