"""A registry file that is damaged, foreign or holds records the API would refuse is refused
when it is opened, in one line naming the file, the record and what is wrong with it."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys

import pytest

from controller.registry import DatabaseError, Registry

HOSTS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3"}
FLOW = {"src": "h1", "dst": "h2", "bytes": 1e6}


def populated(path, jobs: int = 3, coflows: int = 2) -> Registry:
    """A registry at ``path`` with records of every kind and the policy setting: task 1,
    stage 1 and 2, jobs 1.. (job 1 with two flows and two TCP ports), coflows 1.. of the jobs,
    and a coflow of stage 2 alone."""
    ticks = iter(range(10**6))
    registry = Registry(str(path), hosts=HOSTS, clock=lambda: 1.7e9 + next(ticks))
    registry.create("tasks", {"task_id": 1, "name": "resnet", "weight": 2})
    registry.create("stages", {"stage_id": 1, "task_id": 1})
    registry.create("stages", {"stage_id": 2, "weight": 0.5})
    for j in range(1, jobs + 1):
        flows = [FLOW, {"src": "h3", "dst": "10.0.0.2", "bytes": 5e5}][: 1 + (j == 1)]
        registry.create("jobs", {"job_id": j, "stage_id": 1 + j % 2, "flows": flows,
                                 "tcp_ports": [5001, 6000][: 1 + (j == 1)],
                                 "iteration_budget": 10})  # fmt: skip
        if j % 2:
            registry.job_progress(j, {"iterations_done": 3})
    for c in range(1, coflows + 1):
        registry.create("coflows", {"coflow_id": c, "job_id": 1 + c % jobs, "flows": [FLOW]})
    registry.create("coflows", {"coflow_id": coflows + 1, "stage_id": 2, "flows": [FLOW]})
    registry.coflow_progress(1, {"remaining_bytes": [4e5]})
    registry.set_setting("policy", {"name": "fifo-lm", "options": {"heavy_threshold_bytes": 1e9}})
    return registry


def stored(path, kind: str, ident: int) -> dict:
    """A record's stored body, parsed."""
    with sqlite3.connect(path) as db:
        (row,) = db.execute("SELECT body FROM records WHERE kind=? AND id=?", (kind, ident))
    db.close()
    return json.loads(row[0])


def store(path, kind: str, ident, data, raw: str | bytes | None = None) -> None:
    """Write a record's body as the registry's own writes do, but unchecked."""
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT OR REPLACE INTO records VALUES (?, ?, ?)",
            (kind, ident, json.dumps(data) if raw is None else raw),
        )
    db.close()


def refusal(path) -> str:
    """The message of the :class:`DatabaseError` opening ``path`` raises (nothing else may)."""
    with pytest.raises(DatabaseError) as err:
        Registry(str(path), hosts=HOSTS)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "registry.sqlite"
    populated(path).close()
    return path


def _edit(kind, ident, change):
    def edit(path):
        data = stored(path, kind, ident)
        change(data)
        store(path, kind, ident, data)

    return edit


def _set(kind, ident, name, value):
    return _edit(kind, ident, lambda data: data.__setitem__(name, value))


def _set_flow(kind, ident, name, value, index=0):
    return _edit(kind, ident, lambda data: data["flows"][index].__setitem__(name, value))


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (_set_flow("jobs", 1, "size_bytes", "big"),
         "stored job 1: flows[0].size_bytes: must be a number, got 'big'"),
        (_set("jobs", 2, "iteration_budget", None),
         "stored job 2: iteration_budget: must be an integer, got None"),
        (_set("jobs", 2, "iterations_done", True),
         "stored job 2: iterations_done: must be an integer, got True"),
        (_set("tasks", 1, "task_id", True), "stored task 1: task_id: must be an integer"),
        (_set("stages", 1, "weight", math.nan),
         "stored stage 1: weight: must be a number, got NaN"),
        (_set("coflows", 1, "arrival_s", math.inf),
         "stored coflow 1: arrival_s: must be a finite number of seconds, got inf"),
        (_set_flow("coflows", 2, "remaining_bytes", -math.inf),
         "stored coflow 2: flows[0].remaining_bytes: must be in [0, 6.31152e+18], got -inf"),
        (_set("jobs", 1, "iteration_arrival_s", math.nan),
         "stored job 1: iteration_arrival_s: must be a number, got NaN"),
        (_set("stages", 2, "arrival_s", -1.0),
         "stored stage 2: arrival_s: must be in [0, 1.79769e+308], got -1"),
        (_set_flow("jobs", 1, "size_bytes", 1e19), "flows[0].size_bytes: must be in [0, 6.3"),
        (_set_flow("coflows", 1, "remaining_bytes", 2e6),
         "stored coflow 1: flows[0].remaining_bytes: must be <= size_bytes"),
        (_set_flow("jobs", 1, "dst", "10.0.0.1"), "stored job 1: flows[0].dst: must differ"),
        (_set_flow("jobs", 1, "src", "h1"),
         "stored job 1: flows[0].src: must be an IPv4 address as a string, got 'h1'"),
        (_set_flow("jobs", 1, "src", 167772161), "flows[0].src: must be an IPv4 address"),
        (_set_flow("jobs", 1, "bytes", 5), "stored job 1: flows[0].bytes: unknown field"),
        (_edit("jobs", 1, lambda d: d["flows"][1].pop("remaining_bytes")),
         "stored job 1: flows[1].remaining_bytes: is required"),
        (_set("jobs", 1, "flows", {"src": "10.0.0.1"}), "stored job 1: flows: must be a non-empty"),
        (_set("coflows", 1, "flows", []), "stored coflow 1: flows: must be a non-empty list"),
        (_set("jobs", 1, "tcp_ports", [5001, 5001]), "stored job 1: tcp_ports: has duplicates"),
        (_set("jobs", 1, "tcp_ports", [0]), "stored job 1: tcp_ports[0]: must be in 1..65535"),
        (_set("jobs", 1, "tcp_ports", list(range(1, 18))), "17 ports; at most 16 per job"),
        (_edit("jobs", 1, lambda data: data.update(
            tcp_ports=list(range(1, 17)),
            flows=[{"src": "10.0.0.1", "dst": f"10.0.0.{i + 2}", "size_bytes": 1,
                    "remaining_bytes": 1} for i in range(33)])),
         "stored job 1: tcp_ports: 33 flows x 16 TCP ports ask for up to 2112 marking rules"),
        (_set("jobs", 3, "iterations_done", 11),
         "stored job 3: iterations_done: 11 must be <= iteration_budget (10)"),
        (_set("jobs", 3, "iteration_budget", 0), "stored job 3: iteration_budget: must be in 1.."),
        (_set("jobs", 3, "job_id", 4), "stored job 3: job_id: 4 differs from the row's id 3"),
        (_set("tasks", 1, "name", 7), "stored task 1: name: must be a string"),
        (_set("stages", 1, "colour", "red"), "stored stage 1: colour: unknown field"),
        (_edit("coflows", 1, lambda d: d.pop("flows")), "stored coflow 1: flows: is required"),
        (_edit("jobs", 2, lambda d: d.pop("job_id")), "stored job 2: job_id: is required"),
        (_set("stages", 2, "task_id", 9), "stored stage 2: task_id: no task 9 is registered"),
        (_set("jobs", 2, "stage_id", 7), "stored job 2: stage_id: no stage 7 is registered"),
        (_set("coflows", 2, "job_id", 2**31), "stored coflow 2: job_id: must be in 0..2147483647"),
        (lambda p: store(p, "coflows", 5, None, raw='{"coflow_id": 5, "job_id": 8, "flows": '
                         '[{"src": "10.0.0.1", "dst": "10.0.0.2", "size_bytes": 1, '
                         '"remaining_bytes": 1}]}'),
         "stored coflow 5: job_id: no job 8 is registered"),
        (lambda p: store(p, "jobs", 9, None, raw='{"job_id": 9, "flows": [{"src": '),
         "stored job 9: body: is not valid JSON"),
        (lambda p: store(p, "jobs", 9, None, raw="[" * 100_000),
         "stored job 9: body: is not valid JSON"),
        (lambda p: store(p, "jobs", 9, [9]), "stored job 9: body: must be a JSON object, got [9]"),
        (lambda p: store(p, "jobs", 9, None, raw=b"{}"), "stored job 9: body: must be JSON text"),
        (lambda p: store(p, "jobs", "nine", {"job_id": 9}),
         "stored job 'nine': id: must be an integer, got 'nine'"),
        (lambda p: store(p, "flows", 1, {}), "stored record 1 of kind 'flows': kind: unknown kind"),
    ],
)  # fmt: skip
def test_a_stored_record_the_api_would_refuse_is_named_with_its_field(db, damage, words):
    damage(db)
    assert words in refusal(db)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ('{"name": "sjf"}', "stored setting 'policy': name: unknown policy 'sjf'; choose from"),
        ('{"name": "fifo-lm", "options": {"heavy_threshold_bytes": "abc"}}',
         "stored setting 'policy': options: fifo-lm option heavy_threshold_bytes must be"),
        ('{"name": "varys", "options": {"colour": 1}}', "options: policy 'varys' has no option"),
        ('{"name": "varys", "options": []}', "options: must be a JSON object, got []"),
        ('{"name": 3}', "stored setting 'policy': name: must be a string, got 3"),
        ('{"options": {}}', "stored setting 'policy': name: is required"),
        ('{"name": "beamer", "extra": 1}', "stored setting 'policy': extra: unknown field"),
        ('"beamer"', "stored setting 'policy': value: must be a JSON object, got 'beamer'"),
        ("{name: beamer}", "stored setting 'policy': value: is not valid JSON"),
    ],
)  # fmt: skip
def test_a_stored_setting_is_checked_as_the_engine_reads_it(db, value, words):
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE settings SET value=? WHERE key='policy'", (value,))
    conn.close()
    assert words in refusal(db)


def test_an_unknown_setting_is_refused_and_set_setting_refuses_what_a_restart_would(db):
    from controller.registry import InvalidInput

    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO settings VALUES ('colour', '\"red\"')")
    conn.close()
    assert "stored setting 'colour': key: unknown setting 'colour' (known: policy)" in refusal(db)
    registry = Registry(":memory:")
    with pytest.raises(InvalidInput, match="options: fifo-lm option heavy_threshold_bytes"):
        registry.set_setting("policy", {"name": "fifo-lm", "options": {"heavy_threshold_bytes": 0}})
    assert registry.settings == {}


def _pages(path) -> tuple[int, int, list[int]]:
    """The file's page size and count, and the leaf pages of the records' key index (empty
    where SQLite is built without its ``dbstat`` table)."""
    with sqlite3.connect(path) as conn:
        (size,) = conn.execute("PRAGMA page_size").fetchone()
        (count,) = conn.execute("PRAGMA page_count").fetchone()
        try:
            index = [page for (page,) in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = 'sqlite_autoindex_records_1' "
                "AND pagetype = 'leaf' ORDER BY pageno")]  # fmt: skip
        except sqlite3.OperationalError:
            index = []
    conn.close()
    return size, count, index


@pytest.mark.parametrize("where", ["middle", "key index"])
def test_zeroed_pages_are_found_by_sqlite_s_check(tmp_path, where):
    """Zeroed pages of the key index alone left every record readable: the registry started
    and served reads, and every write failed (``database disk image is malformed``)."""
    path = tmp_path / "registry.sqlite"
    populated(path, jobs=400, coflows=400).close()
    size, count, index = _pages(path)
    assert count >= 40
    if where == "key index":
        if not index:
            pytest.skip("this SQLite has no dbstat table")
        pages = [index[len(index) // 2]]
    else:
        pages = [count // 3, count // 2]
    with open(path, "r+b") as file:
        for page in pages:  # (numbered from 1)
            file.seek((page - 1) * size)
            file.write(bytes(size))
    assert f"{path}: damaged, SQLite's integrity check says: Page " in refusal(path)


def test_a_dropped_records_table_is_refused_not_started_empty(db):
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE records")
    conn.close()
    assert refusal(db) == f"{db}: has a settings table but no records table"


def test_a_dropped_settings_table_is_refused(db):
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE settings")
    conn.close()
    assert refusal(db) == f"{db}: has a records table but no settings table"


def test_a_table_with_other_columns_is_refused(tmp_path):
    path = tmp_path / "registry.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE records (kind TEXT, id INTEGER, body TEXT)")  # no key
        conn.execute("CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT)")
    conn.close()
    assert refusal(path) == (
        f"{path}: the records table has columns (kind TEXT, id INTEGER, body TEXT); a "
        "registry's are (kind TEXT, id INTEGER, body TEXT, PRIMARY KEY (kind, id))"
    )


def test_another_program_s_sqlite_file_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "places.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
        conn.execute("CREATE TABLE moz_bookmarks (id INTEGER PRIMARY KEY, title TEXT)")
    conn.close()
    before = path.read_bytes()
    assert refusal(path) == (
        f"{path}: an SQLite database but not a registry: no records or settings table (it "
        "holds 'moz_bookmarks', 'moz_places')"
    )
    assert path.read_bytes() == before  # (not switched to WAL, no tables added)


def test_a_file_that_is_not_sqlite_is_refused(tmp_path):
    path = tmp_path / "registry.sqlite"
    path.write_bytes(b"this is not a database, " * 200)
    assert refusal(path) == f"{path}: cannot use it as the registry: file is not a database"


def test_a_message_of_several_lines_is_made_one():
    assert str(DatabaseError("x.sqlite: damaged:\n*** in database main ***\n  Page 3\n")) == (
        "x.sqlite: damaged:; *** in database main ***; Page 3"
    )


def test_new_and_empty_files_start_empty(tmp_path):
    for path in (tmp_path / "new.sqlite", tmp_path / "empty.sqlite"):
        if path.name == "empty.sqlite":
            path.touch()
        registry = Registry(str(path))
        assert all(not records for records in registry.records.values())
        registry.close()
        Registry(str(path)).close()  # and open again, now with the tables


def test_a_valid_database_of_every_kind_loads_as_it_was_written(tmp_path):
    path = tmp_path / "registry.sqlite"
    first = populated(path, jobs=60, coflows=80)
    first.close()
    second = Registry(str(path), hosts=HOSTS)
    assert second.records == first.records and second.settings == first.settings
    for kind, records in first.records.items():  # (as written: floats stay floats, ints ints)
        assert [repr(r) for r in records.values()] == [
            repr(second.records[kind][ident]) for ident in records
        ]
    assert second.cluster_state(20e6).coflows == first.cluster_state(20e6).coflows
    assert second.records["jobs"][1].iteration_arrival_s is not None  # (progress was reported)
    second.close()


def test_a_record_stored_before_a_field_existed_takes_its_default(db):
    """Databases written before ``iteration_arrival_s`` was kept lack it."""
    data = stored(db, "jobs", 2)
    del data["iteration_arrival_s"]
    store(db, "jobs", 2, data)
    registry = Registry(str(db), hosts=HOSTS)
    assert registry.records["jobs"][2].iteration_arrival_s is None
    registry.close()


def test_the_command_line_refuses_a_corrupt_database_in_one_line(db):
    _set_flow("jobs", 1, "size_bytes", "big")(db)
    result = subprocess.run(
        [sys.executable, "-m", "controller", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"python -m controller: error: --db {db}: stored job 1: flows[0].size_bytes: must be a "
        "number, got 'big'\n"
    )
    assert "Traceback" not in result.stderr
