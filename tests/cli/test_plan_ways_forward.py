"""plan train's refusals name a way forward, and it offloads the optimizer (issue 29, item 5):
no layout splitting the global batch names the nearest batches and GPU counts that would; a
model that fits no layout names what would (fit's reckoning: 8-bit Adam, optimizer offload,
more GPUs); --offload optimizer, as memory and fit spell it, timed over PCIe."""

import re

import pytest

from txcalc.parallel.comm import PCIE_BYTES_PER_S

from .cli_run import run, run_json

TRAIN = ("plan", "train")


def refused(capsys, *argv) -> str:
    """The one-line refusal (exit 2) of ``txcalc *argv``."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (rc, out, err)
    return err


def plans(capsys, *argv) -> bool:
    return run(capsys, *argv, "--json")[0] == 0


def test_a_batch_no_layout_splits_names_the_nearest_that_do(capsys):
    """24 GPUs = 8 x 3, and llama-3.2-1b's TP, PP and CP degrees are powers of two: 1,024
    sequences split over no data-parallel degree the 24 GPUs leave. The refusal names the
    nearest batches below and above that do and the GPU counts on which 1,024 does: each
    plans, and nothing between them and the batch asked does."""
    argv = (*TRAIN, "llama-3.2-1b", "--tokens", "1B", "--gpus", "24", "--global-batch", "1024")
    err = refused(capsys, *argv)
    assert "no valid layout of llama-3.2-1b on exactly 24 GPUs with global batch 1024" in err
    lo, hi = map(int, re.search(r"--global-batch (\d+) or (\d+)", err).groups())
    fewer, more = map(int, re.search(r"--gpus (\d+) or (\d+) for global batch 1024",
                                     err).groups())
    assert lo < 1024 < hi and fewer < 24 < more
    for batch in (lo, hi):
        assert plans(capsys, *argv[:-1], str(batch))
    for batch in range(lo + 1, hi):
        if batch != 1024:
            refused(capsys, *argv[:-1], str(batch))
    for gpus in (fewer, more):
        assert plans(capsys, *argv[:6], str(gpus), *argv[7:])
    # GPU counts are whole nodes of 8 (or below one): none lies between 16 and 32 but 24
    assert (fewer, more) == (16, 32)


def test_a_model_that_fits_no_layout_names_what_would(capsys):
    """The issue's case: Mixtral 8x7B with ZeRO-3 on 8 H100s, refused by plan train where fit
    gives a breakdown. The refusal names 8-bit Adam, the optimizer offloaded and more GPUs,
    each of which fit finds to fit at the plan's sequence where fit --gpus 8 alone does not,
    and plan train then plans each."""
    base = (*TRAIN, "mixtral-8x7b", "--tokens", "1T", "--gpus", "8", "--zero", "3")
    err = refused(capsys, *base)
    assert "does not fit" in err and "smallest per-GPU need is" in err
    ways = dict(re.findall(r"(--optimizer adam8bit|--offload optimizer|--gpus \d+) "
                           r"\(([\d.,]+) GiB\)", err))
    assert set(ways) == {"--optimizer adam8bit", "--offload optimizer", "--gpus 16"}
    fit = ("fit", "mixtral-8x7b", "--gpu", "h100", "--seq", "4096")
    assert not run_json(capsys, *fit, "--gpus", "8")["fits"]
    for way, gib in ways.items():
        flag, value = way.split()
        got = run_json(capsys, *fit, *(("--gpus", value) if flag == "--gpus"
                                       else ("--gpus", "8", flag, value)))
        assert got["fits"] and float(gib) * 2**30 <= got["limit_bytes"], way
        argv = [*base[:6], value, *base[7:]] if flag == "--gpus" else [*base, flag, value]
        assert plans(capsys, *argv), way


#: llama-3-8b's parameters: 8,030,261,248 (the Hugging Face checkpoint's safetensors total,
#: meta-llama/Meta-Llama-3-8B)
LLAMA3_8B_PARAMS = 8_030_261_248
ONE = (*TRAIN, "llama-3-8b", "--tokens", "1T", "--gpus", "8", "--zero", "3", "--tp", "1",
       "--pp", "1", "--micro-batch", "1", "--recompute", "full", "--global-batch", "512")


def test_optimizer_offload_moves_the_states_to_the_host_and_times_pcie(capsys):
    """ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840, section 4): the fp32 master weights,
    Adam's two moments and the fp32 gradients (16 bytes a parameter) live on the CPU, and a
    step sends the 16-bit gradients out and the 16-bit weights back (4 bytes a parameter).
    Under ZeRO-3 over 8 GPUs each rank holds an eighth: its host bytes are 16 P / 8, its GPU
    sheds at least the 12 P / 8 of states and master, and its step grows by at most the 4 P / 8
    bytes over PCIe (less the GPU optimizer step it no longer runs), by most of it."""
    none = run_json(capsys, *ONE)
    off = run_json(capsys, *ONE, "--offload", "optimizer")
    assert none["offload"] == "none" and off["offload"] == "optimizer"
    b0, b1 = none["best"], off["best"]
    assert b0["layout"] == b1["layout"] and b0["host_bytes"] == 0
    share = LLAMA3_8B_PARAMS / 8
    assert b1["host_bytes"] == pytest.approx(16 * share, rel=1e-5)
    assert b0["total_bytes"] - b1["total_bytes"] >= 12 * share
    pcie_s = 4 * share / PCIE_BYTES_PER_S
    assert 0.8 * pcie_s <= b1["step_time_s"] - b0["step_time_s"] <= pcie_s
    said = " ".join(off["assumed"])
    assert "optimizer offloaded" in said and "PCIe" in said and "not modelled" in said
    assert not any("offload" in a for a in none["assumed"])
    rc, out, _ = run(capsys, *ONE, "--offload", "optimizer")
    assert rc == 0 and "host memory (offloaded optimizer)" in " ".join(out.split())
    assert "Assumed: optimizer offloaded" in out


def test_offload_all_also_offloads_the_checkpoints(capsys):
    d = run_json(capsys, *ONE, "--offload", "all")
    assert d["best"]["layout"]["offload_checkpoints"] and d["best"]["host_bytes"] > 0
    assert len(d["assumed"]) == 2


@pytest.mark.parametrize("argv,words", [
    (("--offload", "gpu"), "--offload ('gpu') must be one of none, optimizer, activations, all"),
    (("--offload", "activations", "--keep-checkpoints"), "--keep-checkpoints refuses"),
])
def test_bad_offloads_are_refused_in_one_line(capsys, argv, words):
    assert words in refused(capsys, *ONE, *argv)
