"""`txcalc validate`: report files, zero error on params and FLOPs, clean user errors."""

import json
import subprocess
import sys

import pytest

from txcalc.cli import main

pytest.importorskip("torch")


def test_validate_meta_writes_json_and_md_with_zero_error(tmp_path, capsys):
    rc = main(["validate", "gpt2", "--seq", "32", "--batch", "2", "--out", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "gpt2-meta.json").read_text())
    for q in ("params", "forward_flops", "backward_flops", "saved_bytes"):
        t = report["totals"][q]
        assert t["predicted"] == t["measured"] > 0, q
    assert len(report["layers"]) == 12 + 1  # 12 blocks and the rows outside them
    assert all(r["forward_flops_error_pct"] == 0 for r in report["components"])
    md = (tmp_path / "gpt2-meta.md").read_text()
    assert "| params | 124,439,808 | 124,439,808 | 0.0000 |" in md
    assert "attn.core" in capsys.readouterr().out


def test_validate_cpu_run_checks_the_kv_cache_after_generate(tmp_path):
    rc = main(["validate", "t5-small", "--device", "cpu", "--seq", "8", "--src-seq", "12",
               "--precision", "fp32", "--kv-tokens", "3", "--out", str(tmp_path), "--json"])
    assert rc == 0
    report = json.loads((tmp_path / "t5-small-cpu.json").read_text())
    kv = report["kv_cache"]
    assert kv["predicted"] == kv["measured"] and kv["context"] == 8 + 3 - 1
    assert report["totals"]["saved_bytes"]["error_pct"] == 0


@pytest.mark.parametrize("argv,needle", [
    (["validate", "gpt2", "--device", "tpu"], "--device ('tpu')"),
    (["validate", "gpt2", "--seq", "4096"], "max_position 1024"),
    (["validate", "no-such-model"], "no-such-model"),
    (["validate", "gpt2", "--precision", "fp8"], "fp8"),
])
def test_validate_bad_input_is_one_line_exit_2(argv, needle, tmp_path, capsys):
    assert main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("txcalc: error") and needle in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # no half-written report


def test_validate_without_torch_is_one_line_exit_2(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from txcalc.cli import main\n"
            f"sys.exit(main(['validate', 'gpt2', '--out', {str(tmp_path)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("txcalc: error: txcalc validate needs PyTorch")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


@pytest.mark.parametrize("attn,recompute", [("flash", "selective"), ("flash", "full"),
                                            ("eager", "full")])
def test_validate_fused_and_recompute_totals_are_exact(tmp_path, attn, recompute):
    """Fused attention runs the CPU flash kernel under FakeTensorMode (counted with torch's
    SDPA formulas); recomputed forward work is counted inside backward."""
    rc = main(["validate", "llama-3-8b", "--seq", "64", "--attn", attn, "--recompute",
               recompute, "--out", str(tmp_path), "--json"])
    assert rc == 0
    report = json.loads((tmp_path / "llama-3-8b-meta.json").read_text())
    for q, t in report["totals"].items():
        assert t["predicted"] == t["measured"], q


# --- --device cuda: the same memory pre-check as cpu, on what the driver says is free ---------
def _fake_cuda(monkeypatch, available: bool, free=None):
    """torch.cuda as a machine with (or without) a device with ``free`` bytes free; free may
    be an exception that mem_get_info raises. The reference run itself is replaced by one
    that stops with a recognisable error: reaching it means the pre-check let the run go."""
    import torch

    from reference import validate as ref_validate
    from txcalc.errors import WorkloadError

    def mem_get_info(device=None):
        if isinstance(free, BaseException):
            raise free
        return free, 141 * 10**9

    def run(*args, **kwargs):
        raise WorkloadError("reference run reached")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(ref_validate, "validate", run)


def _cuda_error(capsys, tmp_path, *argv) -> str:
    from tests.cli.test_files import one_line_error
    err = one_line_error(capsys, ["validate", *argv, "--device", "cuda", "--out",
                                  str(tmp_path / "v")])
    assert not (tmp_path / "v").exists()
    return err


def test_validate_cuda_absent_is_a_clean_error(monkeypatch, capsys, tmp_path):
    _fake_cuda(monkeypatch, available=False, free=AssertionError("never asked"))
    assert "no CUDA device is available here" in _cuda_error(capsys, tmp_path, "gpt2")


def test_validate_cuda_refuses_what_will_not_fit_in_free_memory(monkeypatch, capsys, tmp_path):
    """gpt2 at batch 4096 x 512 on a device with 80 GB free: refused up front with the
    engine's figure (the same as the cpu check's), before any allocation."""
    import txcalc
    from txcalc.engine.memory import TrainingMemory
    from txcalc.engine.workload import Workload
    _fake_cuda(monkeypatch, available=True, free=80 * 10**9)
    err = _cuda_error(capsys, tmp_path, "gpt2", "--batch", "4096")
    mem = TrainingMemory(txcalc.load("gpt2"), Workload(batch=4096, seq=512), "bf16-mixed",
                         "adamw")
    assert f"needs about {(mem.total + mem.weights) / 2**30:,.1f} GiB" in err
    assert "more than the 74.5 GiB free on the CUDA device" in err
    assert err.startswith("txcalc: error: validate --device cuda: gpt2")


@pytest.mark.parametrize("free", [10**12, RuntimeError("no driver")])
def test_validate_cuda_runs_what_fits_or_cannot_be_checked(monkeypatch, capsys, tmp_path, free):
    """Enough free memory, or a driver that cannot say: the pre-check lets the run start."""
    _fake_cuda(monkeypatch, available=True, free=free)
    assert "reference run reached" in _cuda_error(capsys, tmp_path, "gpt2", "--seq", "16")


def test_validate_by_default_never_writes_the_committed_reports(tmp_path, monkeypatch):
    """issue 18: `txcalc validate llama-3.1-405b --device meta` run from the repository used to
    replace reports/validation/llama-3.1-405b-meta.* with another sequence length."""
    pytest.importorskip("torch")
    (tmp_path / "reports" / "validation").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "gpt2", "--seq", "16", "--kv-tokens", "0"]) == 0
    assert sorted(p.name for p in (tmp_path / "validation").iterdir()) == ["gpt2-meta.json",
                                                                           "gpt2-meta.md"]
    assert list((tmp_path / "reports" / "validation").iterdir()) == []
