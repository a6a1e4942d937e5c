#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main experiment: one seeded HPO workload on the
# 13-server Mininet testbed (network-bound: 1 Gbit/s links modelled, ring all-reduce) under
# fair, fifo-lm, sincronia, jpas and beamer, with the simulator beside it, raw and calibrated
# with the testbed's overheads measured first (hpo-calibrate). Run as root.
# Extra arguments go to hpo-testbed (see --help); results in results/testbed/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
exec .venv/bin/hpo-testbed --calibrate "$@"
