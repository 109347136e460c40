"""Hostile files and config values (issue 10, items 2 and 6): every input file is read by
``txcalc.safeio`` and every config field is bounded, so each case below answers or exits 2 with
one line naming the value, in bounded time, leaving nothing on disk.

FIFOs are created with ``os.mkfifo``: before safeio, ``txcalc params x.json`` on a FIFO blocked
forever in ``open``; the tests run the CLI in a subprocess with a timeout so that a regression
fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import txcalc
from txcalc import ConfigError, ModelConfig, TxcalcError
from txcalc.cli import main
from txcalc.model.checks import MAX_LAYERS, MAX_VOCAB
from txcalc.model.hf import from_hf_dict
from txcalc.safeio import MAX_FILE_BYTES, MAX_INT_DIGITS, MAX_JSON_DEPTH, read_json

REPO = Path(__file__).resolve().parents[2]
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}
GPU_HEADER = ("name,aliases,memory,memory_unit,hbm_gb_per_s,fp32_tflops,tf32_tflops,bf16_tflops,"
              "fp16_tflops,fp8_tflops,int8_tops,intra_node_gb_per_s,inter_node_gb_per_s,"
              "gpus_per_node,source\n")
GPU_ROW = "mygpu,,80,GiB,2000,50,400,800,800,0,800,300,50,8,me"

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


def one_line_error(capsys, argv, *names) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("txcalc: error"), err
    for name in names:
        assert name in err, (name, err)
    return err


def run_cli(args, cwd, timeout=60) -> subprocess.CompletedProcess:
    """The CLI in a subprocess (a hang fails the test at ``timeout`` instead of blocking)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "txcalc", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_exit_2(r: subprocess.CompletedProcess, *names) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    for name in names:
        assert name in r.stderr, (name, r.stderr)


# --------------------------------------------------------------------------------------------
# files that are not regular files
# --------------------------------------------------------------------------------------------

@needs_fifo
@pytest.mark.parametrize("where", ["x.json", "model/config.json"])
def test_fifo_config_is_refused_at_once(tmp_path, where):
    fifo = tmp_path / where
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    arg = str(fifo) if where == "x.json" else str(fifo.parent)
    r = run_cli(["params", arg], tmp_path, timeout=30)
    assert_one_line_exit_2(r, str(fifo), "FIFO")
    assert time.perf_counter() - t0 < 20
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        p.name for p in [fifo] + ([fifo.parent] if where != "x.json" else []))


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_symlink_to_dev_zero_is_refused(tmp_path, capsys):
    link = tmp_path / "x.json"
    link.symlink_to("/dev/zero")
    one_line_error(capsys, ["params", str(link)], str(link), "character device")


def test_directory_named_json_is_refused(tmp_path, capsys):
    (tmp_path / "d.json").mkdir()
    one_line_error(capsys, ["params", str(tmp_path / "d.json")], "no such file")


def test_file_over_the_size_cap_is_refused_before_reading(tmp_path, capsys):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: costs no disk
        f.truncate(MAX_FILE_BYTES + 1)
    one_line_error(capsys, ["params", str(big)], str(big), "limit")


@needs_fifo
def test_fifo_gpu_file_is_refused(tmp_path, capsys):
    os.mkfifo(tmp_path / "gpus.csv")
    one_line_error(capsys, ["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100",
                            "--gpu-file", str(tmp_path / "gpus.csv")], "gpus.csv", "FIFO")


@needs_fifo
def test_fifo_calibration_input_is_refused(tmp_path, capsys):
    os.mkfifo(tmp_path / "r.json")
    one_line_error(capsys, ["calibrate", str(tmp_path / "r.json"), "--gpu", "h200", "--out",
                            str(tmp_path / "p.json")], "r.json", "FIFO")
    assert not (tmp_path / "p.json").exists()


# --------------------------------------------------------------------------------------------
# paths the OS refuses
# --------------------------------------------------------------------------------------------

def test_nul_in_path_is_a_config_error():
    with pytest.raises(ConfigError, match="NUL"):
        txcalc.load("a\0b.json")


def test_path_component_over_255_bytes(tmp_path, capsys):
    path = str(tmp_path / ("a" * 300) / "config.json")
    one_line_error(capsys, ["params", path], "300 bytes", "255")


# --------------------------------------------------------------------------------------------
# JSON that is too deep, too long or not strict
# --------------------------------------------------------------------------------------------

def test_config_nested_1000_deep(tmp_path, capsys):
    p = tmp_path / "deep.json"
    p.write_text('{"a":' * 1000 + "1" + "}" * 1000)
    one_line_error(capsys, ["params", str(p)], "deep.json", "1000 levels",
                   str(MAX_JSON_DEPTH))


def test_nesting_inside_strings_does_not_count(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"a": "[[[{{{" * 100, "b": ["x\\\"[" * 50]}))
    assert read_json(p)["a"].startswith("[[[")


def test_integer_of_5000_digits(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(LLAMA)[:-1] + ', "x": ' + "1" * 5000 + "}")
    one_line_error(capsys, ["params", str(p)], "5000 digits", str(MAX_INT_DIGITS))


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_not_json(tmp_path, capsys, token):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(LLAMA)[:-1] + f', "hidden_size": {token}}}')
    one_line_error(capsys, ["params", str(p)], token)


def test_hidden_size_10_to_2200(tmp_path, capsys):
    """Digits over the JSON limit in a file; a bound error from the library dict."""
    p = tmp_path / "c.json"
    p.write_text(json.dumps(LLAMA)[:-1] + ', "hidden_size": 1' + "0" * 2200 + "}")
    one_line_error(capsys, ["params", str(p)], "2201 digits")
    with pytest.raises(ConfigError, match=r"d_model \(about 10\^2200\) exceeds"):
        from_hf_dict(dict(LLAMA, hidden_size=10**2200))
    with pytest.raises(ConfigError, match=r"about 10\^5000"):  # str() of it would raise
        ModelConfig(name="t", n_layers=2, d_model=64, n_heads=4, vocab_size=10**5000)


# --------------------------------------------------------------------------------------------
# config fields out of range
# --------------------------------------------------------------------------------------------

def test_vocab_10_to_19_is_refused_in_plan_train_and_infer(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(LLAMA, vocab_size=10**19)))
    for argv in (["plan", "train", str(tmp_path), "--tokens", "1T", "--gpu", "h100"],
                 ["plan", "infer", str(tmp_path), "--gpu", "h100", "--context", "1k"],
                 ["params", str(tmp_path)]):
        one_line_error(capsys, argv, "vocab_size", "about 10^19", f"{MAX_VOCAB:,}")


def test_million_layers_refused_by_the_bound_at_once(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(LLAMA, num_hidden_layers=10**6)))
    t0 = time.perf_counter()
    one_line_error(capsys, ["params", str(p)], "n_layers (1000000)", f"{MAX_LAYERS:,}")
    assert time.perf_counter() - t0 < 2


def test_deepest_allowed_model_answers_in_seconds(tmp_path, capsys):
    """MAX_LAYERS layers: params and a training plan come back (not a bound error) quickly."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(LLAMA, num_hidden_layers=MAX_LAYERS)))
    t0 = time.perf_counter()
    assert main(["params", str(p), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total_params"]
    # an independent count: Llama block = 4 d^2 (q,k,v,o at MHA) + 3 d f + 2 d (norms)
    d, f, v = 64, 128, 100
    assert total == MAX_LAYERS * (4 * d * d + 3 * d * f + 2 * d) + 2 * v * d + d
    assert time.perf_counter() - t0 < 10


def test_size_product_bound():
    with pytest.raises(ConfigError, match=r"layers \(2048\) x d_model \(1048576\)"):
        ModelConfig(name="t", n_layers=2048, d_model=2**20, d_ff=2**20, n_heads=4096,
                    vocab_size=100)


@pytest.mark.parametrize("value", ["two", 3, True, 0])
def test_falcon_num_ln_in_parallel_attn_must_be_1_or_2(value):
    raw = {"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4,
           "num_hidden_layers": 2, "vocab_size": 100, "new_decoder_architecture": True,
           "num_kv_heads": 4, "num_ln_in_parallel_attn": value}
    with pytest.raises(ConfigError, match="num_ln_in_parallel_attn"):
        from_hf_dict(raw)
    for ok, norms in ((1, 1), (2, 2), (None, 2)):
        assert from_hf_dict(dict(raw, num_ln_in_parallel_attn=ok)).parallel_norms \
            == norms


def test_parallel_norms_bool_is_not_an_integer():
    with pytest.raises(ConfigError, match="parallel_norms"):
        ModelConfig(name="t", n_layers=2, d_model=64, n_heads=4, vocab_size=100,
                    parallel_block=True, parallel_norms=True)


def test_long_name_is_refused_with_a_truncated_value():
    with pytest.raises(ConfigError, match=r"at most 256 characters") as e:
        ModelConfig(name="x" * 200_000, n_layers=2, d_model=64, n_heads=4, vocab_size=100)
    assert len(str(e.value)) < 300


def test_planner_int64_guard(monkeypatch, capsys):
    """A plan whose single-GPU bytes pass INT64_SAFE_BYTES is refused, not wrapped."""
    import txcalc.train.planner as planner
    monkeypatch.setattr(planner, "INT64_SAFE_BYTES", 10**9)
    one_line_error(capsys, ["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100"],
                   "64-bit")


# --------------------------------------------------------------------------------------------
# --gpu-file rows
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("row, names", [
    ("x" * 200_000 + ",,80,GiB,2000,50,400,800,800,0,800,300,50,8,me", ["field larger"]),
    ("y" * 100 + ",,80,GiB,2000,50,400,800,800,0,800,300,50,8,me", ["64 printable"]),
    ("mygpu,,1e999999,GiB,2000,50,400,800,800,0,800,300,50,8,me", ["memory", "1e999999"]),
    ("mygpu,,80,GiB,2000,50,400,1e400,800,0,800,300,50,8,me", ["bf16_tflops", "1e400"]),
    ("mygpu,,80,GiB,2000,50,400,inf,800,0,800,300,50,8,me", ["bf16_tflops", "inf"]),
    ("mygpu,,80,GiB,nan,50,400,800,800,0,800,300,50,8,me", ["hbm_gb_per_s", "nan"]),
    ("mygpu,,80,GiB,2000,50,400,800,800,0,800,300,50,8.5,me", ["gpus_per_node", "8.5"]),
    ("mygpu,a;b;a,80,GiB,2000,50,400,800,800,0,800,300,50,8,me", ["'a'", "already given"]),
])
def test_bad_gpu_file_rows(tmp_path, capsys, row, names):
    p = tmp_path / "gpus.csv"
    p.write_text(GPU_HEADER + row + "\n")
    err = one_line_error(capsys, ["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu",
                                  "mygpu", "--gpu-file", str(p)], "gpus.csv", *names)
    assert len(err) < 400


def test_user_gpu_wins_over_the_catalog_alias(tmp_path):
    """Documented choice: a name or alias in --gpu-file names the user's row, never the
    catalog row it was an alias of (h100 is h100-sxm's alias in the catalog)."""
    from txcalc.engine.hardware import get_gpu
    for row in ("h100,,40,GiB,1000,10,100,200,200,0,200,100,25,8,mine",
                "mine,h100,40,GiB,1000,10,100,200,200,0,200,100,25,8,mine"):
        p = tmp_path / "gpus.csv"
        p.write_text(GPU_HEADER + row + "\n")
        g = get_gpu("h100", p)
        assert g.memory_bytes == 40 * 2**30 and g.source == "mine"
        assert get_gpu("h100-sxm", p).memory_bytes == 80 * 2**30  # the catalog row stays
        assert "h100" not in get_gpu("h100-sxm", p).aliases
    assert get_gpu("h100").memory_bytes == 80 * 2**30  # without the file: the catalog's


# --------------------------------------------------------------------------------------------
# calibrate input
# --------------------------------------------------------------------------------------------

def _report(tmp_path, **case_changes) -> Path:
    from txcalc.model.presets import get_preset
    import dataclasses
    cfg = dataclasses.asdict(get_preset("gpt2"))
    case = {"config": cfg, "batch": 1, "seq": 512, "attn_impl": "flash", "recompute": "none",
            "precision": "bf16-mixed", "optimizer": "adamw", "step_time_s": 0.05}
    case.update(case_changes)
    p = tmp_path / "r.json"
    text = json.dumps({"device": case.pop("device", "NVIDIA H200"), "cases": [case]})
    p.write_text(text.replace('"@INF@"', "Infinity").replace('"@NAN@"', "NaN"))
    return p


@pytest.mark.parametrize("changes, names", [
    ({"device": ""}, ["names no GPU", "--gpu"]),
    ({"device": "NVIDIA"}, ["names no GPU"]),
    ({"device": "   "}, ["names no GPU"]),
    ({"device": 7}, ["device (7)"]),
    ({"step_time_s": "@INF@"}, ["Infinity"]),
    ({"step_time_s": "@NAN@"}, ["NaN"]),
    ({"step_time_s": 1e300}, ["step_time_s (1e+300)"]),
    ({"step_time_s": True}, ["step_time_s (True)"]),
    ({"step_time_s": -1}, ["step_time_s (-1)"]),
    ({"step_time_s": "0.05"}, ["step_time_s ('0.05')"]),
    ({"seq": 512.9}, ["seq (512.9)"]),
    ({"batch": True}, ["batch (True)"]),
])
def test_bad_calibration_inputs(tmp_path, capsys, changes, names):
    p = _report(tmp_path, **changes)
    args = ["calibrate", str(p), "--out", str(tmp_path / "p.json")]
    if "device" not in changes:
        args += ["--gpu", "h200"]
    one_line_error(capsys, args, *names)
    assert not (tmp_path / "p.json").exists()


def test_blank_device_with_gpu_given_is_fine(tmp_path, capsys):
    p = _report(tmp_path, device="")
    assert main(["calibrate", str(p), "--gpu", "h200", "--out", str(tmp_path / "p.json"),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpu"] == "h200" and all(math.isfinite(c["after_s"]) for c in out["cases"])


# --------------------------------------------------------------------------------------------
# validation reports read by `txcalc report`
# --------------------------------------------------------------------------------------------

def _strict(text: str):
    def no(s):
        raise AssertionError(f"non-finite {s} in report.json")
    return json.loads(text, parse_constant=no)


@pytest.mark.parametrize("kind", ["nan", "fifo"])
def test_report_skips_nan_and_fifo_validation_files(tmp_path, kind):
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs")
    vdir = tmp_path / "val"
    vdir.mkdir()
    if kind == "fifo":
        os.mkfifo(vdir / "gpt2-cpu.json")
    else:
        good = (REPO / "reports" / "validation" / "gpt2-cpu.json").read_text()
        (vdir / "gpt2-cpu.json").write_text(good.replace('"measured":', '"measured":NaN,"x":', 1))
    out = tmp_path / "r"
    r = run_cli(["report", "gpt2", "--seq", "512", "-o", str(out), "--validation-dir",
                 str(vdir), "--json"], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    data = _strict((out / "report.json").read_text())
    assert "NaN" not in (out / "report.json").read_text()
    assert data


# --------------------------------------------------------------------------------------------
# speed guards
# --------------------------------------------------------------------------------------------

def test_tokens_per_s_search_is_bounded(capsys):
    """Was 35 s (one replica at a time up to 10^5 per layout); now one step per batch size."""
    t0 = time.perf_counter()
    one_line_error(capsys, ["plan", "infer", "llama-3.1-70b", "--gpu", "h200", "--context",
                            "1k", "--tokens-per-s", "1e9"], "1e+09", "decode tokens/s")
    assert time.perf_counter() - t0 < 10


def test_replicas_for_equals_the_linear_scan():
    """The per-batch-size jump returns what trying r = start, start + 1, ... returns, also for
    throughputs that are not monotone in the batch."""
    import random

    from txcalc.serve.infer import MAX_REPLICAS, _replicas_for

    def linear(c, start, target, step_s):
        r = start
        while True:
            per = -(-c // r)
            if target is None or r * per / step_s(per) >= target or r > MAX_REPLICAS:
                return r
            r += 1
    rng = random.Random(10)
    for _ in range(150):
        c = rng.choice([1, 2, 7, 64, 1000, rng.randint(1, 3000)])
        start = rng.randint(1, c)
        a, b, k = rng.uniform(1e-3, 1), rng.uniform(0, 1e-3), rng.uniform(0, 1e-4)
        target = rng.choice([None, rng.uniform(0.1, 1e4), 1e7])

        def step_s(p, a=a, b=b, k=k):
            return a + b * p + k * (p % 3)
        assert _replicas_for(c, start, target, step_s) == linear(c, start, target, step_s)


@pytest.mark.parametrize("argv", [["llama-3.1-70b"], ["gpt2", "--batch", "4096"]])
def test_validate_cpu_refuses_what_will_not_fit(capsys, tmp_path, argv):
    t0 = time.perf_counter()
    err = one_line_error(capsys, ["validate", *argv, "--device", "cpu", "--out",
                                  str(tmp_path / "v")], "GiB", "available")
    assert time.perf_counter() - t0 < 10
    assert not (tmp_path / "v").exists()
    from txcalc.engine.memory import TrainingMemory
    from txcalc.engine.workload import Workload
    batch = int(argv[2]) if len(argv) > 1 else 1
    mem = TrainingMemory(txcalc.load(argv[0]), Workload(batch=batch, seq=512), "bf16-mixed",
                         "adamw")
    assert f"{(mem.total + mem.weights) / 2**30:,.1f} GiB" in err


def test_validate_cpu_guard_uses_available_memory(monkeypatch, capsys, tmp_path):
    import txcalc.cli.validate_cmd as vc
    monkeypatch.setattr(vc, "available_memory_bytes", lambda: 10**6)
    one_line_error(capsys, ["validate", "gpt2", "--device", "cpu", "--seq", "16", "--out",
                            str(tmp_path / "v")], "0.0 GiB available")
    have = vc.__dict__["available_memory_bytes"]
    assert have() == 10**6
    monkeypatch.undo()
    real = vc.available_memory_bytes()
    assert real is None or real > 0


def test_library_errors_are_txcalc_errors(tmp_path):
    for bad in ("a\0b.json", str(tmp_path / ("z" * 300) / "c.json")):
        with pytest.raises(TxcalcError):
            txcalc.load(bad)
