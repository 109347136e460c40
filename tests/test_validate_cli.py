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
