"""`txcalc plan train` and `txcalc plan infer`: how many GPUs, which layout, how long, cost."""

from __future__ import annotations

import typer

from ..units import GIB, plural
from .typer_app import app
from .output import console, emit_json, print_assumed
from .params_cmd import STACK_HELP
from .options import (COMMON_OPTS, FT_OPTS, LAYOUT_OPTS, MODEL_HELP, RECIPE_OPTS, SERVE_OPTS,
                      TRAIN_OPTS)
from .costs_cmd import GLOBAL_HELP
from .emit_opts import FROM_INFER, FROM_TRAIN, OUT_OPT, emit_option, need_out as _need_out

plan_app = typer.Typer(no_args_is_help=True, help="How many GPUs: training and serving plans.")
app.add_typer(plan_app, name="plan")


@plan_app.command("train")
def train(ctx: typer.Context, model: str = typer.Argument(..., help=MODEL_HELP),
          tokens: str = typer.Option(None, "--tokens", help="Training tokens: 15T, 300B, 2e12 (required unless --from-config gives a torchtitan run's steps)."),
          gpu: str = typer.Option("h100", "--gpu", help="GPU name (see the catalog) or alias."),
          gpu_gb: float = typer.Option(None, "--gpu-gb", help="Usable memory of one GPU in GB (1e9) for every fit check: CUDA's total as torch.cuda.get_device_properties(0).total_memory reports it, nothing taken off; overrides the catalog's figure for --gpu (its speeds stay)."),
          days: float = typer.Option(None, "--days", help="Deadline in days."),
          max_gpus: int = typer.Option(None, "--max-gpus", help="At most this many GPUs."),
          gpus: int = typer.Option(None, "--gpus", help="Exactly this many GPUs."),
          seq: str = typer.Option(None, "--seq", help="Sequence length (default 4096)."),
          global_batch: int = typer.Option(None, "--global-batch",
                                           help="Sequences per step: alone, pinned; with --max-global-batch, where the search starts (default ~4M tokens, searched)."),
          max_global_batch: str = typer.Option(None, "--max-global-batch", help="Largest global batch the search tries: sequences (2048) or tokens with a binary K/M/G suffix (16M = 16 x 2^20 tokens; default DeepSeek LLM's critical batch at the run's compute, 0.292 x C^0.3271 tokens)."),
          gpus_per_node: int = typer.Option(None, "--gpus-per-node", help="GPUs per node (default the GPU's, 8): GPU counts are whole nodes, and a node is the NVLink domain."),
          precision: str = TRAIN_OPTS["precision"],
          optimizer: str = TRAIN_OPTS["optimizer"],
          price: float = typer.Option(None, "--price", help="Price per GPU-hour (your currency)."),
          achieved_tflops: float = typer.Option(None, "--achieved-tflops",
                                                help="Sustained hardware TFLOP/s per GPU (overrides the roofline)."),
          gpu_file: str = COMMON_OPTS["gpu_file"],
          context_gib: float = LAYOUT_OPTS["cuda_context_gib"],
          comm_gib: float = LAYOUT_OPTS["comm_buffer_gib"],
          fragmentation: float = LAYOUT_OPTS["fragmentation"],
          tp: int = LAYOUT_OPTS["tp"],
          pp: int = LAYOUT_OPTS["pp"],
          cp: int = typer.Option(None, "--cp", help="Pin the context-parallel degree."),
          ep: int = LAYOUT_OPTS["ep"],
          zero: int = typer.Option(None, "--zero", help="Pin the ZeRO stage (0-3)."),
          micro_batch: int = typer.Option(None, "--micro-batch", help="Pin the micro-batch."),
          recompute: str = typer.Option(None, "--recompute", help="Pin recompute: none | selective | full | op (torchtitan's op-level)."),
          recompute_layers: int = typer.Option(None, "--recompute-layers", help="Pin partial recompute: only the first N blocks of each stage (Megatron --recompute-num-layers N, block method; 0: every block)."),
          offload_checkpoints: bool = typer.Option(None, "--offload-checkpoints/--keep-checkpoints", help="Pin full recompute's checkpoints to host memory (over PCIe) or to the GPU."),
          attn: str = typer.Option(None, "--attn", help="Attention kernel: eager | sdpa | flash (default flash, or the stack's)."),
          stack: str = typer.Option(None, "--stack", help=STACK_HELP),
          goodput: float = typer.Option(None, "--goodput", help="Fraction of wall-clock time spent training, 0 < G <= 1 (default 0.90: Llama 3's 'higher than 90% effective training time'); days and GPU-hours are divided by it."),
          overlap: str = typer.Option(None, "--overlap", help="Collectives hidden behind compute, comma-separated: tp, param_gather, grad_reduce, pp, or none (default the stack's)."),
          finetune: str = FT_OPTS["finetune"],
          lora_rank: int = FT_OPTS["lora_rank"],
          lora_alpha: float = FT_OPTS["lora_alpha"],
          lora_targets: str = FT_OPTS["lora_targets"],
          lora_dropout: float = FT_OPTS["lora_dropout"],
          trainable: str = FT_OPTS["trainable"],
          base_format: str = FT_OPTS["base_format"],
          offload: str = FT_OPTS["offload"],
          loss: str = FT_OPTS["loss"],
          recipe: str = RECIPE_OPTS["recipe"],
          rows: int = typer.Option(8, "--rows", help="Layouts to show."),
          global_tokens: str = typer.Option("0", "--global-tokens", help=GLOBAL_HELP),
          emit: str = emit_option("plan train"),
          out_file: str = OUT_OPT,
          from_config: str = FROM_TRAIN,
          json_out: bool = COMMON_OPTS["json"]):
    """Fewest GPUs that fit, GPUs for a deadline, and the best layouts for a training run."""
    from ..answers.plan import plan_train as answer

    v = {"tokens": tokens, "gpus": gpus, "seq": seq, "global_batch": global_batch,
         "precision": precision, "optimizer": optimizer, "tp": tp, "pp": pp, "cp": cp,
         "ep": ep, "zero": zero, "micro_batch": micro_batch, "recompute": recompute}
    expected: dict = {}
    if from_config is not None:
        from ..emit.read import read_train
        from .emit_opts import merged
        opts, expected = read_train(from_config)
        file_tokens = opts.pop("tokens", None)
        v = merged(ctx, v, opts)
        v["tokens"] = v["tokens"] or file_tokens
    _need_out(emit, out_file, "plan train")
    if v["tokens"] is None:
        from ..errors import WorkloadError
        raise WorkloadError("give --tokens (training tokens: 15T, 300B, 2e12)")
    ans = answer(model, v["tokens"], gpu, days, max_gpus, v["gpus"], v["seq"],
                 v["global_batch"], v["precision"], v["optimizer"], price, achieved_tflops,
                 gpu_file, context_gib, comm_gib, fragmentation, v["tp"], v["pp"], v["cp"],
                 v["ep"], v["zero"], v["micro_batch"], v["recompute"], recompute_layers,
                 offload_checkpoints, attn, stack, goodput, overlap, finetune, lora_rank,
                 lora_alpha, lora_targets, lora_dropout, trainable, base_format, loss, rows,
                 global_tokens, max_global_batch, gpus_per_node, recipe, gpu_gb, offload)
    out = ans.json
    if expected:
        from ..emit.read import check_expected
        p = ans.parts["plan"]
        check_expected(from_config, p.best.layout, expected, p.setting.cfg.n_layers)
    if emit is not None:
        from .emit_opts import emit_answer
        emit_answer(ctx, emit, "plan train", ans, model, out_file, json_out)
        if out_file is None:
            return
    if json_out:
        emit_json(out)
        return
    p, ft = ans.parts["plan"], ans.parts["finetune"]
    _print_train(p, {"--gpus": gpus, "--max-gpus": max_gpus, "--tp": tp, "--pp": pp,
                     "--cp": cp, "--ep": ep, "--zero": zero, "--micro-batch": micro_batch,
                     "--recompute": recompute, "--recompute-layers": recompute_layers,
                     "--offload-checkpoints": offload_checkpoints}, ft, out["band"])
    print_assumed(out)


def _host_words(s, b) -> str:
    """What a training layout keeps in host memory, in words."""
    if not s.offload_optimizer:
        return "offloaded checkpoints"
    return "offloaded optimizer" + (" and checkpoints" if b.layout.offload_checkpoints else "")


def _batch_words(p) -> str:
    """Where the plan's global batch came from, in words: '25,165,824 tokens, searched up to
    16,389'."""
    s = p.setting
    size = f"{s.global_batch * s.seq:,} tokens"
    if p.max_global_batch is None:
        return f"{size}, pinned"
    return (f"{size}, {'the default, ' if p.global_batch_source == 'default' else ''}"
            f"searched up to {p.max_global_batch:,}")


def _print_train(p, pins: dict, ft=None, band=None) -> None:
    """The plan for people: summary lines that break only between phrases, tables that fold
    to key-value blocks when the terminal is narrow (txcalc.cli.narrow)."""
    from .narrow import fit_table, say
    s, b = p.setting, p.best
    from ..engine.hardware import memory_words
    # the GPU's words break between words (a long phrase alone would leave "MODEL on" by
    # itself on the first line)
    say(console, [*f"{s.gpu.name} (each {memory_words(s.gpu, 'GiB')}):".split(" "),
                  f"{p.tokens:,} tokens,", f"seq {s.seq},", f"global batch {s.global_batch:,}",
                  f"({_batch_words(p)}),", f"{s.precision},",
                  s.optimizer + ("," if ft is not None else "")]
        + ([ft.describe()] if ft is not None else []), first=f"{s.cfg.name} on ", sep=" ")
    if s.loss != "full":
        say(console, [f"LM loss {s.loss}"], first="  ")
    pinned = {k: v for k, v in pins.items() if v is not None and k not in ("--gpus", "--max-gpus")}
    within = "" if pins.get("--max-gpus") is None else f" (of at most {pins['--max-gpus']:,})"
    if pins.get("--gpus") is not None:
        say(console, [f"GPUs pinned by --gpus: {pins['--gpus']:,}; training fits on them"
                      + (" with the pins below" if pinned else "")], first="  ")
    else:
        say(console, [f"fewest GPUs on which training fits{within}"
                      + (" with the pins below" if pinned else "") + f": {p.min_gpus_to_fit:,}"],
            first="  ")
    if pinned:
        say(console, [f"{k} {v}" for k, v in pinned.items()],
            first="  pinned (the search kept only these): ")
    if p.gpus_for_deadline is not None:
        say(console, [f"GPUs to finish within {p.days_limit:g} days: {p.gpus_for_deadline:,}"],
            first="  ")
    cost = [f"cost {b.cost:,.0f}"] if b.cost is not None else []
    say(console, [f"{b.days:,.1f} days", f"{b.gpu_hours:,.0f} GPU-hours", *cost,
                  f"MFU {b.mfu:.1%}", f"{b.tokens_per_s:,.0f} tokens/s"],
        first=f"  best: {b.layout.short()} on {plural(b.gpus, 'GPU')}: ")
    say(console, (f"days and GPU-hours at goodput {s.goodput:.0%} (the wall-clock time spent "
                  "training; MFU and tokens/s are throughput)").split(" "), first="  ", sep=" ")
    (d_lo, d_hi), (h_lo, h_hi), (m_lo, m_hi) = b.days_band, b.gpu_hours_band, b.mfu_band
    if band["runs"]:
        say(console, [f"{d_lo:,.1f}-{d_hi:,.1f} days,", f"{h_lo:,.0f}-{h_hi:,.0f} GPU-hours,",
                      f"MFU {m_lo:.1%}-{m_hi:.1%}" + ("," if b.cost is not None else "")]
            + ([f"cost {b.cost_band[0]:,.0f}-{b.cost_band[1]:,.0f}"]
               if b.cost is not None else []),
            first=f"  band ({band['coverage']:.0%} of {band['runs']} published test runs "
                  f"fell inside): ", sep=" ")
    for note in p.notes:
        say(console, note.split(" "), first="  note: ", sep=" ")
    for warning in p.warnings:
        say(console, warning.split(" "), first="  warning: ", sep=" ")
    say(console, [f"{k.replace('_', ' ')} {v / GIB:,.1f} GiB" for k, v in b.memory.items() if v]
        + [f"total {b.total_bytes / GIB:,.1f} of {s.gpu.usable_bytes / GIB:,.1f} GiB usable"]
        + ([f"host memory ({_host_words(s, b)}) {b.host_bytes / GIB:,.1f} GiB"]
           if b.host_bytes else []),
        first="  memory per GPU of the best layout (fullest stage): ")
    if b.communication:
        fit_table(console, "communication of the best layout, per GPU per step",
                  ["dim", "collective", "link", "GiB sent", "time s", "exposed s", "hidden s"],
                  [(dim, c["collective"], c["link"], f"{c['bytes_per_step'] / GIB:,.2f}",
                    f"{c['time_s']:,.3f}", f"{c['exposed_s']:,.3f}", f"{c['hidden_s']:,.3f}")
                   for dim, c in b.communication.items()])
        say(console, [f"overlap assumed: {', '.join(s.overlap) or 'none'}"]
            + ([f"fused kernels: {', '.join(s.fused)}"] if s.fused else []),
            first="  ", sep="; ")
    band_note = (f"; band of step s, days, GPU-hours: x{b.band[0]:.3f} to x{b.band[1]:.3f}, "
                 f"of MFU: /{b.band[1]:.3f} to /{b.band[0]:.3f}" if band["runs"] else "")
    cols = ["layout", "GPUs", "GiB/GPU", "step s", "MFU", "days", "GPU-hours"] + (
        ["cost"] if b.cost is not None else [])
    fit_table(console, f"best layouts ({p.layouts_evaluated:,} searched in {p.search_s:.2f} s; "
                       "GiB = 2^30 bytes; z: ZeRO stage, v: virtual stages, mb: micro-batch" + band_note + ")", cols,
              [(r.layout.short(), f"{r.gpus:,}", f"{r.total_bytes / GIB:,.1f}",
                f"{r.step_time_s:,.2f}", f"{r.mfu:.1%}", f"{r.days:,.1f}", f"{r.gpu_hours:,.0f}",
                *((f"{r.cost:,.0f}",) if r.cost is not None else ())) for r in p.rows])


@plan_app.command("infer")
def infer(ctx: typer.Context, model: str = typer.Argument(..., help=MODEL_HELP),
          gpu: str = typer.Option("h100", "--gpu", help="GPU name (see the catalog) or alias."),
          context: str = typer.Option(None, "--context", help="Tokens per sequence: 128k (=131072), 8192 (default with --input-len: input + output)."),
          concurrency: int = typer.Option(None, "--concurrency", help="Sequences served at once (default 1); with --input-len: clients of a closed loop."),
          kv_dtype: str = typer.Option(None, "--kv-dtype", help="bf16 | fp16 | fp8 | int8 | int4 | fp32 (default: the weights' 16-bit dtype, as vLLM's kv_cache_dtype auto)."),
          tokens_per_s: float = typer.Option(None, "--tokens-per-s", help="Decode tokens/s wanted in all."),
          precision: str = typer.Option(None, help="Weights and activations: bf16 | fp16 | fp32 (default bf16; fp16 on a GPU without bf16: T4, V100)."),
          weights: str = SERVE_OPTS["weights"],
          gpu_file: str = COMMON_OPTS["gpu_file"],
          context_gib: float = LAYOUT_OPTS["cuda_context_gib"],
          comm_gib: float = LAYOUT_OPTS["comm_buffer_gib"],
          fragmentation: float = LAYOUT_OPTS["fragmentation"],
          gpu_memory_utilization: float = typer.Option(None, "--gpu-memory-utilization", help="vLLM's fraction of GPU memory for weights, activations and KV blocks (default 0.9)."),
          block_size: int = typer.Option(None, "--block-size", help="Tokens per KV block (vLLM 16; TRT-LLM 64 or 128)."),
          max_model_len: str = typer.Option(None, "--max-model-len", help="Longest sequence the engine admits (default: the context)."),
          max_num_batched_tokens: str = typer.Option(None, "--max-num-batched-tokens", help="Tokens of the largest step the engine profiles (default max(max-model-len, 2048))."),
          prefix_hit_rate: float = typer.Option(None, "--prefix-hit-rate", help="Share of each prompt found in the prefix cache (a shared prefix, stored once, never prefilled): 0-1."),
          attention_kernel: str = typer.Option(None, "--attention-kernel", help="Context-parallel prefill table (prompts of 128K+): profile (the GPU's, FlashAttention-2 on H100) or fa3 (FlashAttention-3 on Hopper, 75 % of peak)."),
          engine: str = typer.Option(None, "--engine", help="KV sizing rule: vllm (= vllm-v1), vllm-0.6.5, vllm-0.6, vllm-0.2 (those releases' memory profile), trtllm; with --input-len also the scheduler simulated: vllm (V1: chunked, mixed steps), vllm-v0 (whole prompts stall decodes), sglang (chunked, prefill-first), trtllm (whole prompts, no eviction); default: txcalc's scheduler."),
          input_len: str = typer.Option(None, "--input-len", help="Prompt tokens per request: plans replicas for SLOs by simulating continuous batching."),
          output_len: str = typer.Option(None, "--output-len", help="Output tokens per request (with --input-len)."),
          rate: str = typer.Option(None, "--rate", help="Requests/s arriving (Poisson), or inf: every request at once (offline)."),
          ttft_p99: str = typer.Option(None, "--ttft-p99", help="SLO on the 99th percentile time to first token: 2s, 500ms."),
          itl_p99: str = typer.Option(None, "--itl-p99", help="SLO on the 99th percentile inter-token latency: 50ms."),
          price: float = typer.Option(None, "--price", help="Price per GPU-hour: cost per million tokens."),
          tp: int = LAYOUT_OPTS["tp"],
          pp: int = LAYOUT_OPTS["pp"],
          ep: int = LAYOUT_OPTS["ep"],
          plot: str = typer.Option(None, "--plot", help="Folder for two PNGs (with --input-len): TTFT/ITL against load, and the layouts' throughput-latency Pareto front."),
          replicas: int = typer.Option(None, "--replicas", help="Pin the number of replicas (with --input-len)."),
          mode: str = typer.Option(None, "--mode", help="colocated | disaggregated | auto (with --input-len; default auto: prefill and decode on the same replicas, or on a prefill pool and a decode pool, whichever needs fewer GPUs, the other shown beside it)."),
          emit: str = emit_option("plan infer"),
          out_file: str = OUT_OPT,
          from_config: str = FROM_INFER,
          json_out: bool = COMMON_OPTS["json"]):
    """GPUs per replica (TP x PP), replicas, KV-cache concurrency, prefill and decode speed;
    with --input-len/--output-len and --rate or --concurrency: the layout and replicas that
    meet latency SLOs, from a simulation of continuous batching (txcalc.serve.sim)."""
    from ..answers.plan import plan_infer as answer

    v = {"tp": tp, "pp": pp, "ep": ep, "replicas": replicas, "max_model_len": max_model_len,
         "max_num_batched_tokens": max_num_batched_tokens, "block_size": block_size,
         "gpu_memory_utilization": gpu_memory_utilization, "kv_dtype": kv_dtype,
         "precision": precision, "weights": weights}
    layout: dict = {}
    _need_out(emit, out_file, "plan infer")
    if from_config is not None:
        from ..emit.read import read_vllm
        from .emit_opts import merged
        v = merged(ctx, v, read_vllm(from_config))
        if input_len is None and output_len is None:
            # a capacity answer picks its own layout: the file's is checked against it
            layout = {k: v.pop(k) for k in ("tp", "pp", "ep", "replicas")
                      if v.get(k) is not None}
            v.update(dict.fromkeys(("tp", "pp", "ep", "replicas")))
            context = context or v["max_model_len"]
    ans = answer(model, gpu, context, concurrency, v["kv_dtype"], tokens_per_s, v["precision"],
                 v["weights"], gpu_file, context_gib, comm_gib, fragmentation,
                 v["gpu_memory_utilization"], v["block_size"], v["max_model_len"],
                 v["max_num_batched_tokens"], prefix_hit_rate, attention_kernel, engine,
                 input_len, output_len, rate, ttft_p99, itl_p99, price, v["tp"], v["pp"],
                 v["ep"], plot, v["replicas"], mode)
    out, mode = ans.json, ans.parts["mode"]
    for k, want in layout.items():
        if k != "replicas" and (out.get(k) or 1) != want:
            from ..emit import EmitError
            raise EmitError(f"--from-config: the file's {k} {want} is not the layout plan "
                            f"infer picks (tp {out['tp']} x pp {out['pp']}); give --input-len "
                            "and --output-len to plan that layout")
    if emit is not None:
        from .emit_opts import emit_answer
        emit_answer(ctx, emit, "plan infer", ans, model, out_file, json_out)
        if out_file is None:
            return
    if mode == "slo" and plot is not None:
        from ..report.serving_load import write_serving_plots
        from ..serve.load import serving_load_data
        b = ans.parts["plan"].best
        out["plots"] = write_serving_plots(serving_load_data(
            ans.parts["served"], gpu, ans.parts["input_len"], ans.parts["output_len"],
            tp=b.tp, pp=b.pp, weights=weights, kv_dtype=ans.parts["kv_dtype"],
            max_num_batched_tokens=b.max_num_batched_tokens, gpu_file=gpu_file,
            precision=ans.parts["precision"]), plot)
    if json_out:
        emit_json(out)
        return
    if mode == "offline":
        _print_max_throughput(out, out["kv_dtype"])
    elif mode == "slo":
        _print_serve_plan(ans.parts["plan"], out)
    else:
        _print_infer(ans.parts["plan"], ans.parts["kv"])
    print_assumed(out)


def _print_infer(p, kv) -> None:
    """plan infer's capacity answer for people."""
    b = p.best
    from .narrow import fit_table, say
    say(console, [f"{plural(p.concurrency, 'sequence')} of {p.context:,} tokens,",
                  f"KV cache {p.kv_dtype},", f"weights {p.weights}"],
        first=f"{p.cfg.name} on {p.gpu.name}: ", sep=" ")
    say(console, [f"up to {b.max_concurrency:,} sequences fit in the KV cache;",
                  f"prefill {b.prefill_latency_s:.2f} s;",
                  f"decode {b.decode_tokens_per_s:,.0f} tokens/s",
                  f"({b.decode_tokens_per_s_per_seq:,.1f} per sequence)"],
        first=f"  {plural(b.total_gpus, 'GPU')}: {plural(b.replicas, 'replica')} of tp {b.tp} "
              f"x pp {b.pp}; ",
        sep=" ")
    fit_table(console, "replica layouts", ["tp x pp", "replicas", "GPUs", "weights GiB/GPU",
                                           "KV GiB/seq per GPU", "max seqs per replica", "prefill s",
                                           "decode tok/s"],
              [(f"{r.tp} x {r.pp}", r.replicas, r.total_gpus,
                f"{r.weights_bytes / GIB:,.1f}", f"{r.kv_bytes_per_seq / GIB:,.2f}",
                f"{r.max_concurrency_per_replica:,}", f"{r.prefill_latency_s:.2f}",
                f"{r.decode_tokens_per_s:,.0f}") for r in p.rows[:10]])
    if kv is not None:
        say(console, [f"{kv.kv_cache_bytes / GIB:,.2f} GiB per GPU", f"= {kv.kv_blocks:,} blocks",
                      f"= {kv.kv_tokens:,} tokens;",
                      f"{kv.max_concurrency:,.2f} sequences of {kv.max_model_len:,} tokens"],
            first=f"  paged KV cache (vLLM-style, utilisation {kv.gpu_memory_utilization:g}, "
                  f"block {kv.block_size}): ", sep=" ")


def _print_max_throughput(out: dict, kv_dtype: str) -> None:
    """plan infer's offline answer (--rate inf, no SLO) for people."""
    rows, n_in, n_out = out["layouts"], out["input_len"], out["output_len"]
    b = rows[0]
    from .narrow import fit_table, say
    say(console, [f"{n_in:,} in / {n_out:,} out tokens,", "every request at once,",
                  f"weights {b['weights']},", f"KV cache {kv_dtype}"],
        first=f"{b['model']} on {b['gpu']}: ", sep=" ")
    say(console, [f"{b['output_tokens_per_s']:,.0f} output tokens/s",
                  f"({b['requests_per_s']:,.2f} requests/s);",
                  f"batch {b['batch']:,}", f"(max_batch_size {b['max_batch_size']:,},",
                  f"max_num_tokens {b['max_num_tokens']:,});",
                  f"decode step {b['decode_step_s'] * 1e3:.1f} ms"],
        first=f"  tp {b['tp']} x pp {b['pp']}: ", sep=" ")
    fit_table(console, "layouts (output tokens/s per GPU)",
              ["tp x pp", "batch", "step ms", "prefill ms/req", "out tok/s", "per GPU"],
              [(f"{d['tp']} x {d['pp']}", f"{d['batch']:,}", f"{d['decode_step_s'] * 1e3:.1f}",
                f"{d['prefill_s_per_request'] * 1e3:.2f}", f"{d['output_tokens_per_s']:,.0f}",
                f"{d['output_tokens_per_s'] / (d['tp'] * d['pp']):,.0f}") for d in rows])


def _replicas_words(r, mode: bool = True) -> str:
    """A serving row's replicas and how it serves: '5 replicas of tp 4 x pp 1, colocated',
    '6 replicas: 4 prefill TP4 + 2 decode TP4, disaggregated' (``mode``: the mode's name)."""
    if r.mode == "disaggregated":
        words = (f"{r.replicas} replicas: {r.prefill_replicas} prefill TP{r.tp} + "
                 f"{r.decode_replicas} decode TP{r.tp}")
    else:
        words = f"{plural(r.replicas, 'replica')} of tp {r.tp} x pp {r.pp}" + (
            f" ep {r.ep}" if r.ep > 1 else "")
    return words + (f", {r.mode}" if mode else "")


def _print_serve_plan(p, out: dict) -> None:
    """plan infer's SLO answer for people."""
    b = p.best
    load = (f"{p.rate:g} requests/s" if p.rate is not None else
            f"{p.concurrency} concurrent clients")
    slo = ", ".join(f"{k} {v * 1e3:g} ms" for k, v in (("TTFT p99", p.ttft_p99_s),
                                                       ("ITL p99", p.itl_p99_s)) if v)
    from .narrow import fit_table, say
    say(console, [f"{p.input_len:,} in / {p.output_len:,} out tokens",
                  f"at {load}" + (";" if slo else "")] + ([f"SLO {slo}"] if slo else []),
        first=f"{p.model} on {p.gpu}: ", sep=" ")
    cost = ([f"{b.cost_per_million_tokens:,.3f} per million tokens",
             f"({b.cost_per_million_output_tokens:,.3f} per million output tokens)"]
            if b.cost_per_million_tokens is not None else [])
    say(console, [f"TTFT p50/p99 {b.ttft_p50_s:.3f}/{b.ttft_p99_s:.3f} s,",
                  f"ITL p50/p99 {b.itl_p50_s * 1e3:.1f}/{b.itl_p99_s * 1e3:.1f} ms;",
                  f"{b.output_tokens_per_s:,.0f} output tokens/s" + (";" if cost else ""),
                  *cost],
        first=f"  {plural(b.total_gpus, 'GPU')}: {_replicas_words(b)}; ", sep=" ")
    if b.load is not None:
        ld = b.load
        off = ld["offered_requests_per_s"]
        say(console, [f"TTFT mean {ld['ttft_mean_s']:.3f} s,",
                      f"ITL mean {ld['itl_mean_s'] * 1e3:.1f} ms,",
                      (f"end-to-end mean/p50/p90/p99 {ld['e2e_mean_s']:.2f}/"
                       f"{ld['e2e_p50_s']:.2f}/{ld['e2e_p90_s']:.2f}/{ld['e2e_p99_s']:.2f} s;"),
                      f"{ld['achieved_requests_per_s']:,.2f} requests/s per replica served"
                      + (f" of {off:,.2f} offered" if off else "") + ";",
                      ("saturated (the queue grows without bound)" if ld["saturated"]
                       else "not saturated")
                      + (f", saturates past {out['saturation_requests_per_s']:,.2f} "
                         "requests/s" if out.get("saturation_requests_per_s") else "")]
            + ([f"({ld['preemptions']:,} preemptions)"] if ld["preemptions"] else []),
            first=f"  under load ({out.get('engine', 'txcalc')} scheduler): ", sep=" ")
    a = p.alternative
    if a is not None:
        other = ("best colocated" if a.mode == "colocated"
                 else "best disaggregated of the layouts tried")
        more = a.total_gpus - b.total_gpus
        say(console, [plural(a.total_gpus, "GPU") + (f" ({more:+,} GPUs)" if more else "") + ",",
                      _replicas_words(a, mode=False) + (";" if a.cost_per_million_tokens
                                                        is not None else "")]
            + ([f"{a.cost_per_million_tokens:,.3f} per million tokens"]
               if a.cost_per_million_tokens is not None else []),
            first=f"  {other}: ", sep=" ")
    fit_table(console, "layouts (fewest replicas meeting the SLOs)",
              ["tp x pp", "replicas", "GPUs", "chunk", "TTFT p99 s", "ITL p99 ms",
               "out tok/s", "meets SLO"],
              [(f"{r.tp} x {r.pp}" + (f" ep {r.ep}" if r.ep > 1 else "") + (
                  f" {r.prefill_replicas}P+{r.decode_replicas}D"
                  if r.mode == "disaggregated" else ""), r.replicas, r.total_gpus,
                f"{r.max_num_batched_tokens:,}", f"{r.ttft_p99_s:.3f}",
                f"{r.itl_p99_s * 1e3:.1f}", f"{r.output_tokens_per_s:,.0f}",
                "yes" if r.meets_slo else "no") for r in p.rows])
    for note in p.notes:
        say(console, note.split(" "), first="  note: ", sep=" ")
    for path in out.get("plots", []):
        say(console, [str(path)], first="  plot: ", sep=" ")
