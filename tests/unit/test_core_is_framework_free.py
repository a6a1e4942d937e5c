"""The scheduling core must import without Ryu, Mininet or eventlet (Faucet's habit)."""

from __future__ import annotations

import subprocess
import sys

CORE = ["model", "bssi", "policies", "schedule", "bounds", "fluid"]


def test_core_imports_with_frameworks_blocked():
    code = (
        "import sys\n"
        "for name in ('ryu', 'mininet', 'eventlet', 'os_ken'):\n"
        "    sys.modules[name] = None  # any import of them raises ImportError\n"
        + "".join(f"import controller.{m}\n" for m in CORE)
        + "from controller.policies import make_policy, POLICIES\n"
        "from controller.model import ClusterState\n"
        "for name in POLICIES: make_policy(name).schedule(ClusterState())\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
