"""The markers' bookkeeping (tests/conftest.py): the slow list names real tests and leaves
every file some tests for the inner loop, ``pytest -m "not slow"``."""

import ast
from pathlib import Path

import pytest

from tests.conftest import OPT_IN, SLOW

TESTS = Path(__file__).parents[1]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


@pytest.mark.parametrize("name", sorted(SLOW))
def test_the_slow_list_names_real_tests_and_leaves_some_per_file(name):
    path, = TESTS.rglob(name)  # one file of that name under tests/
    defined = _test_functions(path)
    functions = {n.split("[")[0] for n in SLOW[name]}
    assert functions <= defined, f"{name}: no such tests: {functions - defined}"
    whole = {n for n in SLOW[name] if "[" not in n}
    assert defined - whole, f"{name}: every test is slow; keep one for the inner loop"


def test_the_opt_in_markers_are_registered():
    text = (TESTS.parent / "pyproject.toml").read_text(encoding="utf-8")
    for marker in ("slow", *OPT_IN):
        assert f'"{marker}: ' in text, marker
