"""CLI contracts of `txcalc flops` / `txcalc memory`, the chapter's example, published KV figures."""

import json

import pytest

from txcalc.cli import main


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_params_json_contract(capsys):
    out = run_json(capsys, "params", "llama-3-8b")
    assert out["total_params"] == 8030261248 and isinstance(out["total_params"], int)


def test_flops_json_contract_matches_the_library(capsys):
    out = run_json(capsys, "flops", "gpt2", "--batch", "2", "--seq", "512", "--attn", "eager")
    for key in ("forward_flops", "backward_flops", "model_flops"):
        assert isinstance(out[key], int)
    assert out["backward_flops"] == 2 * out["forward_flops"]
    assert out["model_flops"] < out["forward_flops"] + out["backward_flops"]


def test_memory_json_contract(capsys):
    out = run_json(capsys, "memory", "llama-3-8b", "--batch", "1", "--seq", "4096")
    keys = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
            "kv_cache_bytes", "total_bytes")
    assert all(isinstance(out[k], int) for k in keys)
    assert out["weights_bytes"] == 2 * 8030261248  # bf16


def test_chapter_80b_example(capsys):
    # The seed chapter, section 8.8: an 80B model in fp16 mixed precision with Adam needs
    # 160 GB weights + 160 GB gradients + 960 GB optimizer state (12 bytes/param: fp32 master
    # weights, first and second moments): over 1 TB, more than any single 80 GB GPU.
    out = run_json(capsys, "memory", "--params", "80e9", "--precision", "fp16-mixed",
                   "--optimizer", "adam")
    assert out["weights_bytes"] == 160 * 10**9
    assert out["gradients_bytes"] == 160 * 10**9
    assert out["optimizer_bytes"] == 960 * 10**9
    assert out["total_bytes"] > 10**12 and out["fits_one_gpu"] is False
    assert main(["memory", "--params", "80B", "--precision", "fp16-mixed", "--optimizer",
                 "adam"]) == 0
    text = capsys.readouterr().out
    # shown in GiB (2^30, issue 29): 160e9 bytes = 149.01 GiB, 960e9 = 894.07 GiB
    assert "149.01 GiB" in text and "894.07 GiB" in text and "does NOT fit" in text


@pytest.mark.parametrize("text,n", [("80e9", 80 * 10**9), ("70B", 70 * 10**9),
                                    ("1.5T", 15 * 10**11), ("7,000,000", 7 * 10**6)])
def test_params_count_forms(capsys, text, n):
    assert run_json(capsys, "memory", "--params", text)["params"] == n


def test_kv_cache_llama_31_published(capsys):
    # Hugging Face, "Llama 3.1 - 405B, 70B & 8B with multilinguality and long context"
    # (2024-07-23), KV-cache table: 128k tokens in fp16 need 39.06 GB for 70B and 15.62 GB
    # for 8B. The blog counts 128,000 tokens and divides by 2**30 (GiB).
    for model, layers, figure in (("llama-3.1-70b", 80, 39.06), ("llama-3-8b", 32, 15.62)):
        out = run_json(capsys, "memory", model, "--inference", "--context", "128000")
        assert out["kv_cache_bytes"] == 2 * layers * 8 * 128 * 2 * 128000
        assert round(out["kv_cache_bytes"] / 2**30, 2) == pytest.approx(figure, abs=0.01)


def test_kv_cache_dtypes_windows_and_mla(capsys):
    base = run_json(capsys, "memory", "llama-3.1-70b", "--inference", "--context", "131072")
    assert base["kv_cache_bytes"] == 2 * 80 * 8 * 128 * 2 * 131072
    for dtype, div in (("fp8", 2), ("int8", 2), ("int4", 4)):
        out = run_json(capsys, "memory", "llama-3.1-70b", "--inference", "--context", "131072",
                       "--kv-dtype", dtype)
        assert out["kv_cache_bytes"] * div == base["kv_cache_bytes"]
    # Mistral 7B keeps at most its 4096-token window per layer
    a = run_json(capsys, "memory", "mistral-7b", "--inference", "--context", "4096")
    b = run_json(capsys, "memory", "mistral-7b", "--inference", "--context", "32768")
    assert a["kv_cache_bytes"] == b["kv_cache_bytes"]
    # DeepSeek-V3 caches (512 + 64) elements per token and layer: 70,272 bytes/token in bf16
    # (DeepSeek-V2 paper, arXiv:2405.04434, Table 1: (d_c + d_h^R) * l elements per token)
    ds = run_json(capsys, "memory", "deepseek-v3", "--inference", "--context", "1")
    assert ds["kv_cache_bytes_per_token"] == (512 + 64) * 61 * 2
    conc = run_json(capsys, "memory", "llama-3-8b", "--inference", "--context", "1000",
                    "--concurrency", "64")
    assert conc["kv_cache_bytes"] == 64 * 1000 * 2 * 32 * 8 * 128 * 2


def test_decode_flops_grow_with_context(capsys):
    short = run_json(capsys, "flops", "llama-3-8b", "--context", "1024")
    long = run_json(capsys, "flops", "llama-3-8b", "--context", "131072")
    assert long["decode_flops_per_token"] > short["decode_flops_per_token"]
    # the growth is the attention over the cache: 2 (scores+context) * 2 * L * H * h per token
    growth = long["decode_flops_per_token"] - short["decode_flops_per_token"]
    assert growth == 2 * 2 * 32 * 32 * 128 * (131072 - 1024)


def test_moe_decode_counts_active_experts_only(capsys):
    out = run_json(capsys, "flops", "mixtral-8x7b", "--context", "1")
    from txcalc import params
    p = params("mixtral-8x7b")
    # one token: 2 FLOPs per active matmul weight, plus the 1-token attention; no embeddings
    assert out["decode_flops_per_token"] == 2 * (p.active - p.embedding) + 2 * 2 * 32 * 32 * 128 \
        - 2 * sum(o.params_total for o in p.ops if o.kind == "norm")


BAD = [
    ["flops", "gpt2", "--batch", "-1"],
    ["flops", "gpt2", "--batch", "0"],
    ["flops", "gpt2", "--seq", "0"],
    ["flops", "gpt2", "--seq", "2048"],  # learned positions stop at 1024
    ["flops", "gpt2", "--batch", "two"],
    ["flops", "gpt2", "--attn", "fastest"],
    ["flops", "gpt2", "--recompute", "some"],
    ["flops", "bert-base-uncased", "--seq", "128", "--context", "10"],
    ["memory", "gpt2", "--seq", "128", "--precision", "fp12"],
    ["memory", "gpt2", "--seq", "128", "--optimizer", "lion"],
    ["memory", "llama-3-8b", "--inference", "--kv-dtype", "fp6"],
    ["memory", "llama-3-8b", "--inference", "--concurrency", "0"],
    ["memory", "--params", "lots"],
    ["memory", "--params", "-5B"],
    ["memory", "--params", "1.5"],
    ["memory", "--params", "80e9", "--optimizer", "adafactor"],
    ["memory"],
    ["memory", "gpt2", "--params", "80e9"],
    ["memory", "bert-base-uncased", "--inference"],
    ["memory", "gpt2", "--seq", "128", "--gpu-gb", "0"],
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a) for a in BAD])
def test_bad_workloads_one_line_exit_2(capsys, argv):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("txcalc: error")
    assert "Traceback" not in captured.err and captured.out == ""


def test_context_reads_128k_as_131072_tokens(capsys):
    """"128K context" means 128 x 1024 tokens, in `memory` and `flops` as in `plan infer`."""
    from txcalc.cli import main

    assert main(["memory", "llama-3.1-70b", "--inference", "--context", "128k", "--json"]) == 0
    k = json.loads(capsys.readouterr().out)
    assert main(["memory", "llama-3.1-70b", "--inference", "--context", "131072", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_cache_bytes"] == k["kv_cache_bytes"]
    assert k["context"] == 131072
    assert main(["flops", "llama-3-8b", "--context", "128k", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decode_context"] == 131072
    assert main(["memory", "llama-3-8b", "--inference", "--context", "abc"]) == 2
    err = capsys.readouterr().err
    assert "context" in err and "'abc'" in err and len(err.strip().splitlines()) == 1
