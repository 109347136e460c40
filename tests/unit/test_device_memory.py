"""Memory that is not tensors (issue 28): the caching allocator's reserved bytes, the cuBLAS
workspaces and the CUDA context (engine/device.py ``device_memory``), as memory --json
reports them and fit compares them with the GPU."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from txcalc.cli import app
from txcalc.engine.device import (ALLOC_ROUND_LARGE, CUDA_CONTEXT_BYTES,
                                       cublas_workspace_bytes, device_memory, segment_bytes)

RUNNER = CliRunner()


def _json(argv):
    r = RUNNER.invoke(app, [*argv, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_cublas_workspace_and_its_segment_as_a_memory_snapshot_shows_them():
    """discuss.pytorch.org ("unexpected 8519680b memory allocation during matrix
    multiplication"): a matmul's cuBLAS workspace is 8,519,680 B, in a 20,971,520-byte
    "large" segment; on compute capability 9.0 PyTorch asks 32 MiB."""
    assert cublas_workspace_bytes("rtx-4090") == cublas_workspace_bytes(None) == 8_519_680
    assert segment_bytes(8_519_680) == 20_971_520
    assert cublas_workspace_bytes("h100-sxm") == 32 * 2**20 == segment_bytes(32 * 2**20)
    assert segment_bytes(1) == segment_bytes(2**20) == 2 * 2**20


def test_reserved_and_device_bytes_order_and_rounding():
    d = device_memory(10**10, "h100-sxm")
    assert d.tensor_bytes < d.allocated_bytes < d.reserved_bytes < d.device_bytes
    assert d.reserved_bytes % ALLOC_ROUND_LARGE == 0
    assert d.device_bytes - d.reserved_bytes == CUDA_CONTEXT_BYTES
    assert device_memory(0).allocated_bytes == 2 * 8_519_680


def test_memory_json_and_fit_compare_the_same_device_bytes():
    """memory --json reports allocated, reserved and device bytes; fit's total at its answer is
    memory's device_bytes for the same setup, which fits the GPU (one token more does not)."""
    ask = ["llama-3.2-1b", "--gpu", "rtx-4090", "--finetune", "lora"]
    fit = _json(["fit", *ask])
    mem = {s: _json(["memory", *ask, "--seq", str(s)]) for s in (fit["max_seq"],
                                                                    fit["max_seq"] + 1)}
    m = mem[fit["max_seq"]]
    assert m["device_bytes"] == m["reserved_bytes"] + m["cuda_context_bytes"]
    assert m["allocated_bytes"] == m["total_bytes"] + m["cublas_workspace_bytes"]
    assert fit["total_bytes"] == m["device_bytes"] <= fit["gpu_bytes"]
    assert mem[fit["max_seq"] + 1]["device_bytes"] > fit["gpu_bytes"]
    assert fit["reserved_bytes"] == m["reserved_bytes"]
    assert fit["allocated_bytes"] == m["allocated_bytes"]


def test_fit_keeps_the_safety_margin_and_says_what_it_compared():
    """--safety GB: the compared figure (reserved + context on one GPU) stays within the GPU
    less the margin, and the answer names both; more margin, a shorter answer."""
    ask = ["fit", "llama-3.2-1b", "--gpu", "rtx-4090", "--finetune", "qlora"]
    plain, kept = _json(ask), _json([*ask, "--safety", "2.5"])
    assert plain["safety_bytes"] == 0 and kept["safety_bytes"] == 2_500_000_000
    assert kept["limit_bytes"] == kept["gpu_bytes"] - 2_500_000_000
    assert kept["compared_bytes"] == kept["total_bytes"] <= kept["limit_bytes"]
    assert kept["headroom_bytes"] == kept["limit_bytes"] - kept["compared_bytes"] >= 0
    assert "nvidia-smi" in kept["compared_as"] and kept["max_seq"] < plain["max_seq"]
    text = " ".join(RUNNER.invoke(app, [*ask, "--safety", "2.5"]).output.split())
    assert "less a margin of 2.33 GiB (--safety 2.50 GB, as given)" in text  # GiB (issue 29)


def test_bad_safety_is_one_line_exit_2(capsys):
    from txcalc.cli import main
    for value, needle in (("-1", "--safety (-1.0) must be in [0,"),
                          ("30", "--safety (30 GB) leaves nothing of the GPU's 25.38 GB"),
                          ("nan", "--safety (nan) must be a finite number")):
        rc = main(["fit", "llama-3.2-1b", "--gpu", "rtx-4090", "--safety", value])
        out = capsys.readouterr()
        assert rc == 2 and not out.out and out.err.count("\n") == 1 and needle in out.err, out
