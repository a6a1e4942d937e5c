"""``hpo-testbed --resume``: a run (or calibration) finished under the same settings is read
again, any other is run; a testbed experiment cut short goes on where it stopped."""

from __future__ import annotations

import json

from experiments import run_testbed
from experiments.testbed_settings import kept, run_key, settings_of

ARGV = ["--hosts", "4", "--tasks", "1", "--configs", "3", "--workers", "2", "--policy", "fair",
        "beamer", "--seeds", "1", "2"]  # fmt: skip


def settings(tmp_path, *more: str):
    parser = run_testbed.build_parser()
    return settings_of(parser.parse_args([*ARGV, "--out", str(tmp_path), *more]))


def test_the_run_key_names_what_decides_a_run_and_kept_reads_only_an_equal_one(tmp_path, capsys):
    resumed = settings(tmp_path, "--resume")
    assert run_key(resumed) == run_key(settings(tmp_path, "--resume", "--seeds", "7"))
    assert run_key(resumed) != run_key(settings(tmp_path, "--resume", "--link-gbps", "10"))
    assert run_key(resumed) != run_key(settings(tmp_path, "--resume", "--models", "vgg16"))
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"sct_s": {"mean": 1.0}, "run_key": run_key(resumed)}))
    assert kept(settings(tmp_path), path) is None  # without --resume nothing is kept
    assert kept(resumed, path)["sct_s"] == {"mean": 1.0}
    assert kept(resumed, tmp_path / "missing.json") is None
    other = settings(tmp_path, "--resume", "--link-gbps", "10")
    assert kept(other, path) is None
    assert "of other settings; running it again" in capsys.readouterr().out
    path.write_text('{"sct_s": ')
    assert kept(resumed, path) is None
    assert "unreadable" in capsys.readouterr().out


def test_a_resumed_experiment_runs_only_what_is_missing(tmp_path, monkeypatch):
    resumed = settings(tmp_path, "--resume")
    done = tmp_path / "fair" / "seed-2"
    done.mkdir(parents=True)
    (done / "result.json").write_text(json.dumps(
        {"policy": "fair", "sct_s": {"mean": 3.0}, "run_key": run_key(resumed),
         "failed_attempts": ["job 1 rank 0: timed out"]}))  # fmt: skip
    ran = []

    def run(settings, run):
        ran.append((run.policy, run.seed))
        return {"policy": run.policy, "sct_s": {"mean": 1.0}}, []

    monkeypatch.setattr(run_testbed, "run_with_retries", run)
    results, failures = run_testbed.run_every_policy(resumed)
    assert ran == [("fair", 1), ("beamer", 1), ("beamer", 2)] and failures == []
    assert [(r["policy"], r["seed"], r["sct_s"]["mean"]) for r in results] == [
        ("fair", 1, 1.0),
        ("beamer", 1, 1.0),
        ("fair", 2, 3.0),
        ("beamer", 2, 1.0),
    ]
    assert [r["failed_attempts"] for r in results] == [[], [], ["job 1 rank 0: timed out"], []]
    ran.clear()
    run_testbed.run_every_policy(settings(tmp_path))  # without --resume: every run again
    assert len(ran) == 4
