"""How long one registration holds the controller's event loop, by its size.

    .venv/bin/python benchmarks/registration_size.py [--flows 10 100 256] [--repeat 5]

The controller serves REST and OpenFlow on one event loop, so a request holds it for as long as
its handler runs, and the reorder it wakes holds it again. For coflows of ``--flows`` flows
between 13 hosts (on a registry that already holds 200 ordinary coflows), this prints the
median of ``--repeat`` runs of each step, on the pure core (the Ryu glue adds only the
FlowMods' sending): parsing and validating the body and writing it to SQLite (``POST``), and
the reorder with the rules diff for one switch. 256 flows is the largest record the API takes
(``controller.limits.MAX_FLOWS``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.api import RestApi  # noqa: E402
from controller.engine import Engine  # noqa: E402
from controller.registry import Registry  # noqa: E402

HOSTS = [f"10.0.0.{i}" for i in range(1, 14)]
JSON = {"Content-Type": "application/json"}


def flows(n: int, offset: int = 0) -> list[dict]:
    """``n`` flows over the 13 hosts' pairs, each pair once before any repeats."""
    pairs = [(s, d) for s in HOSTS for d in HOSTS if s != d]
    return [
        {"src": pairs[(offset + i) % len(pairs)][0], "dst": pairs[(offset + i) % len(pairs)][1],
         "bytes": 1e6 + i}
        for i in range(n)
    ]  # fmt: skip


def measure(n_flows: int, repeat: int) -> dict:
    post_s, reorder_s = [], []
    for run in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            engine = Engine(Registry(str(Path(tmp) / "bench.sqlite")), "sincronia")
            api = RestApi(engine)
            for i in range(200):
                body = json.dumps({"coflow_id": i, "flows": flows(4, i)}).encode()
                api.handle("POST", "/api/coflows", body, JSON)
            engine.switch_connected(1)
            engine.reorder()
            engine.ops_for(1)
            body = json.dumps({"coflow_id": 10_000 + run, "flows": flows(n_flows)}).encode()
            started = time.perf_counter()
            status, _ = api.handle("POST", "/api/coflows", body, JSON)
            post_s.append(time.perf_counter() - started)
            assert status == 201, status
            started = time.perf_counter()
            engine.reorder()
            engine.ops_for(1)
            reorder_s.append(time.perf_counter() - started)
            engine.registry.close()
    return {
        "flows": n_flows,
        "body_kb": len(body) / 1024,
        "post_ms": statistics.median(post_s) * 1e3,
        "reorder_ms": statistics.median(reorder_s) * 1e3,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flows", type=int, nargs="+", default=[10, 100, 256])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"{'flows':>6} {'body kB':>8} {'POST ms':>8} {'reorder ms':>11} {'total ms':>9}")
    for n in args.flows:
        row = measure(n, args.repeat)
        print(f"{row['flows']:>6} {row['body_kb']:>8.1f} {row['post_ms']:>8.2f} "
              f"{row['reorder_ms']:>11.2f} {row['post_ms'] + row['reorder_ms']:>9.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
