"""The testbed experiment: ``experiments/run_testbed.py`` (its docstring says how to run it)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.run_testbed import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
