"""reference/gpu_validate.sh dry-runs every case on the CPU at toy sizes (CI); on a GPU the
same code measures peak memory per phase and kernel times."""

import json
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).parents[1]


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
