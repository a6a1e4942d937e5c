"""Pictures of a run's schedule: ``simulator/schedule_plot.py`` says how to run it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.schedule_plot import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
