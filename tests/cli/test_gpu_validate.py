"""reference/gpu_validate.sh dry-runs every case on the CPU at toy sizes (CI); on a GPU the
same code measures peak memory per phase and kernel times."""

import json
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).parents[2]


def test_gpu_script_dry_run_on_cpu_writes_every_case(tmp_path):
    r = subprocess.run([str(ROOT / "reference" / "gpu_validate.sh"), str(tmp_path), "--dry-run"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_validation.json").read_text())
    assert report["dry_run"] and len(report["cases"]) == 11
    seen = {(c["attn_impl"], c["recompute"]) for c in report["cases"]}
    assert {("eager", "none"), ("flash", "none"), ("flash", "selective"),
            ("flash", "full"), ("eager", "selective")} <= seen
    assert any(c["model"].startswith("moe") for c in report["cases"])
    for case in report["cases"]:
        assert case["step_time_s"] > 0 and case["kernels"]
        assert case["predicted"]["peak"] >= case["predicted"]["after_forward"] > 0
    # the file is what `txcalc calibrate` reads: every case a usable one
    from txcalc.train.calibrate import memory_errors, read_input, read_report
    kind, doc = read_input(tmp_path / "gpu_validation.json")
    assert kind == "validation" and len(read_report("r", doc)[1]) == 11
    assert memory_errors(doc) == [] and report["peak_error_pct_worst"] == {}  # nothing measured


def test_peak_error_summary_takes_the_worst_case_per_phase():
    """What a CUDA run reports per phase (a small synthetic result list in run_case's keys);
    a dry run measures nothing and summarises to nothing."""
    from reference.gpu_validate import peak_error_summary
    results = [{"model": "a", "seq": 512, "attn_impl": "eager", "recompute": "none",
                "peak_error_pct": {"forward": 1.5, "backward": -7.0, "step": 0.2}},
               {"model": "b", "seq": 4096, "attn_impl": "flash", "recompute": "full",
                "peak_error_pct": {"forward": -3.0, "backward": 2.0, "step": 0.1}},
               {"model": "c", "error": "OOM: ..."}]
    s = peak_error_summary(results)
    assert s["forward"] == {"error_pct": -3.0, "case": "b s4096 flash full"}
    assert s["backward"]["error_pct"] == -7.0 and s["step"]["error_pct"] == 0.2
    assert peak_error_summary([{"model": "x", "seq": 1, "attn_impl": "eager",
                                "recompute": "none", "measured": {}}]) == {}
