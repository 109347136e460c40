"""Pre-training configurations from a ``plan train`` answer: torchtitan 0.2 TOML, a DeepSpeed
JSON config with its launcher line, Megatron-LM's command-line arguments, and an HF accelerate
FSDP config. Each quantity of the best layout maps to one option:

    txcalc            | torchtitan 0.2 (job_config.py)  | DeepSpeed          | Megatron-LM
    ------------------|---------------------------------|--------------------|---------------------
    tp, pp, cp, ep    | parallelism.*_degree            | (tp, pp, cp, ep 1) | --tensor/pipeline/
                      |                                 |                    |  context/expert-
                      |                                 |                    |  model-parallel-size
    dp, zero 3        | data_parallel_shard_degree dp   | stage 3            | --use-megatron-fsdp
    zero 2            | ... fsdp_reshard_after_forward  | stage 2            |  + sharding strategy
                      |     never                       |                    |  optim_grads(_params)
    zero 1            | (refused)                       | stage 1            | --use-distributed-
    zero 0            | data_parallel_replicate_degree  | stage 0            |  optimizer / none
    hybrid shard      | replicate x shard (in a node)   | (refused)          | (refused)
    micro-batch       | local_batch_size (pp:           | train_micro_batch_ | --micro-batch-size
                      |  pipeline_parallel_microbatch_) |  size_per_gpu      |
    global batch      | global_batch_size               | train_batch_size   | --global-batch-size
    interleaved v     | Interleaved1F1B, layers/stage   | -                  | --num-layers-per-
                      |                                 |                    |  virtual-pipeline-stage
    recompute full    | activation_checkpoint.mode full | activation_checkp. | --recompute-granularity
    selective         | (refused: op-level only)        | (refused)          |  full / selective
    op                | selective, option "op"          | (refused)          | (refused)
    sp                | always on with tp (refused off) | -                  | --sequence-parallel
    overlap tp        | compile.enable_async_tp         | -                  | --tp-comm-overlap
    overlap grad/param| always overlapped (FSDP2)       | overlap_comm       | --overlap-grad-reduce,
                      |                                 |                    |  --overlap-param-gather
"""

from __future__ import annotations

import json
import math

from .common import (
    HF_MIXED,
    TORCH_OPTIMIZER,
    Emitted,
    comment,
    gib,
    header,
    refuse,
    shell_line,
    toml,
)


class TrainFacts:
    """What the emitters read off a ``plan train`` answer: the best layout, the setting, the
    step count and gradient accumulation, and the expected figures."""

    def __init__(self, fmt: str, ans, command: str):
        p = ans.parts["plan"]
        self.fmt, self.command, self.answer = fmt, command, ans.json
        self.s, self.best, self.lay = p.setting, p.best, p.best.layout
        self.cfg, self.gpu = self.s.cfg, self.s.gpu
        self.tokens = p.tokens
        lay, s = self.lay, self.s
        per_step = lay.micro_batch * lay.dp
        if s.global_batch % per_step:
            refuse(fmt, f"global batch {s.global_batch}", f"not a multiple of micro-batch "
                   f"({lay.micro_batch}) x dp ({lay.dp})")
        self.accumulation = s.global_batch // per_step
        #: optimizer steps: the tokens over the tokens of one step, rounded up
        self.steps = math.ceil(p.tokens / (s.global_batch * s.seq))
        self.gpus = lay.gpus
        self.per_node = min(self.gpus, s.gpu.gpus_per_node)
        if self.gpus % self.per_node:
            refuse(fmt, f"gpus {self.gpus}", f"not whole nodes of {self.per_node}")
        self.nodes = self.gpus // self.per_node
        if ans.parts.get("finetune") is not None:
            refuse(fmt, "--finetune", "a pre-training config trains every parameter; emit "
                   "fine-tuning configs from `txcalc fit` (trl, axolotl, llama-factory)")

    def shard_group(self) -> int:
        """GPUs one ZeRO shard spans (train.setting.shard_groups: dp x cp, or a node's)."""
        import numpy as np

        from ..train.setting import shard_groups
        g = {k: np.array([getattr(self.lay, k)]) for k in ("dp", "cp", "tp")}
        g["hybrid"], g["ep"] = np.array([self.lay.hybrid_shard]), np.array([self.lay.ep])
        return int(shard_groups(g, self.gpu)[0][0])

    def figures(self) -> list[str]:
        b = self.best
        return [f"layout {self.lay.short()} on {self.gpus:,} GPUs ({self.gpu.name})",
                f"peak memory per GPU {gib(b.total_bytes)} (fullest stage)",
                f"{b.tokens_per_s:,.0f} tokens/s, step {b.step_time_s:.2f} s, MFU {b.mfu:.1%}",
                (f"{self.steps:,} steps of {self.s.global_batch:,} x {self.s.seq:,} tokens "
                f"({self.tokens:,} tokens), {b.days:,.1f} days at goodput {self.s.goodput:g}")]

    def data_parallel_only(self, why: str) -> None:
        """Refuse a layout with model parallelism (tp, pp, cp or ep over 1)."""
        for dim in ("tp", "pp", "cp", "ep"):
            if getattr(self.lay, dim) > 1:
                refuse(self.fmt, f"{dim} {getattr(self.lay, dim)}", why)

    def common_refusals(self) -> None:
        s, f = self.s, self.fmt
        if s.loss != "full":
            refuse(f, f"loss {s.loss}", "this trainer computes the whole cross-entropy")
        if s.optimizer not in TORCH_OPTIMIZER:
            refuse(f, f"optimizer {s.optimizer}", f"give --optimizer {' or '.join(TORCH_OPTIMIZER)}")
        if s.attn_impl != "flash":
            refuse(f, f"attention {s.attn_impl}", "these trainers run fused (flash) attention")
        if self.lay.offload_checkpoints:
            refuse(f, "checkpoints offloaded to the host", "no option of this trainer moves "
                   "recompute checkpoints to host memory")


def torchtitan(ans, command: str) -> Emitted:
    """torchtitan 0.2.x's TOML job config (``--job.config_file``): torchtitan/config/
    job_config.py at v0.2.2 names every key written here."""
    t = TrainFacts("torchtitan", ans, command)
    t.common_refusals()
    lay, s = t.lay, t.s
    if lay.zero == 1:
        refuse("torchtitan", "zero 1", "torchtitan shards with FSDP2 (ZeRO-3, or ZeRO-2 with "
               "reshard_after_forward never) or replicates (ZeRO-0)")
    if lay.tp > 1 and not lay.sp:
        refuse("torchtitan", "tp without sequence parallelism", "torchtitan's tensor "
               "parallelism always splits the norms' sequence (SP)")
    if lay.recompute == "selective" or lay.recompute_layers:
        refuse("torchtitan", f"recompute {lay.recompute}"
               + (f" of {lay.recompute_layers} blocks" if lay.recompute_layers else ""),
               "torchtitan recomputes every block (full) or per op (--recompute op)")
    if s.precision not in ("bf16-mixed", "fp32", "fp8-mixed"):
        refuse("torchtitan", f"precision {s.precision}", "torchtitan mixes bf16 or fp32 "
               "parameters with fp32 reduction")
    if s.offload_optimizer:
        refuse("torchtitan", "optimizer offload", "enable_cpu_offload also moves parameters")
    parallel = {"tensor_parallel_degree": lay.tp, "pipeline_parallel_degree": lay.pp,
                "context_parallel_degree": lay.cp, "expert_parallel_degree": lay.ep}
    if lay.zero == 0:
        if lay.cp > 1:
            refuse("torchtitan", f"zero 0 with cp {lay.cp}", "torchtitan shards the "
                   "parameters over the context-parallel ranks (FSDP over dp_shard x cp)")
        parallel |= {"data_parallel_replicate_degree": lay.dp, "data_parallel_shard_degree": 1}
    else:
        group = t.shard_group()
        shard = group // lay.cp  # FSDP shards over dp_shard x cp
        if shard * lay.cp != group or lay.dp % shard:
            refuse("torchtitan", f"shard group {group}", f"not dp_shard x cp {lay.cp} with "
                   f"dp_shard dividing dp {lay.dp}")
        parallel |= {"data_parallel_replicate_degree": lay.dp // shard,
                     "data_parallel_shard_degree": shard,
                     "fsdp_reshard_after_forward": "always" if lay.zero == 3 else "never"}
    if lay.pp > 1:
        stages = lay.pp * lay.virtual
        if t.cfg.n_layers % stages:
            refuse("torchtitan", f"pp {lay.pp} x virtual {lay.virtual}",
                   f"{t.cfg.n_layers} layers do not split evenly")
        parallel |= {"pipeline_parallel_schedule":
                     "Interleaved1F1B" if lay.schedule == "interleaved" else "1F1B",
                     "pipeline_parallel_layers_per_stage": t.cfg.n_layers // stages,
                     "pipeline_parallel_microbatch_size": lay.micro_batch}
    local = lay.micro_batch * (t.accumulation if lay.pp > 1 else 1)
    training = {"local_batch_size": local, "global_batch_size": s.global_batch,
                "seq_len": s.seq, "steps": t.steps,
                "mixed_precision_param": "float32" if s.precision == "fp32" else "bfloat16",
                "mixed_precision_reduce": "float32"}
    ac = {"mode": {"none": "none", "full": "full", "op": "selective"}[lay.recompute]}
    if lay.recompute == "op":
        ac["selective_ac_option"] = "op"
    model = {"name": t.cfg.name, "flavor": t.cfg.name}
    if s.precision == "fp8-mixed":
        model["converters"] = ["float8"]
    doc = {"job": {"description": f"txcalc plan: {lay.short()}"}, "model": model,
           "optimizer": {"name": TORCH_OPTIMIZER[s.optimizer]}, "training": training,
           "parallelism": parallel, "activation_checkpoint": ac}
    if "tp" in s.overlap and lay.tp > 1:
        doc["compile"] = {"enable": True}
        parallel["enable_async_tensor_parallel"] = True
    text = comment(header(command, t.figures(), "model.name/flavor: set torchtitan's model "
                          "and flavor for this checkpoint")) + toml(doc)
    return Emitted("job.toml", {"job.toml": text})


def deepspeed(ans, command: str) -> Emitted:
    """A DeepSpeed JSON config (ZeRO, batch, precision, optimizer, activation checkpointing)
    and the ``deepspeed`` launcher line that runs it."""
    t = TrainFacts("deepspeed", ans, command)
    t.common_refusals()
    lay, s = t.lay, t.s
    t.data_parallel_only("a DeepSpeed JSON config sets ZeRO data parallelism only; emit "
                         "megatron for model parallelism")
    if lay.hybrid_shard:
        refuse("deepspeed", "hybrid shard", "ZeRO++ hpZ keeps a second copy, not the plan's "
               "node-local shard")
    if lay.recompute not in ("none", "full") or lay.recompute_layers:
        refuse("deepspeed", f"recompute {lay.recompute}", "the HF Trainer's gradient "
               "checkpointing recomputes every block (--recompute full or none)")
    if s.precision not in HF_MIXED or s.precision == "fp8-mixed":
        refuse("deepspeed", f"precision {s.precision}", "DeepSpeed trains bf16-mixed, "
               "fp16-mixed or fp32")
    mixed = HF_MIXED[s.precision]
    zero = {"stage": lay.zero, "overlap_comm": "grad_reduce" in s.overlap,
            "contiguous_gradients": True}
    if s.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    cfg = {"train_batch_size": s.global_batch,
           "train_micro_batch_size_per_gpu": lay.micro_batch,
           "gradient_accumulation_steps": t.accumulation,
           "gradient_clipping": 1.0,
           "bf16": {"enabled": mixed == "bf16"}, "fp16": {"enabled": mixed == "fp16"},
           "zero_optimization": zero,
           "optimizer": {"type": TORCH_OPTIMIZER[s.optimizer], "params": {"lr": 3e-4}}}
    if lay.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": False,
                                           "cpu_checkpointing": False}
    launcher = comment(header(command, t.figures())) + shell_line(
        ["deepspeed"], [("--num_nodes", t.nodes), ("--num_gpus", t.per_node),
                        ("your_train.py", True), ("--deepspeed", "ds_config.json"),
                        ("--max_seq_length", s.seq),
                        ("--gradient_checkpointing", lay.recompute == "full"),
                        ("--max_steps", t.steps)])
    return Emitted("ds_config.json", {"ds_config.json": json.dumps(cfg, indent=2) + "\n",
                                      "launch.sh": launcher})


def megatron(ans, command: str) -> Emitted:
    """Megatron-LM's ``pretrain_gpt.py`` arguments under torchrun (megatron/training/
    arguments.py names every flag)."""
    t = TrainFacts("megatron", ans, command)
    t.common_refusals()
    lay, s = t.lay, t.s
    if lay.hybrid_shard:
        refuse("megatron", "hybrid shard", "Megatron-FSDP shards over the whole data-parallel "
               "group")
    if lay.recompute == "op":
        refuse("megatron", "recompute op", "Megatron recomputes full blocks or the selective "
               "attention core")
    if s.precision not in ("bf16-mixed", "fp16-mixed", "fp32", "fp8-mixed"):
        refuse("megatron", f"precision {s.precision}", "Megatron trains mixed precision")
    if s.offload_optimizer:
        refuse("megatron", "optimizer offload", "not among these arguments")
    flags: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", lay.tp), ("--pipeline-model-parallel-size", lay.pp),
        ("--context-parallel-size", lay.cp), ("--expert-model-parallel-size", lay.ep),
        ("--sequence-parallel", lay.sp),
        ("--num-layers-per-virtual-pipeline-stage",
         t.cfg.n_layers // (lay.pp * lay.virtual) if lay.schedule == "interleaved" else None),
        ("--micro-batch-size", lay.micro_batch), ("--global-batch-size", s.global_batch),
        ("--seq-length", s.seq), ("--max-position-embeddings", s.seq),
        ("--train-iters", t.steps), ("--optimizer", "adam"),
        ("--bf16", s.precision in ("bf16-mixed", "fp8-mixed")),
        ("--fp16", s.precision == "fp16-mixed"),
        ("--fp8-format", "hybrid" if s.precision == "fp8-mixed" else None)]
    if lay.schedule == "interleaved" and t.cfg.n_layers % (lay.pp * lay.virtual):
        refuse("megatron", f"pp {lay.pp} x virtual {lay.virtual}",
               f"{t.cfg.n_layers} layers do not split evenly")
    if lay.zero == 1:
        flags.append(("--use-distributed-optimizer", True))
    elif lay.zero >= 2:
        flags += [("--use-megatron-fsdp", True), ("--data-parallel-sharding-strategy",
                                                   "optim_grads" if lay.zero == 2 else
                                                   "optim_grads_params")]
    if lay.recompute == "selective":
        flags += [("--recompute-granularity", "selective")]
    elif lay.recompute == "full":
        flags += [("--recompute-granularity", "full"),
                  ("--recompute-method", "block" if lay.recompute_layers else "uniform"),
                  ("--recompute-num-layers", lay.recompute_layers or 1)]
    flags += [("--overlap-grad-reduce", "grad_reduce" in s.overlap),
              ("--overlap-param-gather", "param_gather" in s.overlap and lay.zero >= 1),
              ("--tp-comm-overlap", "tp" in s.overlap and lay.tp > 1)]
    text = "#!/bin/sh\n" + comment(header(command, t.figures())) + shell_line(
        ["torchrun", f"--nnodes={t.nodes}", f"--nproc-per-node={t.per_node}",
         "pretrain_gpt.py"], flags)
    return Emitted("megatron.sh", {"megatron.sh": text})


def accelerate(ans, command: str) -> Emitted:
    """An HF accelerate config (``accelerate launch --config_file``): FSDP for ZeRO 2/3,
    MULTI_GPU (DDP) for ZeRO 0; the batch and recompute go to the training script."""
    from .common import yaml
    t = TrainFacts("accelerate", ans, command)
    t.common_refusals()
    lay, s = t.lay, t.s
    t.data_parallel_only("accelerate's FSDP config is data parallel only; emit torchtitan or "
                         "megatron")
    if lay.zero == 1:
        refuse("accelerate", "zero 1", "FSDP shards gradients too (zero 2: SHARD_GRAD_OP)")
    if lay.recompute not in ("none", "full") or lay.recompute_layers:
        refuse("accelerate", f"recompute {lay.recompute}", "FSDP activation checkpointing "
               "recomputes every block")
    if s.precision not in HF_MIXED:
        refuse("accelerate", f"precision {s.precision}", "accelerate mixes bf16, fp16 or fp8")
    if s.offload_optimizer:
        refuse("accelerate", "optimizer offload", "FSDP's CPU offload moves the parameters too")
    doc = {"compute_environment": "LOCAL_MACHINE", "debug": False,
           "distributed_type": "MULTI_GPU" if lay.zero == 0 else "FSDP",
           "mixed_precision": HF_MIXED[s.precision], "machine_rank": 0,
           "num_machines": t.nodes, "num_processes": t.gpus, "rdzv_backend": "static",
           "same_network": True, "use_cpu": False, "downcast_bf16": "no",
           "main_training_function": "main"}
    if lay.zero:
        doc["fsdp_config"] = {
            "fsdp_sharding_strategy": "HYBRID_SHARD" if lay.hybrid_shard else
            "FULL_SHARD" if lay.zero == 3 else "SHARD_GRAD_OP",
            "fsdp_activation_checkpointing": lay.recompute == "full",
            "fsdp_offload_params": False,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch": "BACKWARD_PRE" if "param_gather" in s.overlap
            else "NO_PREFETCH",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_use_orig_params": True}
    note = (f"the training script: per-device batch {lay.micro_batch}, gradient accumulation "
            f"{t.accumulation}, sequence {s.seq}, {t.steps:,} steps"
            + (", gradient checkpointing" if lay.recompute == "full" and not lay.zero else ""))
    text = comment(header(command, t.figures(), note)) + yaml(doc)
    return Emitted("accelerate.yaml", {"accelerate.yaml": text})
