"""Optuna studies on the cluster: ``experiments/optuna_hpo.py`` (its docstring says how)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.optuna_hpo import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
