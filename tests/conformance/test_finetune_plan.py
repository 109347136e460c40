"""The planner fine-tunes: per-rank bytes of a real FSDP2 run of a PEFT LoRA model (and of a
model with frozen blocks) equal ``plan_train``'s per-GPU prediction, and the CLI takes the
fine-tuning flags.

Two gloo ranks (forked here) train the tiny Llama of tests/conformance/test_distributed.py (vocab 1001:
every split uneven) for one AdamW step in fp32, ``fully_shard`` on each block then the root
(ZeRO-3 over dp = 2):

- lora: PEFT ``get_peft_model`` with r = 4 on "all-linear" (every Linear but lm_head), the
  base frozen by PEFT;
- freeze: ``requires_grad_(False)`` on everything but the last block and lm_head.

Measured on each rank: bytes of the unique storages behind the local parameter shards (frozen
and trainable: FSDP2 shards both), the gradients (trainable only) and the optimizer state
(exp_avg, exp_avg_sq, step of the trainable tensors only). Predicted: ``evaluate_layouts``
with ``TrainSetting(finetune=...)``. Rank 0 holds the largest shard and must equal the
prediction exactly; the other rank holds no more.
"""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("transformers")

from tests.conformance.test_distributed import (TINY, _free_port, _local,  # noqa: E402
                                                _storages_bytes, forked)

RANK = 4
MODES = ("lora", "freeze")


def _model(mode: str):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY))
    if mode == "lora":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=8, lora_dropout=0.0,
                                                 target_modules="all-linear"))
        return model, model.base_model.model
    for name, p in model.named_parameters():
        last = f"layers.{TINY['num_hidden_layers'] - 1}." in name
        p.requires_grad_(last or name.startswith("lm_head"))
    return model, model


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from torch.distributed.fsdp import fully_shard
        for mode in MODES:
            model, inner = _model(mode)
            for layer in inner.model.layers:
                fully_shard(layer)
            fully_shard(model)
            params = list(model.parameters())
            opt = torch.optim.AdamW([p for p in params if p.requires_grad], lr=1e-3)
            ids = torch.randint(0, TINY["vocab_size"], (2, 16),
                                generator=torch.Generator().manual_seed(1))
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            state = [_local(v) for s in opt.state.values() for v in s.values()]
            result = {"weights": _storages_bytes(_local(p) for p in params),
                      "gradients": _storages_bytes(_local(p.grad) for p in params
                                                   if p.grad is not None),
                      "optimizer": sum(t.untyped_storage().nbytes() for t in state),
                      "trainable": sum(p.numel() for p in params if p.requires_grad)}
            with open(os.path.join(out_dir, f"{mode}-{rank}.json"), "w") as f:
                json.dump(result, f)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    pytest.importorskip("peft")  # imported once here, not in each forked rank
    out = tmp_path_factory.mktemp("ft_ranks")
    forked(_worker, (2, _free_port(), str(out)), nprocs=2)
    return {mode: [json.loads((out / f"{mode}-{r}.json").read_text()) for r in range(2)]
            for mode in MODES}


def _finetune(mode: str):
    from txcalc.engine.finetune import Finetune
    if mode == "lora":
        return Finetune("lora", rank=RANK, alpha=8.0, targets="all-linear")
    return Finetune("freeze", trainable=f"last:1,head")


def _setting(mode: str | None, precision: str = "fp32"):
    from transformers import LlamaConfig
    from txcalc.engine.hardware import get_gpu
    from txcalc.model.hf import from_hf_dict
    from txcalc.train.setting import TrainSetting
    cfg = from_hf_dict(LlamaConfig(**TINY).to_dict(), "tiny-llama")
    return TrainSetting(cfg, get_gpu("h100"), seq=16, global_batch=4, precision=precision,
                        optimizer="adamw", finetune=_finetune(mode) if mode else None)


needs_gloo = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")


@needs_gloo
@pytest.mark.parametrize("mode", MODES)
def test_fsdp2_rank_bytes_equal_prediction(mode, measured):
    from txcalc.engine.memory import trainable_count
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout
    s = _setting(mode)
    r = evaluate_layouts(s, [Layout(dp=2, zero=3, micro_batch=2)])
    predicted = {k: int(r[f"{k}_bytes"][0]) for k in ("weights", "gradients", "optimizer")}
    rank0, rank1 = measured[mode]
    assert rank0["trainable"] == trainable_count(s.ops)
    assert {k: rank0[k] for k in predicted} == predicted
    assert all(rank1[k] <= predicted[k] for k in predicted)
    # the full model's states would be far larger: frozen weights carry no grads or states
    full = evaluate_layouts(_setting(None), [Layout(dp=2, zero=3, micro_batch=2)])
    assert predicted["optimizer"] < int(full["optimizer_bytes"][0]) // 2


def test_one_gpu_plan_equals_training_memory():
    """ZeRO-0 on one GPU: the planner's weights, gradients and optimizer of a QLoRA model equal
    TrainingMemory's (the engine's per-op sums, checked against PEFT and bitsandbytes in
    tests/conformance/test_finetune.py): the frozen base in NF4, states only for the adapters."""
    import txcalc
    from txcalc.engine.finetune import Finetune
    from txcalc.engine.hardware import get_gpu
    from txcalc.engine.memory import TrainingMemory
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout
    from txcalc.engine.workload import Workload
    cfg = txcalc.load("llama-2-7b")
    ft = Finetune("qlora", rank=64, targets="all-linear")
    s = TrainSetting(cfg, get_gpu("h100"), seq=512, global_batch=1, finetune=ft)
    r = evaluate_layouts(s, [Layout()])
    m = TrainingMemory(cfg, Workload(batch=1, seq=512, attn_impl="flash"), "bf16-mixed",
                       "adamw", ft)
    assert int(r["weights_bytes"][0]) == m.weights
    assert int(r["gradients_bytes"][0]) == m.gradients
    assert int(r["optimizer_bytes"][0]) == m.optimizer_total
    assert int(r["activations_bytes"][0]) == m.activations
    assert m.weights < 4.5e9  # 4-bit base: far below 13.5 GB of bf16


def test_zero3_shards_the_quantised_base():
    """ZeRO-3 over 8 GPUs holds an eighth of the NF4 base (within the per-tensor padding)."""
    import txcalc
    from txcalc.engine.finetune import Finetune
    from txcalc.engine.hardware import get_gpu
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout
    s = TrainSetting(txcalc.load("llama-2-7b"), get_gpu("h100"), seq=512, global_batch=8,
                     finetune=Finetune("qlora"))
    one, eight = (int(evaluate_layouts(s, [lay])["weights_bytes"][0])
                  for lay in (Layout(), Layout(dp=8, zero=3)))
    assert one / 8 <= eight <= one / 8 * 1.001


def test_plan_train_cli_finetune(capsys):
    from typer.testing import CliRunner
    from txcalc.cli import app
    run = lambda *a: CliRunner().invoke(app, ["plan", "train", "llama-2-7b", "--tokens", "1B",
                                              "--gpus", "8", "--json", *a])
    full, lora = (json.loads(r.stdout) for r in (run(), run("--finetune", "lora",
                                                               "--lora-rank", "8")))
    assert lora["finetune"] == "lora r=8 alpha=8 on all-linear"
    fb, lb = full["best"]["memory_bytes"], lora["best"]["memory_bytes"]
    assert lb["optimizer"] < fb["optimizer"] / 50 and lb["gradients"] < fb["gradients"] / 50
    # backward without the frozen weights' gradients: fewer hardware FLOPs per step
    assert lora["hardware_flops"] < full["hardware_flops"]
    from txcalc.cli import main
    assert main(["plan", "train", "llama-2-7b", "--tokens", "1B", "--finetune", "lora",
                 "--lora-targets", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope" in err and len(err.splitlines()) == 1


def test_report_adapters_section():
    """report --finetune: an adapters section with the engine's figures, the planner run on the
    fine-tuned model, and the command that reproduces the request."""
    from txcalc.engine.memory import TrainingMemory
    from txcalc.report.model import build_report
    from txcalc.report.request import ReportRequest
    from txcalc.engine.workload import Workload
    import txcalc
    req = ReportRequest(model="llama-2-7b", gpu="h100", seq=1024, tokens="100M",
                        finetune="lora", lora_rank=8, lora_targets="q_proj,v_proj")
    rep = build_report(req)
    sec = next(s for s in rep["sections"] if s["id"] == "finetune")
    m = TrainingMemory(txcalc.load("llama-2-7b"), Workload(batch=1, seq=1024, attn_impl="flash"),
                       "bf16-mixed", "adamw", req.ft)
    rows = dict(sec["tables"][0]["rows"])
    assert rows["adapter parameters"] == f"{m.adapter_params:,}" == "4,194,304"  # 32 x 2 x 2 x 8 x 4096
    assert "--finetune lora --lora-rank 8 --lora-targets q_proj,v_proj" in rep["command"]
    assert rep["data"]["plan"]["best"]["memory"]["optimizer"] < 1e9
    from txcalc.errors import WorkloadError
    with pytest.raises(WorkloadError, match="inference"):
        ReportRequest(model="llama-2-7b", inference=True, finetune="lora")


def test_head_adapters_sit_with_the_head():
    """An adapter on lm_head is placed after the blocks (the last pipeline stage holds it)."""
    import txcalc
    from txcalc.engine.components import model_ops_tuple
    from txcalc.engine.finetune import Finetune, apply_finetune
    cfg = txcalc.load("llama-2-7b")
    ops = apply_finetune(cfg, model_ops_tuple(cfg), Finetune("lora", targets="lm_head"))
    assert {op.placement for op in ops if op.path.startswith("lm_head.")} == {"post"}
