#!/usr/bin/env bash
# The testbed race (docs/testbed.md): every examples/testbed/S*.ini scenario run by native
# rumor-peers in shaped network namespaces (examples/testbed/run.sh, as root), with rumor-sim's
# prediction of the same file beside each; one table per scenario (medians of --rounds), a PNG
# of accuracy against wall time. `bench/testbed_race.sh --help` for the options.
#
# With --python, Rumor's Python peers (rumor.torch, run.sh --peer-cmd python) race torch DDP
# (plain, PowerSGD, post-local SGD period 8; bench/testbed_ddp.py) with the same torch model and
# recipe; --torch-model cnn for the 0.88 target.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/testbed_race.py" "$@"
