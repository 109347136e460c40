"""`txcalc calibrate`: the fit recovers known efficiencies from step times made with them, the
fitted profile loads back, and bad reports are one line, exit 2. (That the roofline predicts a
real GPU within 20% after calibration needs GPU measurements: reference/gpu_validate.sh.)"""

import dataclasses
import json

import pytest

from txcalc.train.calibrate import Case, step_time_s
from txcalc.cli import main
from txcalc.model.config import ModelConfig
from txcalc.engine.hardware import get_gpu
from txcalc.engine.timing import DeviceProfile
from txcalc.engine.workload import Workload

LLAMA = dict(activation="swiglu", norm_type="rmsnorm", tie_embeddings=False, vocab_size=32000,
             max_position=32768)
CFGS = [ModelConfig(name="l125m", n_layers=12, d_model=768, n_heads=12, d_ff=2048, **LLAMA),
        ModelConfig(name="l1b", n_layers=16, d_model=2048, n_heads=16, n_kv_heads=8, d_ff=5632,
                    **LLAMA)]
RUNS = [(0, 8, 512, "eager", "none"), (0, 1, 8192, "eager", "none"), (1, 1, 4096, "flash", "none"),
        (1, 1, 16384, "flash", "selective"), (1, 1, 64, "flash", "full"),
        (0, 1, 32, "eager", "none")]


def synthetic_report(path, prof):
    cases = []
    for i, b, s, attn, rc in RUNS:
        case = Case("x", CFGS[i], Workload(batch=b, seq=s, attn_impl=attn, recompute=rc),
                    "bf16-mixed", "adamw", 1.0)
        cases.append({"config": dataclasses.asdict(CFGS[i]), "batch": b, "seq": s,
                      "attn_impl": attn, "recompute": rc, "precision": "bf16-mixed",
                      "optimizer": "adamw", "step_time_s": step_time_s(case, prof)})
    cases.append({"model": "too big", "error": "OOM"})  # failed cases are ignored
    path.write_text(json.dumps({"device": "NVIDIA H200", "cases": cases}))


def test_fit_recovers_known_efficiencies(tmp_path, capsys):
    truth = DeviceProfile.from_gpu(get_gpu("h200")).replace(
        flop_efficiency={"matmul": 0.62, "attention": 0.38}, bw_efficiency=0.71)
    synthetic_report(tmp_path / "r.json", truth)
    out = tmp_path / "h200.json"
    assert main(["calibrate", str(tmp_path / "r.json"), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["gpu"] == "h200"
    assert result["flop_efficiency"]["matmul"] == pytest.approx(0.62, rel=0.03)
    assert result["flop_efficiency"]["attention"] == pytest.approx(0.38, rel=0.03)
    assert result["bw_efficiency"] == pytest.approx(0.71, rel=0.03)
    assert all(abs(c["after_error_pct"]) < 1 for c in result["cases"])
    assert max(abs(c["before_error_pct"]) for c in result["cases"]) > 5
    assert DeviceProfile.load(out).flop_efficiency["matmul"] == result["flop_efficiency"]["matmul"]


@pytest.mark.parametrize("content,needle", [
    ("not json", "cannot read validation report"),
    (json.dumps({"cases": [{"model": "x", "error": "OOM"}]}), "no cases"),
    (json.dumps({"cases": [{"config": {"name": "x"}, "step_time_s": 1}]}), "cannot read"),
])
def test_bad_reports_are_one_line_exit_2(tmp_path, capsys, content, needle):
    (tmp_path / "r.json").write_text(content)
    assert main(["calibrate", str(tmp_path / "r.json"), "--gpu", "h200",
                 "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("txcalc: error") and needle in err and err.count("\n") == 1
    assert not (tmp_path / "p.json").exists()


def test_unknown_gpu_is_one_line_exit_2(tmp_path, capsys):
    synthetic_report(tmp_path / "r.json", DeviceProfile.from_gpu(get_gpu("h100")))
    assert main(["calibrate", str(tmp_path / "r.json"), "--gpu", "h300",
                 "--out", str(tmp_path / "p.json")]) == 2
    assert "unknown GPU 'h300'" in capsys.readouterr().err
