"""A Ray cluster of several nodes on one machine, made the way Ray makes one (`ray start`): the way to try the
cluster path (`ray job submit`, verl across nodes, a lost node, Serve replicas on two nodes, the dashboard) without a
cluster. `make cluster-up` / `make cluster-down`; `python -m cluster.nodes up|down|status|lose NODE|start NODE`.

- A head (GCS, dashboard and job server, the tools resource `orchestra_tools`, no GPUs) and `--workers` worker
  nodes (logical GPUs, as verl's CPU platform counts them, and `orchestra_workers`, where the local backend's
  rollout workers and learner go), each with a node IP of its own in 127.0.0.0/8 and ports of its own. Ray replaces a
  head's `--node-ip-address 127.0.0.1` by the machine's interface address; other loopback addresses are kept, so the
  head is 127.0.0.11 and the workers 127.0.0.12, 127.0.0.13, ... All traffic stays on loopback.
- Token auth on: a token of this cluster's own (`<dir>/auth_token`, mode 0600; RAY_AUTH_TOKEN_PATH names it to every
  node and client), never the user's ~/.ray/auth_token. A temp dir per node (`/tmp/orchestra-ray-<port>[-<i>]`), as
  each machine has its own disk, so nothing of /tmp/ray (another cluster's) is read or replaced.
- Each node is started in a session of its own (`setsid`), and every process Ray starts for it (raylet, GCS,
  dashboard and its modules, agents, client server, workers) inherits that session id. `down` and `lose` end exactly
  the processes of the recorded sessions (and their descendants), by id: never Ray's own stop command, which ends
  every Ray cluster on the machine. `lose` is a hard loss (SIGKILL: a preempted or crashed machine); `start` brings
  the node back under the same IP and ports.
The state (addresses, sessions, ports) is `<dir>/cluster.json`; `<dir>` is $ORCHESTRA_CLUSTER_DIR, else runs/cluster.
The layout is layout.py's, starting and stopping lifecycle.py's, the command line __main__.py's.
"""

from cluster.nodes.layout import (
    DEFAULT_DIR,
    SERVE_KEYS_ENV,
    TOOLS_RESOURCE,
    WORKERS_RESOURCE,
    LocalCluster,
    Node,
    default_dir,
    load,
    plan,
    start_args,
    token_for,
)
from cluster.nodes.lifecycle import (
    alive_nodes,
    busy_ports,
    down,
    end_processes,
    lose,
    session_processes,
    start_node,
    up,
    wait_alive,
)

__all__ = ["DEFAULT_DIR", "SERVE_KEYS_ENV", "TOOLS_RESOURCE", "WORKERS_RESOURCE", "LocalCluster", "Node",
           "alive_nodes", "busy_ports", "default_dir", "down", "end_processes", "load", "lose", "plan",
           "session_processes", "start_args", "start_node", "token_for", "up", "wait_alive"]
