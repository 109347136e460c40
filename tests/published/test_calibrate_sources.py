"""`txcalc calibrate` from its three sources: a torch.profiler Chrome trace (kernel times by
class), a reference/gpu_validate.py report (step times, and peak memory per phase against
max_memory_allocated) and the published runs (the fit behind timing.GPU_EFFICIENCY)."""

from __future__ import annotations

import json

import pytest

from txcalc.train import calibrate as C
from txcalc import load
from txcalc.cli import main
from txcalc.engine.hardware import get_gpu
from txcalc.engine.timing import DeviceProfile
from txcalc.engine.workload import Workload

# kernel names as CUDA profiles print them (cuBLAS on A100/H100, FlashAttention-2, PyTorch's
# memory-efficient SDPA, cuDNN SDPA, elementwise kernels)
KERNELS = {
    "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn": "matmul",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1": "matmul",
    "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NTN": "matmul",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t>, false, true>(Flash_fwd_params)": "attention",
    "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel)":
        "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128": "attention",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>":
        "memory",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float>": "memory",
}


@pytest.mark.parametrize("name,cls", KERNELS.items())
def test_kernel_names_are_classed(name, cls):
    assert C.kernel_class(name) == cls


def _trace(times: dict, steps: int) -> dict:
    """A Chrome trace as torch.profiler exports it: complete events, dur in microseconds,
    a ProfilerStep# annotation per step; each class's time split over two kernels."""
    names = {"matmul": list(KERNELS)[:2], "attention": list(KERNELS)[3:5],
             "memory": list(KERNELS)[6:8]}
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": i,
           "dur": 1} for i in range(steps)]
    for cls, t in times.items():
        for n in names[cls]:
            ev.append({"ph": "X", "cat": "kernel", "name": n, "ts": 0,
                       "dur": t * steps / 2 * 1e6})
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5e9})  # not GPU
    return {"traceEvents": ev, "deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}]}


def test_trace_fit_recovers_known_efficiencies(tmp_path, capsys):
    truth = DeviceProfile.from_gpu(get_gpu("h100")).replace(
        flop_efficiency={"matmul": 0.61, "attention": 0.33}, bw_efficiency=0.7)
    case = C.Case("x", load("llama-3-8b"), Workload(batch=2, seq=4096, attn_impl="flash"),
                  "bf16-mixed", "adamw", 1.0)
    (tmp_path / "t.json").write_text(json.dumps(_trace(C.class_times_s(case, truth), 3)))
    out = tmp_path / "p.json"
    assert main(["calibrate", str(tmp_path / "t.json"), "--gpu", "h100", "--model",
                 "x", "--batch", "2", "--seq", "4096", "--out", str(out), "--json"]) == 2
    assert capsys.readouterr().err.count("\n") == 1  # "x" is no model: one line, exit 2
    assert main(["calibrate", str(tmp_path / "t.json"), "--gpu", "h100", "--model",
                 "llama-3-8b", "--batch", "2", "--seq", "4096", "--out", str(out),
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["input"] == "trace"
    assert r["flop_efficiency"]["matmul"] == pytest.approx(0.61, rel=0.02)
    assert r["flop_efficiency"]["attention"] == pytest.approx(0.33, rel=0.02)
    assert r["bw_efficiency"] == pytest.approx(0.7, rel=0.05)
    assert all(abs(c["after_error_pct"]) < 2 for c in r["cases"])
    assert DeviceProfile.load(out).flop_efficiency["matmul"] == r["flop_efficiency"]["matmul"]


def test_trace_needs_its_workload_and_cuda_kernels(tmp_path, capsys):
    (tmp_path / "t.json").write_text(json.dumps(_trace({"matmul": 1.0}, 1)))
    assert main(["calibrate", str(tmp_path / "t.json"), "--gpu", "h100",
                 "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "give --model, --batch, --seq" in err and err.count("\n") == 1
    assert not (tmp_path / "p.json").exists()


def test_a_cpu_profiler_trace_has_no_cuda_kernels(tmp_path):
    """A real torch.profiler export (CPU only here): read as a trace, refused for having no
    CUDA kernel events."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(64, 64) @ torch.ones(64, 64)
    prof.export_chrome_trace(str(tmp_path / "cpu.json"))
    kind, doc = C.read_input(tmp_path / "cpu.json")
    assert kind == "trace"
    with pytest.raises(C.CalibrationInputError, match="no CUDA kernel events"):
        C.read_trace(doc)


@pytest.fixture(scope="module")
def validate_report():
    """A report in exactly reference/gpu_validate.py's format: one tiny case run by its own
    run_case on the CPU, given the measured phases a CUDA run records."""
    pytest.importorskip("torch")
    from reference.gpu_validate import CASES, run_case, tiny
    case = run_case(tiny(CASES[0]), "cpu", steps=1)
    p = case["predicted"]
    case["measured"] = {"forward": {"allocated": 1, "max_allocated": p["peak_forward"] + 1000,
                                    "max_reserved": 2 * p["peak_forward"]},
                        "backward": {"allocated": 1, "max_allocated": p["peak_backward"],
                                     "max_reserved": 2 * p["peak_backward"]},
                        "step": {"allocated": 1, "max_allocated": 2 * p["peak_step"],
                                 "max_reserved": 3 * p["peak_step"]}}
    return {"device": "NVIDIA H200", "dry_run": False, "cases": [case, {"model": "big",
                                                                          "error": "OOM"}]}


def test_validation_report_memory_errors_per_phase(validate_report):
    errs = {e["phase"]: e for e in C.memory_errors(validate_report)}
    p = validate_report["cases"][0]["predicted"]
    assert errs["backward"]["error_pct"] == 0
    assert errs["step"]["error_pct"] == pytest.approx(-50)
    assert errs["forward"]["error_pct"] == pytest.approx(
        100 * (p["peak_forward"] / (p["peak_forward"] + 1000) - 1))
    device, cases = C.read_report("r", validate_report)
    assert device == "NVIDIA H200" and len(cases) == 1


def test_calibrate_cli_prints_the_memory_table(validate_report, tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps(validate_report))
    assert main(["calibrate", str(tmp_path / "r.json"), "--out", str(tmp_path / "p.json"),
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["input"] == "validation" and r["gpu"] == "h200"
    assert [m["phase"] for m in r["memory"]] == ["forward", "backward", "step"]
    assert main(["calibrate", str(tmp_path / "r.json"), "--out", str(tmp_path / "p.json")]) == 0
    assert "peak memory per phase" in capsys.readouterr().out


def test_dry_run_report_has_no_memory_rows():
    """A CPU dry run measures no CUDA phases: nothing to compare, nothing invented."""
    report = {"cases": [{"model": "m", "predicted": {"peak_forward": 10}, "measured": {},
                         "step_time_s": 1.0}]}
    assert C.memory_errors(report) == []
