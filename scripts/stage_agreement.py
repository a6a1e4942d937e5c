"""Stage-by-stage agreement: ``experiments/stage_agreement.py`` says how to run it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.stage_agreement import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
