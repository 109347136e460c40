"""An option reads the same in every command that has it (issue 29, item 4): a sequence length
reads k as --context does (``--seq 4k`` = 4096), ``plan train`` takes ``--gpu-gb`` as memory
and fit do, and plan infer's load mode gives the paged KV cache (``kv_blocks``,
``kv_tokens``) as its capacity mode does."""

import pytest

from .cli_run import run, run_json


@pytest.mark.parametrize("argv", [
    ("flops", "gpt2", "--seq", "{}"),
    ("memory", "gpt2", "--seq", "{}"),
    ("fit", "gpt2", "--gpu", "h100", "--seq", "{}"),
    ("plan", "train", "gpt2", "--tokens", "1B", "--seq", "{}"),
    ("flops", "t5-small", "--seq", "512", "--src-seq", "{}"),
    ("memory", "t5-small", "--seq", "512", "--src-seq", "{}"),
])
def test_sequences_read_k_as_contexts_do(capsys, argv):
    """`--seq 1k` was refused everywhere ("Input should be a valid integer"), though the README
    says sequences read k; it is 1024 tokens, the answer the same as `--seq 1024`."""
    k = run_json(capsys, *(a.format("1k") for a in argv))
    n = run_json(capsys, *(a.format("1024") for a in argv))
    assert k == n
    key = "src_seq" if "--src-seq" in argv else "seq"
    if key in k:
        assert k[key] == 1024


@pytest.mark.parametrize("text,shown,why", [("1.3k", "'1.3k'", "not a whole number"),
                                            ("0", "(0)", "between 1 and"),
                                            ("0k", "'0k'", "positive"),
                                            ("abc", "'abc'", "cannot read"),
                                            ("1e12", "'1e12'", "exceeds")])
def test_a_bad_sequence_is_one_line_naming_it(capsys, text, shown, why):
    rc, out, err = run(capsys, "memory", "gpt2", "--seq", text)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--seq" in err and shown in err and why in err


def test_src_seq_zero_still_means_the_same_as_seq(capsys):
    a = run_json(capsys, "flops", "t5-small", "--seq", "512", "--src-seq", "0")
    b = run_json(capsys, "flops", "t5-small", "--seq", "512", "--src-seq", "512")
    assert a == b


def test_plan_train_takes_gpu_gb(capsys):
    """`plan train` had no --gpu-gb (memory and fit have it): the fit checks use the figure,
    the GPU's speeds stay the catalog's."""
    full = run_json(capsys, "plan", "train", "llama-3.2-1b", "--tokens", "1B", "--seq", "4k",
                    "--gpu", "h100")
    small = run_json(capsys, "plan", "train", "llama-3.2-1b", "--tokens", "1B", "--seq", "4k",
                     "--gpu", "h100", "--gpu-gb", "10")
    assert small["gpu_usable_bytes"] == 10 * 10**9
    assert small["min_gpus_to_fit"] > full["min_gpus_to_fit"]
    rc, out, _ = run(capsys, "plan", "train", "llama-3.2-1b", "--tokens", "1B", "--gpu", "h100",
                     "--gpu-gb", "10")
    assert rc == 0 and "10 GB usable, as given by --gpu-gb" in out
    rc, _, err = run(capsys, "plan", "train", "llama-3.2-1b", "--tokens", "1B", "--gpu-gb", "-1")
    assert rc == 2 and "--gpu-gb" in err and len(err.strip().splitlines()) == 1


def test_plan_infer_load_mode_gives_the_kv_cache(capsys):
    """The load mode's JSON has kv_blocks / kv_tokens per GPU of its best layout, as the
    capacity mode's has: the tokens the simulation's replica holds (over its stages)."""
    d = run_json(capsys, "plan", "infer", "llama-3-8b", "--gpu", "h100", "--input-len", "1k",
                 "--output-len", "256", "--rate", "2")
    assert d["kv_tokens"] * d["pp"] == d["kv_tokens_per_replica"]
    assert d["kv_blocks"] * 16 == d["kv_tokens"] and d["kv_cache_bytes"] > 0
    assert d["kv_capacity"]["max_model_len"] == 1024 + 256
    cap = run_json(capsys, "plan", "infer", "llama-3-8b", "--gpu", "h100", "--context", "4k")
    assert {"kv_blocks", "kv_tokens", "kv_cache_bytes", "kv_capacity"} <= set(cap) & set(d)
    d = run_json(capsys, "plan", "infer", "llama-3-8b", "--gpu", "h100", "--input-len", "1k",
                 "--output-len", "256", "--rate", "2", "--block-size", "32",
                 "--max-num-batched-tokens", "4096")
    assert d["kv_blocks"] * 32 == d["kv_tokens"] == d["kv_tokens_per_replica"]
