"""Fixtures shared by test modules."""

import os

import pytest

import txcalc


@pytest.fixture(scope="module")
def big_gpu(tmp_path_factory):
    """A --gpu-file row of one GPU large enough that every preset and layout fits on it."""
    path = tmp_path_factory.mktemp("gpu") / "big.csv"
    header = open(os.path.join(os.path.dirname(txcalc.__file__), "data", "gpus.csv")).readline()
    path.write_text(header + "big,,100000,GB,4800,60,495,990,990,1980,1980,900,50,8,test\n")
    return str(path)
