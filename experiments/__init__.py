"""The experiments: the testbed experiment and its calibration, the simulator and GPU sweeps, and
the claims report. Each module has a ``main``, run by its console script
(``hpo-*``, pyproject.toml's ``[project.scripts]``, in ``.venv/bin`` after ``scripts/setup.sh``)
or by ``python -m experiments.<name>``."""
