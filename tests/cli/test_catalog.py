"""The wider GPU catalog (issue 18 item 4): rows, units, one memory rule; new flagship presets."""

import json

import pytest

import txcalc
from txcalc.cli import main
from txcalc.engine.hardware import get_gpu, gpu_memory, load_catalog

NEW_GPUS = ("t4", "v100-sxm2-32gb", "rtx-a6000", "rtx-3090", "l40", "h20", "gb200", "mi250x",
            "mi250x-gcd", "mi325x", "gaudi3", "tpu-v5e", "tpu-v5p")


@pytest.mark.parametrize("name", NEW_GPUS)
def test_new_rows_parse_with_a_source_and_a_bf16_or_fp16_peak(name):
    g = load_catalog()[name]
    assert g.source.startswith("https://")
    assert max(g.peak_flops["bf16"], g.peak_flops["fp16"]) > 0
    assert g.memory_bytes % 2**30 == 0  # HBM/GDDR capacities are binary


# Published figures, each from the row's datasheet (dense; sparse figures halved)
PUBLISHED = [
    ("T4", 16 * 2**30, "fp16", 65e12, 320e9),            # T4 datasheet: 65 TFLOPS mixed, 320 GB/s
    ("V100", 32 * 2**30, "fp16", 125e12, 900e9),         # V100 SXM2: 125 TFLOPS tensor, 900 GB/s
    ("A6000", 48 * 2**30, "bf16", 154.8e12, 768e9),      # GA102 whitepaper: 154.8 / 309.7 sparse
    ("RTX 3090".replace(" ", "-").lower(), 24 * 2**30, "bf16", 71e12, 936e9),  # GA102: 71 / 142
    ("L40", 48 * 2**30, "fp8", 362e12, 864e9),           # L40 datasheet: 362 / 724 sparse
    ("H20", 96 * 2**30, "bf16", 148e12, 4000e9),         # 148 dense bf16, 4.0 TB/s
    ("GB200", 186 * 2**30, "bf16", 2500e12, 8000e9),     # NVL72: 360 PF sparse fp16 / 72 / 2
    ("MI250X", 128 * 2**30, "bf16", 383e12, 3276.8e9),   # AMD: 383 TFLOPS bf16, 3.2 TB/s
    ("MI325X", 256 * 2**30, "fp8", 2614.9e12, 6000e9),   # AMD: 2614.9 fp8 dense, 6 TB/s
    ("Gaudi3", 128 * 2**30, "bf16", 1835e12, 3670e9),    # Hot Chips 2024: 1835, 3.67 TB/s
    ("v5e", 16 * 2**30, "bf16", 197e12, 819e9),          # Cloud TPU v5e page
    ("v5p", 95 * 2**30, "bf16", 459e12, 2765e9),         # Cloud TPU v5p page
]


@pytest.mark.parametrize("name,memory,dtype,peak,hbm", PUBLISHED)
def test_published_figures(name, memory, dtype, peak, hbm):
    g = get_gpu(name)
    assert (g.memory_bytes, g.peak(dtype), g.hbm_bytes_per_s) == (memory, peak, hbm)


def test_mi250x_module_is_two_gcds():
    m, d = get_gpu("mi250x"), get_gpu("mi250x-gcd")
    assert m.memory_bytes == 2 * d.memory_bytes and m.peak("bf16") == 2 * d.peak("bf16")


def test_h200_usable_memory_sits_under_nvidia_smi():
    """nvidia-smi on the project's H200 shows 143,771 MiB (issue 18); CUDA's total is a little
    below nvidia-smi's (an H100: vLLM logs 79.22 GiB, nvidia-smi 81,559 MiB = 79.65 GiB)."""
    g = get_gpu("h200")
    smi = 143_771 * 2**20
    assert g.usable_bytes < smi < g.memory_bytes
    assert (smi - g.usable_bytes) / smi < 0.01
    h100 = get_gpu("h100")
    assert abs(h100.usable_bytes / 2**30 - 79.22) < 0.03  # 79.20 against 79.22 logged


def test_no_tensor_path_is_an_error_naming_the_gpu():
    from txcalc.engine.hardware import GpuError
    with pytest.raises(GpuError, match="t4 has no dense bf16 peak"):
        get_gpu("t4").peak("bf16")


def _json(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_memory_checks_the_same_gpu_memory_as_plan(capsys):
    """One rule: ``memory`` (default and --gpu), ``fit``, ``plan`` and serving check the same
    bytes, the usable memory (CUDA's total, what serving sizes vLLM's KV cache from), not
    the datasheet's."""
    mem = _json(capsys, ["memory", "llama-3-8b", "--seq", "1024", "--json"])
    plan = _json(capsys, ["plan", "train", "llama-3-8b", "--tokens", "1B", "--json"])
    h100 = get_gpu("h100")
    assert mem["gpu_bytes"] == plan["gpu_usable_bytes"] == h100.usable_bytes
    assert plan["gpu_memory_bytes"] == h100.memory_bytes == 80 * 2**30  # the datasheet's
    mem = _json(capsys, ["memory", "llama-3-8b", "--seq", "1024", "--gpu", "h200", "--json"])
    fit = _json(capsys, ["fit", "llama-3-8b", "--gpu", "h200", "--json"])
    assert mem["gpu_bytes"] == fit["gpu_bytes"] == get_gpu("h200").usable_bytes
    assert mem["gpu"] == "h200"
    mem = _json(capsys, ["memory", "llama-3-8b", "--seq", "1024", "--gpu-gb", "80", "--json"])
    assert mem["gpu_bytes"] == 80 * 10**9  # --gpu-gb: the usable figure as given


def test_gpu_memory_rule():
    """The capacity of every fit check is CUDA's total, ~0.4 GiB under nvidia-smi's total
    (test_h200_usable_memory_sits_under_nvidia_smi); --gpu-gb N is N x 1e9 usable bytes."""
    assert gpu_memory() == (get_gpu("h100").usable_bytes, "h100-sxm", get_gpu("h100").source)
    assert gpu_memory("h200", 100)[:2] == (100 * 10**9, "h200")
    assert gpu_memory(gpu_gb=24.5)[:2] == (24_500_000_000, "24.5 GB GPU")


def test_the_usable_figure_is_printed_with_its_unit_and_what_it_is(capsys):
    from txcalc.engine.hardware import memory_words, with_usable_gb
    h100 = get_gpu("h100")
    assert memory_words(h100) == "79.2 GiB usable: CUDA's total, not the datasheet's 80 GiB"
    assert memory_words(h100, "GB") == ("85.0 GB usable: CUDA's total, not the datasheet's "
                                        "85.9 GB")
    mine = with_usable_gb(h100, 24.5)
    assert mine.usable_bytes == 24_500_000_000 and mine.memory_bytes == h100.memory_bytes
    assert memory_words(mine) == memory_words(24_500_000_000) \
        == "24.5 GB usable, as given by --gpu-gb"
    capsys.readouterr()
    assert main(["memory", "llama-3-8b", "--seq", "1024"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the terminal's line breaks aside
    # memory is shown in GiB (issue 29), the GPU's capacity too: one unit a sentence
    assert "h100-sxm (79.2 GiB usable: CUDA's total, not the datasheet's 80 GiB)" in out
    assert main(["fit", "llama-3-8b", "--gpu", "h100"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(each 79.2 GiB usable" in out or "(79.2 GiB usable" in out
    assert " GB" not in out
    assert main(["fit", "llama-3-8b", "--gpu-gb", "24.5"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "24.5 GB GPU (24.5 GB usable, as given by --gpu-gb)" in out


def test_unknown_gpu_in_memory_is_one_line(capsys):
    assert main(["memory", "gpt2", "--gpu", "h1000"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'h1000'" in err and len(err.strip().splitlines()) == 1


# Model cards: Llama 3.2 1B "1.23B", 3B "3.21B"; Llama 3 / 3.3 70B "70B" (70.6B exact in HF's
# safetensors index: total_size 141,107,412,992 bytes at 2 bytes per parameter)
@pytest.mark.parametrize("name,figure,tol", [
    ("llama-3.2-1b", 1.23e9, 0.005), ("llama-3.2-3b", 3.21e9, 0.005),
    ("llama-3-70b", 141_107_412_992 / 2, 0), ("llama-3.3-70b", 141_107_412_992 / 2, 0)])
def test_new_flagship_presets_published_totals(name, figure, tol):
    assert abs(txcalc.params(name).total - figure) <= tol * figure


def test_llama_3_70b_is_the_8k_original():
    assert txcalc.load("llama-3-70b").max_position == 8192
    assert txcalc.load("llama-3.1-70b").max_position == 131072


def test_a_measured_cuda_total_is_the_usable_memory(tmp_path, capsys):
    """``cuda_total_gib`` (optional, with ``cuda_total_source``) replaces the 0.99 rule for its
    row alone; --gpu-gb still wins; a file without the two columns reads as before; a total
    above the memory or not a number is one line naming the column. The L40S: ECC on by
    default, CUDA shows 44.42 GiB of 48 (the catalog's source, stepfun-ai/Step-Video-T2V issue
    #8; tests/published/test_vllm_logs.py checks it against other logs)."""
    from decimal import Decimal

    from txcalc.engine.hardware import GpuError, memory_words, with_usable_gb
    l40s = get_gpu("l40s")
    assert l40s.cuda_total_bytes == int(Decimal("44.42") * 2**30)
    assert l40s.usable_bytes == l40s.cuda_total_bytes < int(l40s.memory_bytes * 0.99)
    assert memory_words(l40s) == "44.4 GiB usable: CUDA's total, not the datasheet's 48 GiB"
    assert with_usable_gb(l40s, 40).usable_bytes == 40 * 10**9
    assert get_gpu("h100").cuda_total_bytes == 0  # derived: 0.99 x 80 GiB
    head = ("name,aliases,memory,memory_unit,hbm_gb_per_s,fp32_tflops,tf32_tflops,bf16_tflops,"
            "fp16_tflops,fp8_tflops,int8_tops,intra_node_gb_per_s,inter_node_gb_per_s,"
            "gpus_per_node,source")
    row = "mine,,48,GiB,864,90,180,360,360,720,720,32,25,8,https://example.com/sheet"
    f = tmp_path / "gpus.csv"
    f.write_text(f"{head}\n{row}\n")
    assert get_gpu("mine", f).usable_bytes == int(48 * 2**30 * 0.99)
    f.write_text(f"{head},cuda_total_gib,cuda_total_source\n{row},45.5,https://example.com/log\n")
    g = get_gpu("mine", f)
    assert g.usable_bytes == int(45.5 * 2**30) and g.cuda_total_source == "https://example.com/log"
    for bad in ("49", "lots", "-1"):
        f.write_text(f"{head},cuda_total_gib\n{row},{bad}\n")
        with pytest.raises(GpuError, match="cuda_total_gib"):
            get_gpu("mine", f)
    f.write_text(f"{head},cuda_total_gib\n{row},49\n")
    assert main(["fit", "llama-3-8b", "--gpu", "mine", "--gpu-file", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert "cuda_total_gib (49)" in err and "\n" not in err
