"""The input layer (txcalc/inputs.py) seen from the CLI: every numeric, size and choice option
of every command refuses non-finite, out-of-range and absurd values with one line and exit 2;
valid values give the right answer. Issue 10's examples are each a test here.

The contract checked is test_bad_input's ``check_cli_error``: return code 2, stdout empty,
stderr exactly one line starting ``txcalc: error`` that names the value, no traceback.
"""

from __future__ import annotations

import json
import time

import pytest

import txcalc
from txcalc import inputs
from txcalc.cli import main

from tests.cli.test_bad_input import check_cli_error

#: gpt2's KV cache per token, from its published shape (12 layers, d_model 768, MHA) and
#: bf16: k and v, 2 bytes each -> 2 * 12 * 768 * 2 = 36,864 bytes.
GPT2_KV_BYTES_PER_TOKEN = 2 * 12 * 768 * 2


def run_json(capsys, argv: list[str]) -> dict:
    rc = main(argv + ["--json"])
    out, err = capsys.readouterr()
    assert rc == 0, (rc, err)
    return json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


# --- issue 10's examples ------------------------------------------------------------------------

def test_params_inf(capsys):
    check_cli_error(capsys, ["memory", "--params", "inf"], "--params", "'inf'")


def test_params_huge_exponent_is_refused_at_once(capsys):
    t0 = time.perf_counter()
    check_cli_error(capsys, ["memory", "--params", "1e1000000"], "--params", "'1e1000000'")
    assert time.perf_counter() - t0 < 2  # was 23 s: int(10**1000000) before any check


def test_tokens_huge_exponent(capsys):
    check_cli_error(capsys, ["plan", "train", "gpt2", "--tokens", "1e5000"], "--tokens",
                    "'1e5000'")


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
@pytest.mark.parametrize("value", ["inf", "1e-12", "nan", "-80", "0"])
def test_gpu_gb(capsys, value, json_flag):
    # 1e-12 GB used to be 0 bytes: ZeroDivisionError, and exit 0 with gpu_bytes 0 under --json
    check_cli_error(capsys, ["memory", "gpt2", "--gpu-gb", value] + json_flag, "--gpu-gb")


@pytest.mark.parametrize("cmd", [["plan", "train", "gpt2", "--tokens", "1B"],
                                 ["plan", "infer", "gpt2", "--context", "1k"]])
def test_cuda_context_gib_nan(capsys, cmd):
    check_cli_error(capsys, cmd + ["--cuda-context-gib", "nan"], "--cuda-context-gib", "nan")


def test_price_that_would_make_an_infinite_cost(capsys):
    check_cli_error(capsys, ["plan", "train", "gpt2", "--tokens", "1B", "--price", "1e308",
                             "--json"], "--price", "1e+308")


def test_achieved_tflops_that_would_make_infinite_days(capsys):
    check_cli_error(capsys, ["plan", "train", "gpt2", "--tokens", "1B", "--achieved-tflops",
                             "1e-305"], "--achieved-tflops", "1e-305")


@pytest.mark.parametrize("cmd", [["memory"], ["report", "-o", "OUT"]])
def test_params_with_inference_is_refused(capsys, tmp_path, cmd):
    # a parameter count gives no layers or KV heads, so no KV cache: refused, not training
    # memory printed as if it were serving memory
    argv = [str(tmp_path / "r") if a == "OUT" else a for a in cmd]
    check_cli_error(capsys, argv + ["--params", "7B", "--inference"], "--inference", "--params",
                    "7B", "KV cache")
    assert not (tmp_path / "r").exists()


def test_params_without_inference_still_answers(capsys):
    out = run_json(capsys, ["memory", "--params", "80e9", "--precision", "fp16-mixed",
                            "--optimizer", "adam"])
    assert out["total_bytes"] == 80 * 10**9 * 16  # the chapter's 2 + 2 + 12 bytes per param


def test_context_0k_is_refused_not_read_as_not_given(capsys):
    check_cli_error(capsys, ["memory", "gpt2", "--inference", "--context", "0k"], "--context",
                    "'0k'")


@pytest.mark.parametrize("text, tokens", [("1.5k", 1536), ("128k", 131072), ("0.5k", 512),
                                          ("1024", 1024), ("1e3", 1000)])
def test_context_k_is_1024_fractions_included(capsys, text, tokens):
    out = run_json(capsys, ["memory", "gpt2", "--inference", "--context", text])
    assert out["context"] == tokens
    assert out["kv_cache_bytes"] == tokens * GPT2_KV_BYTES_PER_TOKEN


def test_context_fraction_off_a_whole_token_is_refused(capsys):
    check_cli_error(capsys, ["memory", "gpt2", "--inference", "--context", "1.3k"], "--context",
                    "'1.3k'", "whole number")


def test_validate_negative_kv_tokens(capsys):
    # used to run and report "error 100%" for a cache of -3 tokens
    check_cli_error(capsys, ["validate", "gpt2", "--kv-tokens", "-3"], "--kv-tokens", "-3")


# --- every command, every numeric option: bad values are one line ----------------------------

MODEL_CMDS = {
    "flops": ["flops", "gpt2"],
    "memory": ["memory", "gpt2"],
    "train": ["plan", "train", "gpt2", "--tokens", "1B"],
    "infer": ["plan", "infer", "gpt2", "--context", "1k"],
    "validate": ["validate", "gpt2"],
}
OPTION_CASES = [
    ("flops", "--batch", ["0", "-1", str(2**40)]),
    ("flops", "--seq", ["0", str(2**40)]),
    ("flops", "--src-seq", ["-1", str(2**40)]),
    ("flops", "--context", ["inf", "nan", "-5", "1e400", "0k", "x"]),
    ("flops", "--attn", ["fast"]),
    ("memory", "--concurrency", ["0", str(2**40)]),
    ("memory", "--kv-dtype", ["fp7"]),
    ("memory", "--precision", ["fp12"]),
    ("memory", "--params", ["nan", "-7B", "0", "1.5", "1e16", "7X"]),
    ("train", "--tokens", ["inf", "nan", "0", "-1T", "1e19"]),
    ("train", "--days", ["inf", "nan", "0", "-1", "1e400"]),
    ("train", "--gpus", ["0", str(2**40)]),
    ("train", "--max-gpus", ["0", str(2**40)]),
    ("train", "--global-batch", ["0", str(2**40)]),
    ("train", "--seq", ["0", str(2**40)]),
    ("train", "--price", ["inf", "nan", "-1", "1e308"]),
    ("train", "--achieved-tflops", ["inf", "nan", "0", "-5", "1e9"]),
    ("train", "--comm-buffer-gib", ["inf", "nan", "-1", "1e9"]),
    ("train", "--fragmentation", ["nan", "1", "-0.1", "inf"]),
    ("train", "--tp", ["0", str(2**40)]),
    ("train", "--zero", ["4", "-1"]),
    ("train", "--micro-batch", ["0"]),
    ("train", "--rows", ["0", "-3", str(10**9)]),
    ("infer", "--context", ["0", "0k", "inf", "1e400", "1.3k"]),
    ("infer", "--concurrency", ["0", str(2**40)]),
    ("infer", "--tokens-per-s", ["inf", "nan", "0", "-1", "1e400"]),
    ("validate", "--batch", ["0"]),
    ("validate", "--kv-tokens", ["-1", str(10**9)]),
    ("validate", "--device", ["tpu"]),
]


@pytest.mark.parametrize("cmd, option, value", [(c, o, v) for c, o, vs in OPTION_CASES
                                                for v in vs])
def test_bad_option_value_is_one_line(capsys, cmd, option, value):
    line = check_cli_error(capsys, MODEL_CMDS[cmd] + [option, value], option)
    assert value.lstrip("-") in line.replace(",", "") or repr(float(value)) in line, line


@pytest.mark.parametrize("option, value", [("--gpu-gb", "inf"), ("--price", "nan"),
                                           ("--days", "-1"), ("--tokens", "1e5000"),
                                           ("--context", "0k"), ("--tokens-per-s", "inf"),
                                           ("--batch", "0"), ("--params", "inf")])
def test_report_options_refused_before_anything_is_written(capsys, tmp_path, option, value):
    out = tmp_path / "r"
    model = [] if option == "--params" else ["gpt2"]
    check_cli_error(capsys, ["report", *model, "-o", str(out), option, value], option)
    assert not out.exists()


# --- strict JSON: a non-finite number never reaches stdout ---------------------------------------

def test_emit_json_refuses_nan_as_one_line(capsys, monkeypatch):
    from txcalc.engine.accounting import ParamCounts

    monkeypatch.setattr(ParamCounts, "to_json", lambda self: {"total_params": float("nan")})
    line = check_cli_error(capsys, ["params", "gpt2", "--json"], "not a finite number")
    assert "NaN" in line or "nan" in line.lower()


def test_every_plan_json_is_strict(capsys):
    out = run_json(capsys, ["plan", "train", "gpt2", "--tokens", "1B", "--price", "1e6",
                            "--achieved-tflops", "0.001", "--days", "1e6"])
    assert out["cost"] > 0 and out["days"] > 0


def test_report_json_is_strict():
    from txcalc.errors import TxcalcError
    from txcalc.report.writer import report_json

    assert json.loads(report_json({"x": 1.5})) == {"x": 1.5}
    with pytest.raises(TxcalcError, match="not a finite number"):
        report_json({"x": float("inf")})


# --- the parsers themselves -----------------------------------------------------------------------

@pytest.mark.parametrize("text, n", [("80e9", 80 * 10**9), ("70B", 70 * 10**9),
                                     ("1.5T", 1_500_000_000_000), ("7,000,000", 7_000_000),
                                     ("15t", 15 * 10**12), ("2k", 2000), ("1P", 10**15)])
def test_parse_count(text, n):
    assert inputs.parse_count(text) == n
    from txcalc.engine.workload import parse_count  # the old import name still works
    assert parse_count(text) == n


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "Infinity", "1e1000000", "1e-1000000",
                                  "", "  ", "0", "-5", "1.5", "1e19", "7X", "x" * 200, None, True,
                                  4.5, "0x10", "1k5", "k"])
def test_parse_count_refuses(text):
    with pytest.raises(txcalc.TxcalcError, match=r"^count"):
        inputs.parse_count(text)


@pytest.mark.parametrize("sign", [1, -1])
def test_parse_count_refuses_an_int_too_long_to_print(sign):
    # str() of an int over 4,300 digits raises ValueError in Python 3.11+
    with pytest.raises(txcalc.TxcalcError, match=r"^count .* exceeds"):
        inputs.parse_count(sign * 10**5000)


def test_error_messages_cut_long_values():
    with pytest.raises(txcalc.TxcalcError) as e:
        inputs.parse_count("9" * 5000)
    assert len(str(e.value)) < 200 and "..." in str(e.value)
