"""The README and docs/: short enough to read, links that resolve, no history, no outside design.

History belongs to ``git log``: a line of the README or of docs/ that names a commit of this
repository fails. The README stays a user guide (300 lines at most), every relative link points
to a file of the repository, and nothing refers to a design file outside it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 300

# a word of 7-40 hex digits with at least one digit and one letter: what a commit name looks like
HEX_WORD = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
# [text](target) and ![alt](target); the target ends at the first blank or closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def doc_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def looks_like_a_commit(word: str) -> bool:
    return any(c.isdigit() for c in word) and any(c.isalpha() for c in word)


def commit_candidates(text: str) -> set[str]:
    return {w for w in HEX_WORD.findall(text) if looks_like_a_commit(w)}


def commits_among(words: set[str]) -> set[str]:
    """The words that name a commit of this repository (``git cat-file``, one process)."""
    if not words:
        return set()
    ordered = sorted(words)
    query = "".join(f"{word}^{{commit}}\n" for word in ordered)
    done = subprocess.run(
        ["git", "cat-file", "--batch-check"],
        cwd=ROOT,
        input=query,
        capture_output=True,
        text=True,
        check=True,
    )
    answers = done.stdout.splitlines()
    assert len(answers) == len(ordered), done.stdout
    return {word for word, answer in zip(ordered, answers, strict=True) if " commit " in answer}


def in_a_git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    done = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, text=True
    )
    return done.returncode == 0 and done.stdout.strip() == "true"


def relative_links(text: str) -> list[str]:
    """Link targets that point into the repository (no scheme, no pure anchor)."""
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_the_readme_is_a_guide_of_at_most_300_lines():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines, at most {MAX_README_LINES}"


@pytest.mark.skipif(not in_a_git_checkout(), reason="not a git checkout: no commits to name")
@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.name)
def test_no_line_names_a_commit(path):
    lines = path.read_text().splitlines()
    found = commits_among(set().union(*(commit_candidates(line) for line in lines)))
    named = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
        for number, line in enumerate(lines, start=1)
        if commit_candidates(line) & found
    ]
    assert not named, "history belongs to git log:\n" + "\n".join(named)


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.name)
def test_every_relative_link_points_to_a_file(path):
    missing = [
        target
        for target in relative_links(path.read_text())
        if not (path.parent / target).resolve().exists()
    ]
    assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.name)
def test_nothing_refers_to_a_design_file_outside_the_repository(path):
    text = path.read_text()
    assert "shared/DESIGN" not in text and "DESIGN.md" not in text


def test_ci_runs_exactly_the_readmes_test_command():
    readme = README.read_text()
    assert "bash scripts/test.sh " in readme  # the second of the two commands at the top
    ci = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert ci[-1] == "bash scripts/test.sh"


def test_the_checks_catch_what_they_are_for():
    """The helpers find a commit-like word, a link and a link's target as intended."""
    assert commit_candidates("at 59c9e49, it took 15 min; cafe and 1234567 are words") == {
        "59c9e49"
    }
    assert relative_links("see [a](docs/x.md#part), ![b](fig.png) and [c](https://x.org)") == [
        "docs/x.md",
        "fig.png",
    ]
