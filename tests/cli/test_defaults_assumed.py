"""Defaults a practitioner runs, and every answer says which it assumed (issue 29, item 2):
fp16 on a GPU without bf16 (T4, V100), as vLLM (dtype auto) and the HF Trainer (--fp16) run
there; a preset released in a quantised format served from its released checkpoint."""

import pytest

from .cli_run import run, run_json


def test_plan_infer_on_t4_runs_in_fp16_and_says_so(capsys):
    """The issue's case: `plan infer llama-3-8b --gpu t4 --context 4096` said "device t4 has
    no bf16 peak"; it answers in fp16 (weights and KV cache) and says why."""
    d = run_json(capsys, "plan", "infer", "llama-3-8b", "--gpu", "t4", "--context", "4096")
    assert d["weights"] == "fp16" and d["kv_dtype"] == "fp16"
    assert len(d["assumed"]) == 1 and "fp16" in d["assumed"][0] and "t4" in d["assumed"][0]
    rc, out, _ = run(capsys, "plan", "infer", "llama-3-8b", "--gpu", "t4", "--context", "4096")
    assert rc == 0 and "weights fp16" in out and "Assumed: weights, activations and KV" in out


def test_fp16_default_only_without_bf16(capsys):
    """An H100 keeps bf16 and assumes nothing; --precision wins over the default, and bf16
    asked of a T4 is refused in one line that names the way forward."""
    d = run_json(capsys, "plan", "infer", "llama-3-8b", "--gpu", "h100", "--context", "4096")
    assert d["weights"] == "bf16" and d["kv_dtype"] == "bf16" and d["assumed"] == []
    d = run_json(capsys, "plan", "infer", "llama-3-8b", "--gpu", "t4", "--context", "4096",
                 "--precision", "fp16", "--kv-dtype", "fp8")
    assert d["weights"] == "fp16" and d["kv_dtype"] == "fp8" and d["assumed"] == []
    rc, _, err = run(capsys, "plan", "infer", "llama-3-8b", "--gpu", "t4", "--context", "4096",
                     "--precision", "bf16")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "no bf16 peak" in err and "fp16" in err


def test_serving_plan_on_v100_runs_in_fp16(capsys):
    """The SLO and offline modes take the same defaults (they failed on the bf16 peak)."""
    d = run_json(capsys, "plan", "infer", "llama-3.2-1b", "--gpu", "v100", "--input-len", "512",
                 "--output-len", "128", "--rate", "inf")
    assert d["weights"] == "fp16" and d["kv_dtype"] == "fp16" and "fp16" in d["assumed"][0]


@pytest.mark.parametrize("argv", [
    ("memory", "llama-3.2-1b", "--gpu", "t4", "--seq", "1024"),
    ("fit", "llama-3.2-1b", "--gpu", "v100"),
    ("plan", "train", "llama-3.2-1b", "--gpu", "t4", "--tokens", "1B", "--seq", "1024"),
])
def test_training_on_t4_v100_defaults_to_fp16_mixed(capsys, argv):
    """memory, fit and plan train take fp16-mixed on a GPU without bf16 (plan train refused
    with "no bf16 peak"), say so in the JSON's assumed and on the terminal."""
    d = run_json(capsys, *argv)
    assert d["precision"] == "fp16-mixed"
    # the precision first; fit also assumes gradient checkpointing (issue 28)
    assert "fp16-mixed" in d["assumed"][0]
    assert sum("fp16-mixed" in a for a in d["assumed"]) == 1
    rc, out, _ = run(capsys, *argv)
    assert rc == 0 and "Assumed: precision fp16-mixed" in out


def test_training_default_stays_bf16_mixed(capsys):
    d = run_json(capsys, "memory", "llama-3.2-1b", "--seq", "1024")
    assert d["precision"] == "bf16-mixed" and d["assumed"] == []
    d = run_json(capsys, "memory", "llama-3.2-1b", "--gpu", "h100", "--seq", "1024")
    assert d["precision"] == "bf16-mixed" and d["assumed"] == []


def test_gpt_oss_served_from_its_mxfp4_checkpoint(capsys):
    """The issue's case: `plan infer gpt-oss-120b --gpu h100 --context 8k` answered in bf16
    (233.7 GB, 4 GPUs); its released checkpoint is MXFP4 (65,248,815,744 bytes of tensors,
    openai/gpt-oss-120b model.safetensors.index.json), which one H100 holds."""
    d = run_json(capsys, "plan", "infer", "gpt-oss-120b", "--gpu", "h100", "--context", "8k")
    assert d["weights"] == "mxfp4" and d["total_gpus"] == 1
    assert 65e9 < d["weights_bytes"] < 66e9
    assert len(d["assumed"]) == 1 and "mxfp4" in d["assumed"][0]
    assert "released" in d["assumed"][0]
    rc, out, _ = run(capsys, "plan", "infer", "gpt-oss-120b", "--gpu", "h100", "--context", "8k")
    assert rc == 0 and "weights mxfp4" in out and "Assumed: weights mxfp4" in out
    bf16 = run_json(capsys, "plan", "infer", "gpt-oss-120b", "--gpu", "h100", "--context", "8k",
                    "--weights", "bf16")
    assert bf16["total_gpus"] > 1 and bf16["assumed"] == []


def test_released_format_is_the_checkpoints(capsys):
    """params counts a released-quantised preset's checkpoint in its released format, as a
    config.json's quantization_config is read; a bf16 preset stays bf16."""
    d = run_json(capsys, "params", "gpt-oss-120b")
    assert d["weights"] == "mxfp4" and d["checkpoint_bytes"] == 65_248_815_744
    assert run_json(capsys, "params", "llama-3-8b")["weights"] == "bf16"
    from txcalc import load
    from txcalc.engine.formats import resolve
    assert resolve(load("gpt-oss-20b"))[0].name == "mxfp4"
    assert resolve(load("deepseek-v3"))[0].name == "fp8-block"
    assert resolve("gpt-oss-120b")[0].name == "mxfp4"  # a preset's name, as the report passes
    assert resolve(load("llama-3-8b"))[0] is None
    assert resolve(load("gpt-oss-20b"), "bf16")[0].name == "bf16"
