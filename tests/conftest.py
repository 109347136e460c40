"""Fixtures shared by test modules, and the markers' selection.

Markers (pyproject.toml): ``fuzz`` tests run only when ``-m`` names them (CI runs
``pytest -m fuzz`` after the default run); ``slow`` tests (over ~2 s each, measured with
``--durations``) are listed in SLOW below, so that ``pytest -m "not slow"``, the inner loop,
runs in about two minutes and still runs some tests of every file.
"""

import os
import re

import pytest

import txcalc

#: Markers whose tests run only when the ``-m`` expression names them (or a test is named
#: by its node id on the command line).
OPT_IN = ("fuzz",)

#: Tests over ~2 s each (measured: CPU seconds per test, the machine being shared): file ->
#: test function names (every parametrisation) or one parametrisation's name (``f[id]``).
#: A name here that no longer exists fails tests/test_markers.py.
SLOW: dict[str, tuple[str, ...]] = {
}


@pytest.fixture(scope="module")
def big_gpu(tmp_path_factory):
    """A --gpu-file row of one GPU large enough that every preset and layout fits on it."""
    path = tmp_path_factory.mktemp("gpu") / "big.csv"
    header = open(os.path.join(os.path.dirname(txcalc.__file__), "data", "gpus.csv")).readline()
    path.write_text(header + "big,,100000,GB,4800,60,495,990,990,1980,1980,900,50,8,test\n")
    return str(path)


@pytest.hookimpl(tryfirst=True)  # before -m selects on the marks added here
def pytest_collection_modifyitems(config, items):
    for item in items:
        names = SLOW.get(item.path.name, ())
        if item.name in names or getattr(item, "originalname", None) in names:
            item.add_marker(pytest.mark.slow)
    expr = config.getoption("markexpr") or ""
    named = set(config.args)
    wanted = {m for m in OPT_IN if re.search(rf"\b{m}\b", expr)}
    keep, drop = [], []
    for item in items:
        opt_in = {m for m in OPT_IN if item.get_closest_marker(m)}
        explicit = item.nodeid in named or any(a.endswith(item.nodeid) for a in named)
        (drop if opt_in - wanted and not explicit else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
