"""Planner: published figures (each cited, with its tolerance), JSON contract, bad input."""

from __future__ import annotations

import json

import pytest

from txcalc import load
from txcalc.cli import main
from txcalc.errors import PlanError
from txcalc.serve.infer import plan_infer
from txcalc.train.planner import plan_train


# --- published figures ----------------------------------------------------------------------
def test_narayanan_gpt3_175b_34_days():
    """Narayanan et al., SC21 (arXiv:2104.04473), section 5.1: GPT-3 175B on 1024 A100s, 300B
    tokens, 140 TFLOP/s per GPU: "about 34 days" (their 8TP/(nX), full recompute).
    Tolerance 5% (the paper rounds; its exact formula adds attention and logits, +3%).
    Megatron's 2021 attention is unfused (eager): backward = 2 x forward. Their 34 days is
    throughput time (no restarts): goodput 1."""
    p = plan_train(load("gpt3-175b"), "a100-80gb", 300 * 10**9, gpus=1024, seq=2048,
                   global_batch=1536, achieved_tflops=140, only={"recompute": "full"},
                   attn_impl="eager", goodput=1.0)
    assert p.best.gpus == 1024
    assert p.best.days == pytest.approx(34, rel=0.05)
    # and their per-iteration FLOPs, eq. (3): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), exactly
    B, s, l, h, V = 1536, 2048, 96, 12288, 50257
    eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    assert p.best.hardware_flops_step == pytest.approx(eq3, rel=1e-12)


def test_gpt3_training_compute():
    """Brown et al. 2020 (arXiv:2005.14165), Table D.1: GPT-3 175B used 3.14e23 FLOPs for 300B
    tokens (6ND, attention left out). Tolerance 3% (our model FLOPs add causal attention)."""
    p = plan_train(load("gpt3-175b"), "a100-80gb", 300 * 10**9, seq=2048)
    assert p.model_flops == pytest.approx(3.14e23, rel=0.03)


def test_llama3_405b_compute_and_gpu_hours():
    """Grattafiori et al. 2024 (arXiv:2407.21783), section 3.2 and 3.3: 405B trained with
    3.8e25 FLOPs on 15.6T tokens at 8192 context, 16,384 H100s, 16M-token batches; the
    Llama 3.1 model card (huggingface.co/meta-llama/Llama-3.1-405B) gives 30.84M H100
    GPU-hours; section 3.3.2, Table 4: 38-43% BF16 MFU. FLOPs: 5% (the paper's 6ND omits
    attention); GPU-hours: 25% (the default, uncalibrated efficiencies; the card also counts
    restarts and failures); MFU: the published range widened by 5 points."""
    p = plan_train(load("llama-3.1-405b"), "h100", int(15.6e12), seq=8192, global_batch=2048,
                   gpus=16384)
    assert p.model_flops == pytest.approx(3.8e25, rel=0.05)
    assert p.best.gpu_hours == pytest.approx(30.84e6, rel=0.25)
    assert 0.33 <= p.best.mfu <= 0.48


def test_llama2_70b_gpu_hours():
    """Touvron et al. 2023 (arXiv:2307.09288), Table 2: Llama 2 70B took 1,720,320 A100-80GB
    GPU-hours for 2T tokens at 4096 context, 4M-token batches. Tolerance 25%: default
    efficiencies, not calibrated to Meta's cluster."""
    p = plan_train(load("llama-2-70b"), "a100-80gb", 2 * 10**12, seq=4096, global_batch=1024)
    assert p.best.gpu_hours == pytest.approx(1_720_320, rel=0.25)


# --- answers --------------------------------------------------------------------------------
def test_deadline_needs_more_gpus_than_fit():
    p = plan_train(load("llama-3-8b"), "h100", 15 * 10**12, days=30)
    assert p.min_gpus_to_fit <= p.gpus_for_deadline == p.best.gpus
    assert p.best.days <= 30
    assert p.best.total_bytes <= p.setting.gpu.usable_bytes
    table = p.table(5)
    assert list(table["gpus"])[0] == p.best.gpus and len(table) <= 5


def test_min_gpus_to_fit_is_tight():
    """No layout on fewer GPUs fits: pinning the GPU count below the minimum fails."""
    p = plan_train(load("llama-3-8b"), "a100-40gb", 10**12)
    n = p.min_gpus_to_fit
    assert n > 1
    with pytest.raises(PlanError, match="does not fit"):
        plan_train(load("llama-3-8b"), "a100-40gb", 10**12, max_gpus=n - 1)


def test_train_json_contract():
    r = _cli_json(["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100", "--days",
                   "60", "--price", "2.5"])
    assert isinstance(r["total_gpus"], int) and r["total_gpus"] > 0
    assert isinstance(r["gpu_hours"], float) and isinstance(r["days"], float)
    assert r["days"] <= 60
    assert r["cost"] == pytest.approx(r["gpu_hours"] * 2.5)
    for key in ("weights", "gradients", "optimizer", "activations", "framework"):
        assert isinstance(r["best"]["memory_bytes"][key], int)
    assert r["min_gpus_to_fit"] <= r["gpus_for_deadline"] == r["total_gpus"]


def test_infer_json_contract():
    r = _cli_json(["plan", "infer", "llama-3.1-70b", "--gpu", "h200", "--context", "128k",
                   "--concurrency", "64", "--kv-dtype", "fp8"])
    assert isinstance(r["total_gpus"], int) and isinstance(r["max_concurrency"], int)
    assert r["context"] == 131072
    assert r["max_concurrency"] >= 64
    assert r["total_gpus"] == r["replicas"] * r["tp"] * r["pp"]
    assert r["prefill_latency_s"] > 0 and r["decode_tokens_per_s"] > 0


def test_infer_kv_budget_matches_engine():
    """max concurrency per replica x KV bytes per sequence fits beside the weights."""
    from txcalc.engine.kvcache import kv_cache_bytes
    cfg = load("llama-3.1-70b")
    p = plan_infer(cfg, "h200", 131072, 64, kv_dtype="fp8")
    b = p.best
    assert b.kv_bytes_per_seq == -(-kv_cache_bytes(cfg, 131072, 1, "fp8") // b.tp // b.pp)
    assert b.weights_bytes + b.max_concurrency_per_replica * b.kv_bytes_per_seq \
        <= p.gpu.usable_bytes
    frame = p.table()
    assert list(frame["total_gpus"])[0] == b.total_gpus and len(frame) == len(p.rows)
    fast = plan_infer(cfg, "h200", 131072, 64, kv_dtype="fp8", tokens_per_s=20000)
    assert fast.best.decode_tokens_per_s >= 20000 and fast.best.total_gpus >= b.total_gpus


def _cli_json(argv):
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(argv + ["--json"])
    assert rc == 0
    return json.loads(buf.getvalue())


# --- infeasible requests: one line, exit 2 ----------------------------------------------------
BAD = [
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "h1000"], ("h1000", "h100")),
    (["plan", "train", "llama-3.1-405b", "--tokens", "1T", "--gpu", "h100", "--max-gpus", "8"],
     ("does not fit", "8")),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "h100", "--days", "0.001"],
     ("0.001",)),
    (["plan", "train", "llama-3-8b", "--tokens", "lots", "--gpu", "h100"], ("lots",)),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpus", "3", "--global-batch", "7"],
     ("3", "7")),
    (["plan", "infer", "llama-3.1-405b", "--gpu", "l4", "--context", "100M"], ("l4", "100,000,000")),
    (["plan", "infer", "llama-3-8b", "--gpu", "h100", "--context", "4k", "--kv-dtype", "fp7"],
     ("fp7",)),
    (["plan", "infer", "bert-base-uncased", "--gpu", "h100", "--context", "512"], ("encoder",)),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "a100",
      "--precision", "fp12"], ("fp12",)),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--fragmentation", "1.5"], ("1.5",)),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--tp", "3"],
     ("TP degree (3)", "n_heads (32)")),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--tp", "16"],
     ("TP degree (16)", "n_kv_heads (8)")),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--ep", "2"], ("ep 2", "experts")),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--recompute", "most"], ("most",)),
    (["plan", "train", "llama-3-8b", "--tokens", "1T", "--tp", "8", "--gpus", "12"],
     ("12",)),
    (["plan", "infer", "llama-3-8b", "--context", "8k", "--cuda-context-gib", "-1"],
     ("cuda_context_bytes",)),
]


@pytest.mark.parametrize("argv,names", BAD, ids=[" ".join(a[1:4]) + f"-{i}"
                                                 for i, (a, _) in enumerate(BAD)])
def test_infeasible_one_line_exit_2(capsys, argv, names):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("txcalc: error") and "Traceback" not in err
    for name in names:
        assert name in lines[0], (name, lines[0])


def test_bad_gpu_files(tmp_path, capsys):
    good = "name,aliases,memory,memory_unit,hbm_gb_per_s,fp32_tflops,tf32_tflops,bf16_tflops," \
           "fp16_tflops,fp8_tflops,int8_tops,intra_node_gb_per_s,inter_node_gb_per_s," \
           "gpus_per_node,source\n"
    cases = {
        "missing.csv": None,
        "nocols.csv": "name,memory\nx,1\n",
        "badnum.csv": good + "mygpu,,eighty,GiB,100,1,1,1,1,0,1,10,1,8,me\n",
        "badunit.csv": good + "mygpu,,80,MB,100,1,1,1,1,0,1,10,1,8,me\n",
        "empty.csv": "",
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        rc = main(["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "mygpu",
                   "--gpu-file", str(path)])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (name, err)
        assert name in err, err
    path = tmp_path / "ok.csv"
    path.write_text(good + "mygpu,my,80,GiB,2000,50,400,800,800,0,800,300,50,8,me\n")
    r = _cli_json(["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "my",
                   "--gpu-file", str(path)])
    assert r["gpu"] == "mygpu" and r["gpu_memory_bytes"] == 80 * 2**30


def test_framework_terms_are_overridable():
    """The framework category is context + comm buffers + fragmentation x the tensors."""
    from txcalc.parallel.overheads import Overheads
    cfg = load("llama-3-8b")
    plain = plan_train(cfg, "h100", 10**12, gpus=8, only={"tp": 8, "micro_batch": 1},
                       overheads=Overheads(0, 0, 0.0))
    ov = Overheads.from_gib(2, 1, 0.1)
    more = plan_train(cfg, "h100", 10**12, gpus=8, only={"tp": 8, "micro_batch": 1},
                      overheads=ov)
    a, b = plain.best, more.best
    assert a.layout == b.layout and a.memory["framework"] == 0
    tensors = a.total_bytes
    assert b.memory["framework"] == 3 * 2**30 + int(tensors * 0.1)


def test_tp_not_dividing_heads():
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout, LayoutError
    from txcalc.engine.hardware import get_gpu
    s = TrainSetting(load("llama-3-8b"), get_gpu("h100"), 4096, 64)
    with pytest.raises(LayoutError, match=r"TP degree \(3\) must divide n_heads \(32\)"):
        evaluate_layouts(s, [Layout(tp=3)])
    with pytest.raises(LayoutError, match=r"TP degree \(16\) must divide n_kv_heads \(8\)"):
        evaluate_layouts(s, [Layout(tp=16)])
