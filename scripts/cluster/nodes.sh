#!/usr/bin/env bash
# A cluster of "nodes" on one machine, for tests, as root. Each node is a set of namespaces:
#   network  eth0 at 10.77.0.1N/24 on the bridge trainer-br0 (the host is 10.77.0.1 there),
#            loopback, and mgmt0, an interface on a network of its own that reaches no other
#            node (the wrong choice a test makes on purpose);
#   UTS      the hostname nodeN;
#   mount    its own /etc/hosts naming every node and the host, and a node-local directory at
#            $NODE_LOCAL (the same path shows each node a different directory, as /tmp or
#            /scratch does on a real cluster).
# Everything else on the file system is shared, as an NFS mount is. Processes started inside a
# node stay there (and their children with them); `stop` kills them by PID and removes every
# namespace, link and mount it made.
#   nodes.sh start N          make nodes node1..nodeN (stops an earlier cluster first)
#   nodes.sh stop             kill every process in the nodes and remove them
#   nodes.sh exec NODE CMD..  run CMD inside NODE
#   nodes.sh rsh NODE CMD..   the same, CMD given as ssh gives it (one shell command line):
#                             Open MPI's launch agent (plm_rsh_agent), in place of ssh
#   nodes.sh pids NODE        the PIDs of every process inside NODE
#   nodes.sh lose NODE        NODE off the network and SIGKILL to every process inside it, as
#                             when it loses power (no peer hears its sockets close)
#   nodes.sh names            the nodes' names, one per line
#   nodes.sh addr NODE|host   NODE's eth0 address, or this machine's on the bridge
#   nodes.sh local NODE       where NODE's node-local directory is, as this machine sees it
set -euo pipefail
DIR=${NODES_DIR:-/tmp/trainer-nodes}
NODE_LOCAL=${NODE_LOCAL:-/tmp/trainer-node-local}
BRIDGE=trainer-br0
NET=10.77.0

say() { echo "nodes: $*" >&2; }
names() { [[ -r $DIR/names ]] && cat "$DIR/names"; }
netns() { echo "trainer-$1"; }
known() { grep -qx "$1" <<<"$(names)" || { say "no node '$1' (nodes: $(names | tr '\n' ' '))"; exit 2; }; }

enter() {  # NODE CMD...: CMD inside NODE's namespaces, those of its anchor process
  local node=$1
  shift
  known "$node"
  exec nsenter -t "$(cat "$DIR/$node/anchor.pid")" --net --uts --mount --wd="$PWD" -- "$@"
}

make_node() {  # INDEX
  local i=$1 node="node$1" ns
  ns=$(netns "$node")
  mkdir -p "$DIR/$node/local"
  ip netns add "$ns"
  ip link add "tr-$node" type veth peer name eth0 netns "$ns"
  ip link set "tr-$node" master "$BRIDGE" up
  ip -n "$ns" addr add "$NET.1$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" link add mgmt0 type veth peer name mgmt0-end  # a link to nowhere
  ip -n "$ns" link set mgmt0-end up
  ip -n "$ns" addr add "10.78.$i.1/24" dev mgmt0
  ip -n "$ns" link set mgmt0 up
  # The node's anchor: a process that holds its UTS and mount namespaces for as long as the
  # node lives; `exec` enters the namespaces of it.
  setsid nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private sh -ec "
    hostname $node
    mount --bind '$DIR/hosts' /etc/hosts
    mount --bind '$DIR/$node/local' '$NODE_LOCAL'
    echo \$\$ >'$DIR/$node/anchor.pid'
    exec sleep infinity" </dev/null >/dev/null 2>&1 &
  # 5 s for a hostname, two bind mounts and an echo, milliseconds of work.
  for _ in $(seq 1 50); do [[ -s $DIR/$node/anchor.pid ]] && return 0; sleep 0.1; done
  say "$node's namespaces were not made"
  exit 1
}

start() {
  local n=$1 i
  [[ $(id -u) -eq 0 ]] || { say "needs root"; exit 1; }
  [[ $n =~ ^[1-9]$ ]] || { say "the number of nodes must be 1 to 9, not '$n'"; exit 2; }
  for b in ip nsenter unshare; do command -v "$b" >/dev/null || { say "$b not found"; exit 1; }; done
  stop
  mkdir -p "$DIR" "$NODE_LOCAL"
  {
    echo "127.0.0.1 localhost"
    echo "$NET.1 $(hostname -s)"
    for i in $(seq 1 "$n"); do echo "$NET.1$i node$i"; done
  } >"$DIR/hosts"
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq 1 "$n"); do
    echo "node$i" >>"$DIR/names"
    make_node "$i"
  done
  # node1 reaches each other node: a closed port answers "refused" at once over the bridge; 5 s
  # covers bash starting on a loaded machine.
  for i in $(seq 2 "$n"); do
    [[ $("$0" exec node1 timeout 5 bash -c "echo >/dev/tcp/node$i/9" 2>&1) == *refused* ]] ||
      { say "node1 cannot reach node$i over $BRIDGE"; exit 1; }
  done
}

stop() {
  local ns pids link
  # Every node's namespace, those of a cluster whose directory is gone too (the names are fixed).
  for ns in $( (ls /run/netns 2>/dev/null || true) | grep '^trainer-node'); do
    if [[ -e /run/netns/$ns ]]; then
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
      # SIGKILLed processes leave within milliseconds; after 5 s the namespace goes regardless.
      for _ in $(seq 1 50); do [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] && break; sleep 0.1; done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  # A namespace outlives its name while sockets in it still retransmit to a lost node; its
  # links go now, so that nothing of it is left in sight and the names are free again.
  for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^tr-node' || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$DIR"
}

pids_of() {  # NODE: every process in the node's network namespace
  known "$1"
  ip netns pids "$(netns "$1")"
}

lose() {  # NODE: its link cut, then SIGKILL to every process of the node but its anchor
  local anchor
  known "$1"
  anchor=$(cat "$DIR/$1/anchor.pid")
  # First off the network, as a node that loses power is: the other nodes get no word of its
  # processes' sockets closing, only silence.
  ip link set "tr-$1" down
  pids_of "$1" | grep -vx "$anchor" | xargs -r kill -KILL 2>/dev/null || true
}

case "${1:-}" in
  start) start "${2:?usage: nodes.sh start N}" ;;
  stop) stop ;;
  exec) shift; enter "${1:?usage: nodes.sh exec NODE CMD...}" "${@:2}" ;;
  rsh) shift; node=${1:?usage: nodes.sh rsh NODE CMD...}; shift; enter "$node" /bin/sh -c "$*" ;;
  pids) pids_of "${2:?usage: nodes.sh pids NODE}" ;;
  lose) lose "${2:?usage: nodes.sh lose NODE}" ;;
  names) names ;;
  addr) if [[ ${2:-} == host ]]; then echo "$NET.1"; else known "${2:?usage: nodes.sh addr NODE|host}"; echo "$NET.1${2#node}"; fi ;;
  local) known "${2:?usage: nodes.sh local NODE}"; echo "$DIR/$2/local" ;;
  *) echo "usage: nodes.sh start N | stop | exec NODE CMD... | rsh NODE CMD... | pids NODE | lose NODE | names | addr NODE | local NODE" >&2
     exit 2 ;;
esac
