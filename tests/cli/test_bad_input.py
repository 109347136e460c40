"""Bad input of every kind: one clear line on stderr, exit code 2, no traceback.

Each CLI case runs ``txcalc.cli.main`` in-process and checks: return code 2, stdout empty,
stderr exactly one non-empty line starting ``txcalc: error``, naming the offending value(s),
and no ``Traceback``. A few cases run the installed ``txcalc`` script in a subprocess, so the
check covers what a real terminal would show. The library cases check ``ModelConfig`` directly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import txcalc
import txcalc.cli
from txcalc import ConfigError, ModelConfig, TxcalcError
from txcalc.cli import main

#: A small valid Llama config.json; each case changes one or two fields.
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}
MISSING = object()


def write(tmp_path: Path, content, name: str = "config.json") -> str:
    """Write ``content`` (a JSON-able object, a str or bytes) under tmp_path; return its path."""
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif isinstance(content, str):
        p.write_text(content, encoding="utf-8")
    else:
        p.write_text(json.dumps(content), encoding="utf-8")
    return str(p)


def llama(**changes) -> dict:
    """LLAMA with fields changed; MISSING removes a field."""
    d = dict(LLAMA)
    for k, v in changes.items():
        if v is MISSING:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def check_cli_error(capsys, argv: list[str], *names: str) -> str:
    """Run the CLI and assert the one-line error contract; return the line."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert out == "", out
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert err.endswith("\n") and err.count("\n") == 1, repr(err)
    line = lines[0]
    assert line.startswith("txcalc: error") and len(line) > len("txcalc: error: ") + 5, line
    for name in names:
        assert name in line, (name, line)
    return line


# --------------------------------------------------------------------------------------------
# CLI: names and paths
# --------------------------------------------------------------------------------------------

def test_unknown_preset_with_close_match(capsys):
    line = check_cli_error(capsys, ["params", "lama-3-8b"], "'lama-3-8b'", "did you mean",
                           "llama-3-8b")
    assert "known:" not in line


def test_unknown_preset_without_close_match_lists_presets(capsys):
    line = check_cli_error(capsys, ["params", "zzqqxx"], "'zzqqxx'", "known:")
    for name in ("gpt2", "llama-3-8b", "mixtral-8x7b"):
        assert name in line


def test_missing_config_json_path(capsys, tmp_path):
    missing = str(tmp_path / "nowhere" / "config.json")
    check_cli_error(capsys, ["params", missing], missing, "no such file")


def test_directory_without_config_json(capsys, tmp_path):
    (tmp_path / "model").mkdir()
    check_cli_error(capsys, ["params", str(tmp_path / "model")],
                    str(tmp_path / "model" / "config.json"), "no such file")


def test_empty_file(capsys, tmp_path):
    path = write(tmp_path, "")
    check_cli_error(capsys, ["params", path], path, "empty")


def test_whitespace_only_file(capsys, tmp_path):
    path = write(tmp_path, "  \n\n  ")
    check_cli_error(capsys, ["params", path], path, "empty")


def test_truncated_json(capsys, tmp_path):
    path = write(tmp_path, json.dumps(LLAMA)[:40])
    check_cli_error(capsys, ["params", path], path, "malformed JSON", "line 1")


def test_malformed_json_unquoted_keys(capsys, tmp_path):
    path = write(tmp_path, "{model_type: llama}")
    check_cli_error(capsys, ["params", path], path, "malformed JSON", "column 2")


def test_malformed_json_on_a_later_line(capsys, tmp_path):
    path = write(tmp_path, '{\n  "model_type": "llama",\n  "hidden_size": 64,,\n}')
    check_cli_error(capsys, ["params", path], path, "malformed JSON", "line 3")


@pytest.mark.parametrize("content, kind", [("[1, 2, 3]", "list"), ("42", "int"),
                                           ('"llama"', "str"), ("null", "NoneType")])
def test_json_that_is_not_an_object(capsys, tmp_path, content, kind):
    path = write(tmp_path, content)
    check_cli_error(capsys, ["params", path], path, "expected a JSON object", kind)


def test_non_utf8_file(capsys, tmp_path):
    path = write(tmp_path, b'{"model_type": "\xff\xfe llama"}')
    check_cli_error(capsys, ["params", path], path, "utf-8", "0xff")


# --------------------------------------------------------------------------------------------
# CLI: model_type
# --------------------------------------------------------------------------------------------

def test_missing_model_type(capsys, tmp_path):
    path = write(tmp_path, llama(model_type=MISSING))
    check_cli_error(capsys, ["params", path], "model_type", "llama", "gpt2", "t5")


def test_unknown_model_type_lists_supported(capsys, tmp_path):
    path = write(tmp_path, llama(model_type="llamma"))
    check_cli_error(capsys, ["params", path], "'llamma'", "supported:", "llama", "mixtral",
                    "bart")


def test_model_type_that_is_not_a_string(capsys, tmp_path):
    path = write(tmp_path, llama(model_type=["llama"]))
    check_cli_error(capsys, ["params", path], "model_type", "['llama']", "supported:")


# --------------------------------------------------------------------------------------------
# CLI: field types
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [("abc", "'abc'"), (3.5, "3.5"), (True, "True"),
                                          ([64], "[64]"), ({"a": 1}, "{'a': 1}")])
def test_non_integer_hidden_size(capsys, tmp_path, value, shown):
    path = write(tmp_path, llama(hidden_size=value))
    check_cli_error(capsys, ["params", path], "hidden_size", shown, "integer")


@pytest.mark.parametrize("how", ["null", "absent"])
def test_required_field_null_or_absent(capsys, tmp_path, how):
    path = write(tmp_path, llama(hidden_size=None if how == "null" else MISSING))
    check_cli_error(capsys, ["params", path], "hidden_size", "missing")


def test_non_boolean_tie_word_embeddings(capsys, tmp_path):
    path = write(tmp_path, llama(tie_word_embeddings="yes"))
    check_cli_error(capsys, ["params", path], "tie_word_embeddings", "'yes'", "true or false")


@pytest.mark.parametrize("key,value", [("attention_dropout", 1.5), ("attention_dropout", "x")])
def test_bad_dropout_probability(capsys, tmp_path, key, value):
    path = write(tmp_path, llama(**{key: value}))
    check_cli_error(capsys, ["params", path], key, repr(value), "[0, 1)")


def test_unknown_activation(capsys, tmp_path):
    path = write(tmp_path, llama(hidden_act="tanhh"))
    check_cli_error(capsys, ["params", path], "hidden_act", "'tanhh'", "silu")


def test_non_integer_sliding_window(capsys, tmp_path):
    path = write(tmp_path, llama(model_type="mistral", sliding_window="abc"))
    check_cli_error(capsys, ["params", path], "sliding_window", "'abc'")


# --------------------------------------------------------------------------------------------
# CLI: sizes and shapes
# --------------------------------------------------------------------------------------------

SIZE_FIELDS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
               "intermediate_size", "num_key_value_heads"]


@pytest.mark.parametrize("value", [0, -64])
@pytest.mark.parametrize("field", SIZE_FIELDS)
def test_zero_or_negative_size(capsys, tmp_path, field, value):
    # 0 must not fall back to a derived default (4 * d_model, n_heads, ...): it is an error
    path = write(tmp_path, llama(**{field: value}))
    check_cli_error(capsys, ["params", path], field, f"({value})", "positive")


def test_several_bad_sizes_are_all_named(capsys, tmp_path):
    path = write(tmp_path, llama(hidden_size=0, vocab_size=-1, num_hidden_layers=-2))
    check_cli_error(capsys, ["params", path], "hidden_size", "(0)", "vocab_size", "(-1)",
                    "num_hidden_layers", "(-2)")


def test_zero_size_in_gpt2_and_t5_field_names(capsys, tmp_path):
    path = write(tmp_path, {"model_type": "gpt2", "n_embd": 0, "n_layer": 2}, "gpt2.json")
    check_cli_error(capsys, ["params", path], "n_embd", "(0)")
    path = write(tmp_path, {"model_type": "t5", "d_kv": -8}, "t5.json")
    check_cli_error(capsys, ["params", path], "d_kv", "(-8)")


def test_heads_not_divisible_by_kv_heads(capsys, tmp_path):
    path = write(tmp_path, llama(num_key_value_heads=3))
    check_cli_error(capsys, ["params", path], "n_heads (4)", "divisible", "n_kv_heads (3)")


def test_kv_heads_exceed_heads(capsys, tmp_path):
    path = write(tmp_path, llama(num_key_value_heads=8))
    check_cli_error(capsys, ["params", path], "n_kv_heads (8)", "n_heads (4)")


def test_top_k_exceeds_experts(capsys, tmp_path):
    path = write(tmp_path, llama(model_type="mixtral", num_local_experts=8,
                                 num_experts_per_tok=9))
    check_cli_error(capsys, ["params", path], "top_k (9)", "n_experts (8)")


def test_odd_head_dim_with_rotary(capsys, tmp_path):
    path = write(tmp_path, llama(head_dim=15))
    check_cli_error(capsys, ["params", path], "head_dim (15)", "even", "rotary")


def test_bart_encoder_decoder_widths_differ(capsys, tmp_path):
    # issue 13: unequal encoder/decoder MLP widths are modelled per stack (no longer refused;
    # tests/conformance/test_encoder_decoders.py checks the counts against HF)
    path = write(tmp_path, {"model_type": "bart", "encoder_ffn_dim": 3072,
                            "decoder_ffn_dim": 2048})
    assert main(["params", path]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "Traceback" not in out


def test_bart_default_width_is_named_not_none(capsys, tmp_path):
    # 12 encoder heads do not divide the default d_model of 1024 (HF refuses it too)
    path = write(tmp_path, {"model_type": "bart", "encoder_attention_heads": 12})
    line = check_cli_error(capsys, ["params", path], "encoder_attention_heads (12)",
                           "d_model (1024)")
    assert "None" not in line


@pytest.mark.parametrize("types", [5, ["sliding_attention"], ["sliding_attention", "local"]])
def test_layer_types_malformed(capsys, tmp_path, types):
    path = write(tmp_path, llama(model_type="qwen2", use_sliding_window=True, sliding_window=16,
                                 layer_types=types))
    check_cli_error(capsys, ["params", path], "layer_types", repr(types), "2 layers")


# --------------------------------------------------------------------------------------------
# CLI: usage
# --------------------------------------------------------------------------------------------

def test_unknown_cli_option(capsys):
    check_cli_error(capsys, ["params", "gpt2", "--bogus"], "--bogus")


def test_missing_argument(capsys):
    check_cli_error(capsys, ["params"], "Missing argument", "model")


def test_unknown_command(capsys):
    check_cli_error(capsys, ["frobnicate"], "frobnicate")


def test_value_given_to_a_flag(capsys):
    check_cli_error(capsys, ["params", "gpt2", "--json=abc"], "--json")


def test_non_numeric_option(capsys, monkeypatch):
    # txcalc's typed options (batch, sequence, ...) all go through the same click conversion;
    # an app with one int and one float option checks that main turns it into one line.
    probe = typer.Typer(add_completion=False)

    @probe.command()
    def run(batch: int = typer.Option(1, "--batch"), lr: float = typer.Option(1.0, "--lr")):
        pass

    @probe.command()
    def other():
        pass

    monkeypatch.setattr(txcalc.cli, "app", probe)
    check_cli_error(capsys, ["run", "--batch", "abc"], "--batch", "'abc'")
    check_cli_error(capsys, ["run", "--batch", "3.5"], "--batch", "'3.5'")
    check_cli_error(capsys, ["run", "--lr", "fast"], "--lr", "'fast'")


def test_multi_line_library_message_prints_as_one_line(capsys, monkeypatch):
    def boom(model):
        raise ConfigError("first line\nsecond line")

    monkeypatch.setattr(txcalc, "load", boom)
    check_cli_error(capsys, ["params", "gpt2"], "first line second line")


# --------------------------------------------------------------------------------------------
# The installed console script: nothing but one line reaches a real terminal
# --------------------------------------------------------------------------------------------

def _script() -> list[str]:
    exe = shutil.which("txcalc")
    if exe:
        return [exe]
    return [sys.executable, "-c", "import sys; from txcalc.cli import main; sys.exit(main())"]


@pytest.mark.parametrize("case", ["preset", "truncated", "model_type_list", "option", "zero"])
def test_console_script_one_line_exit_2(tmp_path, case):
    argv = {
        "preset": ["params", "lama-3-8b"],
        "truncated": ["params", write(tmp_path, json.dumps(LLAMA)[:30])],
        "model_type_list": ["params", write(tmp_path, llama(model_type=["llama"]))],
        "option": ["params", "gpt2", "--bogus"],
        "zero": ["params", write(tmp_path, llama(intermediate_size=0))],
    }[case]
    env = dict(os.environ, COLUMNS="60", TERM="xterm-256color")  # a narrow terminal
    r = subprocess.run(_script() + argv, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("txcalc: error"), r.stderr


# --------------------------------------------------------------------------------------------
# Library: ModelConfig raises one ConfigError naming every offending value
# --------------------------------------------------------------------------------------------

GOOD = dict(name="m", n_layers=2, d_model=64, n_heads=4, vocab_size=100)


def cfg(**changes) -> ModelConfig:
    return ModelConfig(**(GOOD | changes))


def test_good_config_is_accepted():
    assert cfg().head_dim == 16


@pytest.mark.parametrize("field", ["n_layers", "d_model", "n_heads", "vocab_size", "d_ff",
                                   "max_position", "moe_every"])
@pytest.mark.parametrize("value", [-1, -4096])
def test_library_negative_size(field, value):
    with pytest.raises(ConfigError, match=rf"{field} \({value}\) must be a positive integer"):
        cfg(**{field: value})


@pytest.mark.parametrize("field", ["n_layers", "n_heads", "vocab_size", "max_position"])
def test_library_zero_size(field):
    with pytest.raises(ConfigError, match=rf"{field} \(0\) must be a positive integer"):
        cfg(**{field: 0})


@pytest.mark.parametrize("value", ["abc", 3.5, True, None, [64]])
def test_library_non_integer_size(value):
    with pytest.raises(ConfigError, match=r"d_model \(" + __import__("re").escape(repr(value))):
        cfg(d_model=value)


def test_library_several_bad_values_all_named():
    with pytest.raises(ConfigError) as e:
        cfg(n_layers=0, vocab_size=-5, activation="tanhh", family="foo", qkv_bias="yes",
            top_k=-1)
    msg = str(e.value)
    assert "\n" not in msg
    for part in ("n_layers (0)", "vocab_size (-5)", "activation ('tanhh')", "family ('foo')",
                 "qkv_bias ('yes')", "top_k (-1)"):
        assert part in msg, (part, msg)


def test_library_several_structural_problems_all_named():
    with pytest.raises(ConfigError) as e:
        cfg(n_kv_heads=3, head_dim=15, global_every=2, parallel_norms=3)
    msg = str(e.value)
    for part in ("n_heads (4)", "n_kv_heads (3)", "head_dim (15)", "global_every (2)",
                 "parallel_norms (3)"):
        assert part in msg, (part, msg)


@pytest.mark.parametrize("field, value, choice", [
    ("activation", "tanhh", "swiglu"), ("family", "foo", "encoder-decoder"),
    ("norm_type", "batchnorm", "rmsnorm"), ("pos_type", "rope", "rotary"),
    ("qk_norm", "yes", "head"), ("head", "cls", "lm"), ("norm_position", "middle", "sandwich"),
])
def test_library_bad_enum_lists_choices(field, value, choice):
    with pytest.raises(ConfigError, match=rf"{field} \('{value}'\) must be one of .*{choice}"):
        cfg(**{field: value})


def test_library_heads_not_divisible():
    with pytest.raises(ConfigError, match=r"n_heads \(4\) must be divisible by n_kv_heads \(3\)"):
        cfg(n_kv_heads=3)


def test_library_kv_heads_exceed_heads():
    with pytest.raises(ConfigError, match=r"n_kv_heads \(8\) must not exceed n_heads \(4\)"):
        cfg(n_kv_heads=8)


def test_library_top_k_exceeds_experts():
    with pytest.raises(ConfigError, match=r"top_k \(9\) must be between 1 and n_experts \(8\)"):
        cfg(n_experts=8, top_k=9)


def test_library_moe_fields_without_experts():
    with pytest.raises(ConfigError, match=r"top_k \(2\) needs n_experts > 0"):
        cfg(top_k=2)


def test_library_encoder_decoder_needs_encoder_layers():
    with pytest.raises(ConfigError, match=r"n_encoder_layers \(0\) must be positive"):
        cfg(family="encoder-decoder")


def test_library_dense_layers_out_of_range():
    with pytest.raises(ConfigError, match=r"dense_layers \[5\] exceed n_layers \(2\)"):
        cfg(n_experts=4, top_k=1, dense_layers=(5,))


def test_library_replace_is_validated():
    with pytest.raises(ConfigError, match=r"d_model \(-1\)"):
        cfg().replace(d_model=-1)


def test_library_errors_are_value_errors():
    assert issubclass(ConfigError, TxcalcError) and issubclass(TxcalcError, ValueError)


def test_library_load_unknown_preset_suggests():
    with pytest.raises(ConfigError, match=r"'lama-3-8b'.*did you mean llama-3-8b"):
        txcalc.load("lama-3-8b")


def test_library_from_hf_dict_not_a_dict():
    from txcalc.model.hf import from_hf_dict

    with pytest.raises(ConfigError, match=r"expected a JSON object, got list"):
        from_hf_dict([LLAMA])
