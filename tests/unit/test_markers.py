"""The markers' bookkeeping (tests/conftest.py, tests/timing.py): the measured CPU seconds name
real tests, the slow selection leaves every file a test for the inner loop, ``pytest -m "not
slow"``, and the opt-in markers are registered."""

import ast
import functools
from pathlib import Path

import pytest

from tests import timing
from tests.conftest import OPT_IN

TESTS = Path(__file__).parents[1]


@functools.cache
def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def test_the_measured_seconds_name_real_tests():
    """Every node id of tests/data/test_seconds.json is a test function of a file that exists
    (a stale id would mark nothing; re-measure after renaming tests)."""
    missing = []
    for nodeid in timing.load():
        path, name = nodeid.split("::")[:2]
        file = TESTS.parent / path
        if not file.exists() or name.split("[")[0] not in _test_functions(file):
            missing.append(nodeid)
    assert not missing, f"{len(missing)} stale ids, e.g. {missing[:3]}"


def test_slow_selection_keeps_each_files_cheapest_test():
    ids = ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::u1[x]", "tests/b.py::u1[y]",
           "tests/c.py::v"]
    seconds = {"tests/a.py::t1": 5.0, "tests/a.py::t2": 0.2, "tests/b.py::u1[x]": 9.0,
               "tests/b.py::u1[y]": 3.0}
    assert timing.slow_ids(ids, seconds) == {"tests/a.py::t1", "tests/b.py::u1[x]"}


def test_the_opt_in_markers_are_registered():
    text = (TESTS.parent / "pyproject.toml").read_text(encoding="utf-8")
    for marker in ("slow", *OPT_IN):
        assert f'"{marker}: ' in text, marker
