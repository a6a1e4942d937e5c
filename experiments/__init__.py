"""The experiments: the testbed experiment and its calibration, the simulator and GPU sweeps, and
the claims report. Each module has a ``main``; ``scripts/<name>.py`` and ``python -m
experiments.<name>`` run it (and the installed console scripts, see pyproject.toml)."""
