"""Fixtures shared by test modules, and the markers' selection.

Markers (pyproject.toml): ``fuzz`` tests run only when ``-m`` names them (CI runs
``-m "fuzz or not fuzz"``: everything, the full fuzz included); ``slow`` tests are those
measured over tests/timing.SLOW_SECONDS CPU seconds (tests/data/test_seconds.json, written
by ``TXCALC_MEASURE_TIMES=1 python3 -m pytest``), so that ``pytest -m "not slow"``, the inner
loop, runs in about two minutes and still runs some tests of every file.
"""

import os
import re

# One thread per pytest process (and the CLI processes the tests start, which inherit it):
# parallelism comes from pytest-xdist's processes, one a core. Torch's intra-op threads on the
# tests' small tensors oversubscribe the cores and spin: measured here, test_finetune_loss.py
# took 48 CPU seconds with two threads and 14 with one. Set before anything imports torch.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

import txcalc  # noqa: E402

from . import timing  # noqa: E402

#: Markers whose tests run only when the ``-m`` expression names them (or a test is named
#: by its node id on the command line).
OPT_IN = ("fuzz",)


@pytest.fixture(scope="module")
def big_gpu(tmp_path_factory):
    """A --gpu-file row of one GPU large enough that every preset and layout fits on it."""
    path = tmp_path_factory.mktemp("gpu") / "big.csv"
    header = open(os.path.join(os.path.dirname(txcalc.__file__), "data", "gpus.csv")).readline()
    path.write_text(header + "big,,100000,GB,4800,60,495,990,990,1980,1980,900,50,8,test\n")
    return str(path)


@pytest.hookimpl(tryfirst=True)  # before -m selects on the marks added here
def pytest_collection_modifyitems(config, items):
    slow = timing.slow_ids([item.nodeid for item in items], timing.load())
    for item in items:
        if item.nodeid in slow:
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
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = timing.costliest_files_first(items)


_MEASURED: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """TXCALC_MEASURE_TIMES=1: each test's CPU seconds (tests/timing.py)."""
    if not timing.MEASURE:
        yield
        return
    start = timing.cpu_seconds()
    yield
    _MEASURED[item.nodeid] = timing.cpu_seconds() - start


def pytest_sessionfinish(session):
    if timing.MEASURE:
        timing.save(_MEASURED)
