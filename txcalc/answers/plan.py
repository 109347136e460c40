"""``txcalc plan train`` and ``txcalc plan infer``: the answers (how many GPUs, which layout,
how long, what it costs)."""

from __future__ import annotations

import math

from .common import (Answer, half_precision, load_model, make_finetune, overheads,
                     planner_recipe, serving_kv_dtype, serving_weights_note, text_only_said)

#: plan infer's offline mode: the note its --json carries
OFFLINE_NOTE = ("every request queued at once (trtllm-bench throughput); batch = "
                "min(trtllm-bench's max_batch_size, the KV cache's sequences, "
                "max_num_tokens x output / (input + output)); step time from "
                "serving_sim.StepModel at the default efficiencies (calibrate them "
                "for a GPU with txcalc.serve.infer.serve_throughput(profile=...))")


#: plan infer's SLO mode without --mode, where disaggregation was weighed: the default assumed
MODE_WORDS = ("mode auto: colocated (prefill and decode on the same replicas) or disaggregated "
              "(a prefill pool and a decode pool), whichever needs fewer GPUs, the other shown "
              "beside it; --mode colocated or --mode disaggregated to keep to one")


def plan_train(model: str, tokens: str, gpu: str = "h100", days: float | None = None,
               max_gpus: int | None = None, gpus: int | None = None,
               seq: int | str | None = None,
               global_batch: int | None = None, precision: str | None = None,
               optimizer: str = "adamw", price: float | None = None,
               achieved_tflops: float | None = None, gpu_file: str | None = None,
               cuda_context_gib: float | None = None, comm_buffer_gib: float | None = None,
               fragmentation: float | None = None, tp: int | None = None,
               pp: int | None = None, cp: int | None = None, ep: int | None = None,
               zero: int | None = None, micro_batch: int | None = None,
               recompute: str | None = None, recompute_layers: int | None = None,
               offload_checkpoints: bool | None = None, attn: str | None = None,
               stack: str | None = None, goodput: float | None = None,
               overlap: str | None = None, finetune: str = "full", lora_rank: int = 16,
               lora_alpha: float | None = None, lora_targets: str = "all-linear",
               lora_dropout: float = 0.0, trainable: str = "head", base_format: str = "nf4",
               loss: str = "full", rows: int = 8, global_tokens: int | str = 0,
               max_global_batch: str | None = None,
               gpus_per_node: int | None = None, recipe: str | None = None,
               gpu_gb: float | None = None, offload: str = "none") -> Answer:
    """Fewest GPUs that fit, GPUs for a deadline, and the best layouts for a training run.
    ``max_global_batch``: the batch search's ceiling, sequences ('2048') or tokens with a
    binary K/M/G suffix ('16M' = 16 x 2^20: ``train.batch.parse_max_global_batch``).
    ``recipe`` (fine-tuning, only when given): its fp32 upcasts and optimizer kernel
    (engine.recipes); the optimizer and loss stay the options'. ``parts``: the TrainPlan and
    the Finetune (None: full). ``precision`` None: bf16-mixed, or fp16-mixed on a GPU without
    bf16 (T4, V100), listed in the JSON's ``assumed``. ``gpu_gb``: the usable memory of one
    GPU in GB (1e9), the catalog's speeds kept (as ``memory`` and ``fit`` take it:
    ``hardware.with_usable_gb``). ``offload`` (engine.memory.OFFLOADS, as ``fit`` and
    ``memory`` spell it): optimizer (``TrainSetting.offload_optimizer``), activations (full
    recompute's checkpoints in host memory: the offload_checkpoints pin), all (both); how
    it is timed is among the defaults assumed."""
    from ..engine.hardware import get_gpu, with_usable_gb
    from ..train.planner import plan_train as search
    from .checks import checked

    opts = checked(tokens=tokens, gpu=gpu, days=days, max_gpus=max_gpus, gpus=gpus, seq=seq,
                   global_batch=global_batch, precision=precision, optimizer=optimizer,
                   price=price, achieved_tflops=achieved_tflops, gpu_file=gpu_file,
                   cuda_context_gib=cuda_context_gib, comm_buffer_gib=comm_buffer_gib,
                   fragmentation=fragmentation, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero,
                   micro_batch=micro_batch, recompute=recompute, rows=rows, attn=attn,
                   stack=stack, overlap=overlap, recompute_layers=recompute_layers,
                   goodput=goodput, global_tokens=global_tokens,
                   gpus_per_node=gpus_per_node, gpu_gb=gpu_gb)
    seq, global_tokens = opts["seq"], opts["global_tokens"]
    ceiling: dict = {}
    if max_global_batch is not None:
        from ..train.batch import parse_max_global_batch
        value, in_tokens = parse_max_global_batch(max_global_batch)
        ceiling = {"max_global_batch_tokens" if in_tokens else "max_global_batch": value}
    ft = make_finetune(finetune, lora_rank, lora_alpha, lora_targets, lora_dropout, trainable,
                       base_format)
    ft, kernel = planner_recipe(ft, recipe, optimizer, loss, stack)
    g = with_usable_gb(get_gpu(gpu, gpu_file), opts["gpu_gb"])
    precision, said = half_precision(precision, g)
    said = said + _offload_words(offload, offload_checkpoints)
    if offload in ("activations", "all"):
        offload_checkpoints = True
    only = {k: v for k, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep), ("zero", zero),
                              ("micro_batch", micro_batch), ("recompute", recompute),
                              ("recompute_layers", recompute_layers),
                              ("offload_checkpoints", offload_checkpoints)) if v is not None}
    cfg = load_model(model)
    p = search(cfg, g, opts["tokens"], seq=seq, global_batch=global_batch,
               days=days, max_gpus=max_gpus, gpus=gpus, precision=precision,
               optimizer=optimizer, price_per_gpu_hour=price, gpu_file=gpu_file,
               achieved_tflops=achieved_tflops, n_rows=rows, attn_impl=attn or "flash",
               stack=stack, overlap=overlap, finetune=ft, goodput=goodput, loss=loss,
               global_tokens=global_tokens, optimizer_kernel=kernel,
               overheads=overheads(cuda_context_gib, comm_buffer_gib, fragmentation),
               only=only, gpus_per_node=gpus_per_node,
               offload_optimizer=offload in ("optimizer", "all"), **ceiling)
    said = said + text_only_said(cfg, p.setting.work(1), images_option=False)
    return Answer(p.to_json() | {"offload": offload, "assumed": said},
                  {"plan": p, "finetune": ft})


def _offload_words(offload: str, offload_checkpoints: bool | None) -> list[str]:
    """plan train's --offload checked, and how the plan times it, in words (the answer's
    ``assumed``): [] for none."""
    from ..engine.memory import OFFLOADS
    from ..errors import PlanError
    from ..inputs import choice
    from ..parallel.comm import PCIE_BYTES_PER_S
    choice("--offload", offload, OFFLOADS)
    if offload in ("activations", "all") and offload_checkpoints is False:
        raise PlanError(f"--offload {offload} puts full recompute's checkpoints in host "
                        "memory, which --keep-checkpoints refuses: give one of them")
    said = []
    if offload in ("optimizer", "all"):
        said.append("optimizer offloaded (ZeRO-Offload, FSDP CPU offload): its states, step "
                    "counters and fp32 master weights, and the fp32 gradients the CPU step "
                    "reads, in host memory; the step time adds the gradients out and the "
                    f"updated weights back over PCIe at {PCIE_BYTES_PER_S / 1e9:g} GB/s, not "
                    "the CPU's optimizer step itself (not modelled)")
    if offload in ("activations", "all"):
        said.append("activations offloaded: layouts with full recompute and its checkpoints "
                    "in host memory only (as --offload-checkpoints)")
    return said


def plan_infer(model: str, gpu: str = "h100", context: str | None = None,
               concurrency: int | None = None, kv_dtype: str | None = None,
               tokens_per_s: float | None = None, precision: str | None = None,
               weights: str | None = None, gpu_file: str | None = None,
               cuda_context_gib: float | None = None, comm_buffer_gib: float | None = None,
               fragmentation: float | None = None, gpu_memory_utilization: float | None = None,
               block_size: int | None = None, max_model_len: str | None = None,
               max_num_batched_tokens: str | None = None, prefix_hit_rate: float | None = None,
               attention_kernel: str | None = None, engine: str | None = None,
               input_len: str | None = None, output_len: str | None = None,
               rate: str | None = None, ttft_p99: str | None = None, itl_p99: str | None = None,
               price: float | None = None, tp: int | None = None, pp: int | None = None,
               ep: int | None = None, plot: str | None = None,
               replicas: int | None = None, mode: str | None = None) -> Answer:
    """GPUs per replica, replicas, KV-cache concurrency, prefill and decode speed; with
    ``input_len``/``output_len`` and ``rate`` or ``concurrency``: the layout and replicas
    meeting latency SLOs (a simulation of continuous batching), or, at ``rate`` inf without
    an SLO, the offline maximum throughput. ``parts["mode"]`` says which (capacity, slo,
    offline). ``plot`` is only checked here (a folder that can be written): the CLI draws
    the plots (txcalc.report) and adds their paths. ``precision`` None: bf16, or fp16 on a
    GPU without bf16 (T4, V100); ``kv_dtype`` None: fp16 with fp16 weights, else bf16;
    ``weights`` None: a config.json's quantization_config or a preset's released format.
    ``mode`` (serving plans): auto | colocated | disaggregated (``serve.plan.MODES``; None:
    auto, the one needing fewer GPUs, where disaggregation applies). The JSON's ``assumed``
    says which of these defaults shaped the answer."""
    said: list[str] = []
    if precision is None:
        precision, said = half_precision(None, gpu, gpu_file, serving=True)
    if kv_dtype is None:
        kv_dtype = serving_kv_dtype(precision)
    ans = _plan_infer(model, gpu, context, concurrency, kv_dtype, tokens_per_s, precision,
                      weights, gpu_file, cuda_context_gib, comm_buffer_gib, fragmentation,
                      gpu_memory_utilization, block_size, max_model_len,
                      max_num_batched_tokens, prefix_hit_rate, attention_kernel, engine,
                      input_len, output_len, rate, ttft_p99, itl_p99, price, tp, pp, ep, plot,
                      replicas, mode)
    ans.json["assumed"] = said + serving_weights_note(ans.parts["served"], weights)
    if mode is None and ans.parts["mode"] == "slo" and ans.parts["plan"].disaggregation_tried:
        ans.json["assumed"].append(MODE_WORDS)
    ans.parts.update(precision=precision, kv_dtype=kv_dtype, weights=weights)
    return ans


def _plan_infer(model, gpu, context, concurrency, kv_dtype, tokens_per_s, precision, weights,
                gpu_file, cuda_context_gib, comm_buffer_gib, fragmentation,
                gpu_memory_utilization, block_size, max_model_len, max_num_batched_tokens,
                prefix_hit_rate, attention_kernel, engine, input_len, output_len, rate,
                ttft_p99, itl_p99, price, tp, pp, ep, plot, replicas, mode=None) -> Answer:
    """``plan_infer`` with its defaults resolved."""
    from ..serve import kv as S
    if mode is not None:
        from ..inputs import choice
        from ..serve.plan import MODES
        choice("--mode", mode, MODES)
    kv_opts = S.kv_options(gpu_memory_utilization, block_size, max_model_len,
                           max_num_batched_tokens, prefix_hit_rate, engine)
    if any(v is not None for v in (input_len, output_len, rate, ttft_p99, itl_p99, replicas)):
        return _serve_plan(model, gpu, context, input_len, output_len, rate, concurrency,
                           ttft_p99, itl_p99, price, tp, pp, replicas, kv_dtype, precision,
                           weights, gpu_file, kv_opts, ep, plot, attention_kernel, mode)
    for flag, v in (("--price", price), ("--tp", tp), ("--pp", pp), ("--ep", ep),
                    ("--plot", plot), ("--attention-kernel", attention_kernel),
                    ("--mode", mode)):
        if v is not None:
            raise S.ServingError(f"{flag} applies to serving plans: give --input-len and "
                                 "--output-len with --rate or --concurrency")
    if context is None:
        raise S.ServingError("give --context (tokens per sequence), or --input-len and "
                             "--output-len for a serving plan")
    concurrency = 1 if concurrency is None else concurrency
    from ..engine.hardware import get_gpu
    from .checks import checked

    opts = checked(gpu=gpu, required_context=context, concurrency=concurrency,
                   kv_dtype=kv_dtype, tokens_per_s=tokens_per_s, precision=precision,
                   gpu_file=gpu_file, cuda_context_gib=cuda_context_gib,
                   comm_buffer_gib=comm_buffer_gib, fragmentation=fragmentation)
    return capacity_answer(load_model(model), get_gpu(gpu, gpu_file), opts["required_context"],
                           concurrency, kv_dtype=kv_dtype, precision=precision,
                           weights=weights, tokens_per_s=tokens_per_s, gpu_file=gpu_file,
                           cuda_context_gib=cuda_context_gib, comm_buffer_gib=comm_buffer_gib,
                           fragmentation=fragmentation, kv_opts=kv_opts)


def capacity_answer(cfg, g, context: int, concurrency: int, *, kv_dtype: str, precision: str,
                    weights: str | None = None, tokens_per_s: float | None = None,
                    gpu_file: str | None = None, cuda_context_gib: float | None = None,
                    comm_buffer_gib: float | None = None, fragmentation: float | None = None,
                    kv_opts: dict | None = None) -> Answer:
    """plan infer's capacity mode on a loaded model ``cfg`` and GPU ``g`` (a Gpu): the layouts
    (serve.infer) and the best one's paged KV cache (serve.kv), what --emit reads. A serving
    report answers with this too, so its Launch files are plan infer's (txcalc.report)."""
    from ..serve import kv as S
    from ..serve.infer import plan_infer as search

    kv_opts = kv_opts or {}
    p = search(cfg, g, context, concurrency, kv_dtype=kv_dtype,
               tokens_per_s=tokens_per_s, precision=precision, gpu_file=gpu_file,
               overheads=overheads(cuda_context_gib, comm_buffer_gib, fragmentation),
               weights=weights)
    out = p.to_json()
    b = p.best
    # the engine's own non-torch rule unless --cuda-context-gib sizes the context; a
    # --comm-buffer-gib given alone replaces the engine's communicator term only
    sized = overheads(cuda_context_gib, comm_buffer_gib, fragmentation) \
        if cuda_context_gib is not None else None
    comm_alone = None if sized is not None or comm_buffer_gib is None else \
        overheads(None, comm_buffer_gib, None).comm_buffer_bytes
    kv = S.kv_capacity_or_none(cfg, p.gpu, tp=b.tp, pp=b.pp, kv_dtype=kv_dtype,
                               precision=precision, weights=weights, overheads=sized,
                               comm_buffer_bytes=comm_alone,
                               **{"max_model_len": p.context, **kv_opts})
    out.update(S.kv_json(kv))
    return Answer(out, {"mode": "capacity", "plan": p, "kv": kv, "served": cfg,
                        "precision": precision, "kv_dtype": kv_dtype, "weights": weights})


def _max_throughput(served, g, n_in, n_out, tp, pp, kv_dtype, precision, weights,
                    gpu_file) -> Answer:
    """plan infer's offline mode (--rate inf, no SLO): output tokens/s at maximum load, every
    request queued at once (``trtllm-bench throughput``), from ``serve.infer.serve_throughput``
    with trtllm-bench's engine settings; tp (pp) pinned, else each TP degree up to a node
    whose layout fits, ranked by output tokens/s per GPU."""
    from ..errors import PlanError
    from ..serve.infer import serve_throughput
    pp = 1 if pp is None else pp
    tps = [tp] if tp is not None else [t for t in (1, 2, 4, 8, 16, 32, 64)
                                        if t <= g.gpus_per_node]
    rows, errors = [], []
    for t in tps:
        try:
            rows.append(serve_throughput(served, g, n_in, n_out, tp=t, pp=pp, weights=weights,
                                         kv_dtype=kv_dtype, precision=precision,
                                         gpu_file=gpu_file))
        except PlanError as e:
            errors.append(str(e))
    if not rows:
        raise PlanError(errors[0] if len(errors) == 1 else
                        f"no tp in {tps} x pp {pp} fits: {errors[0]}")
    rows.sort(key=lambda d: (-d["output_tokens_per_s"] / (d["tp"] * d["pp"]), d["tp"]))
    b = rows[0]
    out = {**b, "input_len": n_in, "output_len": n_out, "rate": "inf",
           "mode": "offline max throughput", "total_gpus": b["tp"] * b["pp"],
           "layouts": rows, "notes": [OFFLINE_NOTE]}
    return Answer(out, {"mode": "offline", "kv_dtype": kv_dtype, "served": served})


def _serve_plan(model, gpu, context, input_len, output_len, rate, concurrency, ttft_p99,
                itl_p99, price, tp, pp, replicas, kv_dtype, precision, weights, gpu_file,
                kv_opts, ep=None, plot=None, attention_kernel=None, mode=None) -> Answer:
    """plan infer's SLO mode: ``serve.plan.plan_serving`` on the checked options."""
    from .. import inputs as I
    from ..engine.hardware import get_gpu
    from ..serve.kv import ServingError
    from ..serve.plan import parse_duration, parse_rate, plan_serving
    from .checks import checked
    if input_len is None or output_len is None:
        raise ServingError("a serving plan needs both --input-len and --output-len")
    if context is not None:
        raise ServingError("--context and --input-len/--output-len exclude each other (the "
                           "context of a request is input + output)")
    n_in = I.parse_context(input_len, "--input-len", zero=False)
    n_out = I.parse_context(output_len, "--output-len", zero=False)
    if (rate is None) == (concurrency is None):
        raise ServingError("a serving plan needs exactly one of --rate and --concurrency")
    opts = checked(gpu=gpu, concurrency=concurrency, kv_dtype=kv_dtype, precision=precision,
                   gpu_file=gpu_file, price=price, tp=tp, pp=pp)
    r = None if rate is None else parse_rate(rate)
    ttft = None if ttft_p99 is None else parse_duration(ttft_p99, "--ttft-p99")
    itl = None if itl_p99 is None else parse_duration(itl_p99, "--itl-p99")
    reps = None if replicas is None else I.integer("--replicas", replicas, 1, 4096)
    if r is not None and math.isinf(r) and ttft is None and itl is None and reps is None \
            and plot is None and not kv_opts and mode != "disaggregated":
        cfg = load_model(model)
        return _max_throughput(cfg, get_gpu(gpu, gpu_file),
                               n_in, n_out, tp, pp, kv_dtype, precision, weights, gpu_file)
    kw = {k: v for k, v in kv_opts.items() if k != "max_model_len"}
    if "max_model_len" in kv_opts and kv_opts["max_model_len"] < n_in + n_out:
        raise ServingError(f"--max-model-len ({kv_opts['max_model_len']:,}) is shorter than "
                           f"--input-len + --output-len ({n_in + n_out:,})")
    if plot is not None:  # refuse a bad folder before the simulations
        from ..atomic import check_out_folder
        check_out_folder(plot, "--plot")
    cfg = load_model(model)
    g = get_gpu(gpu, gpu_file)
    p = plan_serving(cfg, g, n_in, n_out, rate=r,
                     concurrency=opts["concurrency"], ttft_p99_s=ttft, itl_p99_s=itl,
                     price_per_gpu_hour=price, tp=tp, pp=pp, replicas=reps, kv_dtype=kv_dtype,
                     precision=precision, weights=weights, gpu_file=gpu_file, ep=ep,
                     mode=mode or "auto", **kw,
                     **({} if attention_kernel is None
                        else {"attention_kernel": attention_kernel}))
    out = p.to_json()
    b = p.best  # its paged KV cache per GPU, as the capacity mode gives (kv_blocks, kv_tokens)
    from ..serve.kv import kv_capacity_or_none, kv_json
    out.update(kv_json(kv_capacity_or_none(
        cfg, g, tp=b.tp, pp=b.pp, kv_dtype=kv_dtype, precision=precision, weights=weights,
        max_model_len=n_in + n_out, max_num_batched_tokens=b.max_num_batched_tokens,
        **{k: v for k, v in kw.items() if k != "max_num_batched_tokens"})))
    return Answer(out, {"mode": "slo", "plan": p, "served": cfg,
                                "input_len": n_in, "output_len": n_out})
