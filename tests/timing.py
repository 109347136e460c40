"""CPU seconds per test, measured, and the ``slow`` marker drawn from them.

``TXCALC_MEASURE_TIMES=1 python3 -m pytest -p no:cacheprovider -m "fuzz or not fuzz"`` (with or
without ``-n``) records every test's CPU seconds (setup, call and teardown: this process's
threads plus the child processes it waited for, so that a test running the CLI as a process
counts that process) and merges them into ``tests/data/test_seconds.json`` when each pytest
process ends. CPU seconds, not wall seconds: the machine may be shared while measuring, and
wall time then counts other people's work.

A test measured over ``SLOW_SECONDS`` is marked ``slow`` (tests/conftest.py), so that the
inner loop, ``pytest -m "not slow"``, runs in about two minutes; each file keeps its cheapest
test in the inner loop. A module fixture's cost lands on the first test that uses it, so a
measurement after the marks change may move a file's setup onto a test the inner loop keeps:
measure again after large changes (the inner loop's time is checked in benchmarks/, not in a
timed test).
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import tempfile
import time
from pathlib import Path

PATH = Path(__file__).parent / "data" / "test_seconds.json"
#: a test measured over this many CPU seconds is ``slow``
SLOW_SECONDS = 0.1
MEASURE = os.environ.get("TXCALC_MEASURE_TIMES") == "1"


def load() -> dict[str, float]:
    return json.loads(PATH.read_text()) if PATH.exists() else {}


def cpu_seconds() -> float:
    """This process's CPU seconds (every thread) plus its waited-for children's."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def slow_ids(nodeids: list[str], seconds: dict[str, float]) -> set[str]:
    """The node ids measured over SLOW_SECONDS, less each file's cheapest test (every file
    keeps one test in the inner loop)."""
    slow = {n for n in nodeids if seconds.get(n, 0.0) > SLOW_SECONDS}
    by_file: dict[str, list[str]] = {}
    for n in nodeids:
        by_file.setdefault(n.split("::")[0], []).append(n)
    for ids in by_file.values():
        if all(n in slow for n in ids):
            slow.discard(min(ids, key=lambda n: seconds.get(n, 0.0)))
    return slow


def costliest_files_first(items: list) -> list:
    """``items`` with whole files in order of their measured CPU seconds, costliest first (a
    file's tests keep their order). Under xdist's ``--dist loadfile --no-loadscope-reorder``
    (.ci/run) the workers then take files longest first, the LPT rule: the last file to end
    is a short one, not the 150-second fuzz file started late. Every worker collects the
    same order (the seconds come from this repository's file)."""
    seconds = load()
    cost: dict[str, float] = {}
    for item in items:
        file = item.nodeid.split("::")[0]
        cost[file] = cost.get(file, 0.0) + seconds.get(item.nodeid, 0.0)
    return sorted(items, key=lambda item: -cost[item.nodeid.split("::")[0]])


def save(measured: dict[str, float]) -> None:
    """Merge this process's measurements into PATH (xdist workers save at once: a lock)."""
    if not measured:
        return
    lock_path = Path(tempfile.gettempdir()) / "txcalc-test-seconds.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = load()
        merged.update({k: round(v, 3) for k, v in measured.items()})
        tmp = PATH.with_suffix(".tmp")
        tmp.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
        os.replace(tmp, PATH)
