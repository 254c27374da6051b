#!/usr/bin/env bash
# The network testbed: run a rumor-sim scenario file on real peers in network namespaces with
# htb-shaped links and cgroup CPU caps (docs/testbed.md). The program is testbed.py beside this
# file; `examples/testbed/run.sh --help` lists the options.
exec /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/testbed.py" "$@"
