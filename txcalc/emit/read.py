"""``--from-config FILE``: a torchtitan TOML or a DeepSpeed JSON read back into ``plan train``'s
options, a ``vllm serve`` line into ``plan infer``'s; the inverse of the emitters' tables
(txcalc.emit.train, txcalc.emit.serve). A setting txcalc cannot pin is refused in one line.

``read_train`` returns ``(options, expected)``: options fill what the command line left unset
(a value given on both that differs is refused); ``expected`` are layout fields the planner
chooses itself (sequence parallelism, hybrid shard, virtual stages), checked against the best
layout after the search.
"""

from __future__ import annotations

import shlex

from .common import SERVE_DTYPE, TORCH_OPTIMIZER, EmitError
from .serve import FLAGS, KV_VLLM

_OPTIMIZER = {v: k for k, v in TORCH_OPTIMIZER.items()}


def _bad(path: str, what: str) -> EmitError:
    from ..safeio import shown
    return EmitError(f"--from-config ({shown(path)}): {what}")


def read_train(path: str) -> tuple[dict, dict]:
    """A DeepSpeed JSON (text starting with '{') or a torchtitan TOML as plan train's
    options."""
    from ..safeio import read_text
    text = read_text(path, EmitError)
    if not text.lstrip().startswith("{"):
        return _torchtitan(path, text)
    from ..safeio import parse_json
    doc = parse_json(text, f"--from-config ({path})", EmitError)
    if not isinstance(doc, dict) or "train_micro_batch_size_per_gpu" not in doc:
        raise _bad(path, "not a DeepSpeed config (no train_micro_batch_size_per_gpu)")
    return _deepspeed(path, doc)


def _toml(path, text) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise _bad(path, "reading TOML needs Python 3.11 or the tomli package") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _bad(path, f"not TOML ({e})") from None


def _get(doc: dict, path: str, section: str, key: str, default, kind=int):
    v = doc.get(section, {}).get(key, default)
    if not isinstance(v, kind) or isinstance(v, bool) and kind is int:
        raise _bad(path, f"{section}.{key} ({v!r:.40}) must be {kind.__name__}")
    return v


def _torchtitan(path: str, text: str) -> tuple[dict, dict]:
    doc = _toml(path, text)
    g = lambda s, k, d, kind=int: _get(doc, path, s, k, d, kind)
    par, tr = "parallelism", "training"
    tp, pp = g(par, "tensor_parallel_degree", 1), g(par, "pipeline_parallel_degree", 1)
    cp, ep = g(par, "context_parallel_degree", 1), g(par, "expert_parallel_degree", 1)
    rep, shard = g(par, "data_parallel_replicate_degree", 1), g(par, "data_parallel_shard_degree", -1)
    if shard < 1:
        raise _bad(path, "parallelism.data_parallel_shard_degree -1 (the rest of the GPUs): "
                   "give it, txcalc needs the GPU count")
    reshard = g(par, "fsdp_reshard_after_forward", "default", str)
    zero = 0 if shard == 1 and rep >= 1 and cp == 1 else 2 if reshard == "never" else 3
    dp = rep * shard
    seq, local = g(tr, "seq_len", 2048), g(tr, "local_batch_size", 8)
    gb = g(tr, "global_batch_size", -1)
    mb = g(par, "pipeline_parallel_microbatch_size", 1) if pp > 1 else local
    gb = local * dp if gb < 1 else gb
    ac = doc.get("activation_checkpoint", {})
    mode = ac.get("mode", "selective")
    if mode == "selective" and str(ac.get("selective_ac_option", "2")) != "op":
        raise _bad(path, f"activation_checkpoint.selective_ac_option "
                   f"{ac.get('selective_ac_option', '2')!r}: txcalc models op-level selective "
                   "recompute ('op') only")
    if mode not in ("none", "full", "selective"):
        raise _bad(path, f"activation_checkpoint.mode {mode!r} is not modelled")
    prec = g(tr, "mixed_precision_param", "bfloat16", str)
    conv = doc.get("model", {}).get("converters", [])
    precision = "fp8-mixed" if "float8" in conv else {"bfloat16": "bf16-mixed",
                                                      "float32": "fp32"}.get(prec)
    opt = _OPTIMIZER.get(g("optimizer", "name", "AdamW", str))
    if opt is None or precision is None:
        raise _bad(path, "optimizer.name or training.mixed_precision_param is not modelled")
    opts = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "zero": zero, "gpus": tp * pp * cp * dp,
            "micro_batch": mb, "global_batch": gb, "seq": str(seq), "precision": precision,
            "optimizer": opt, "tokens": str(g(tr, "steps", 10000) * gb * seq),
            "recompute": {"none": "none", "full": "full", "selective": "op"}[mode]}
    sched = g(par, "pipeline_parallel_schedule", "1F1B", str)
    per_stage = doc.get(par, {}).get("pipeline_parallel_layers_per_stage")
    expected = {"sp": tp > 1, "hybrid_shard": zero == 3 and rep > 1}
    if pp > 1:
        expected["schedule"] = "interleaved" if sched == "Interleaved1F1B" else "1f1b"
        expected["layers_per_stage"] = per_stage
    return opts, expected


def _deepspeed(path: str, doc: dict) -> tuple[dict, dict]:
    def num(key, d=None):
        v = doc.get(key, d)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise _bad(path, f"{key} ({v!r:.40}) must be a positive integer")
        return v
    mb, gb = num("train_micro_batch_size_per_gpu"), num("train_batch_size")
    gas = num("gradient_accumulation_steps", 1)
    if gb % (mb * gas):
        raise _bad(path, f"train_batch_size ({gb}) is not a multiple of micro-batch ({mb}) x "
                   f"gradient_accumulation_steps ({gas})")
    z = doc.get("zero_optimization", {})
    if z.get("offload_optimizer") or z.get("offload_param"):
        raise _bad(path, "zero_optimization offload: plan train cannot pin an offload")
    bf16 = doc.get("bf16", {}).get("enabled", False)
    fp16 = doc.get("fp16", {}).get("enabled", False)
    opt = _OPTIMIZER.get(doc.get("optimizer", {}).get("type", "AdamW"))
    if opt is None:
        raise _bad(path, f"optimizer.type {doc['optimizer'].get('type')!r} is not modelled")
    return ({"tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": int(z.get("stage", 0)),
             "gpus": gb // (mb * gas), "micro_batch": mb, "global_batch": gb,
             "precision": "bf16-mixed" if bf16 else "fp16-mixed" if fp16 else "fp32",
             "optimizer": opt,
             "recompute": "full" if "activation_checkpointing" in doc else "none"},
            {"hybrid_shard": False})


def check_expected(path: str, best_layout, expected: dict, n_layers: int) -> None:
    """Refuse when the planner's best layout under the file's pins differs from the file in a
    field txcalc cannot pin."""
    lay = best_layout
    for k, v in expected.items():
        got = (n_layers // (lay.pp * lay.virtual) if k == "layers_per_stage"
               else getattr(lay, k))
        if v is not None and got != v:
            raise _bad(path, f"{k} {v!r}: txcalc cannot pin it and its best layout under the "
                       f"file's degrees has {got!r} ({lay.short()})")


#: vllm serve flag -> plan infer option (the inverse of emit.serve.FLAGS' vLLM column; None:
#: read and left alone)
VLLM_FLAGS = {flags[0]: k for k, flags in FLAGS.items()} | {"--max-num-seqs": None}
VLLM_SWITCHES = {"--enable-expert-parallel", "--enable-chunked-prefill",
                 "--enable-prefix-caching"}


def read_vllm(path: str) -> dict:
    """A ``vllm serve MODEL --flag value ...`` line (comments and continuations allowed) as
    plan infer's options."""
    from ..safeio import read_text
    text = read_text(path, EmitError)
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as e:
        raise _bad(path, f"not a command line ({e})") from None
    if "serve" not in words or words.index("serve") == 0 or \
            not words[words.index("serve") - 1].endswith("vllm"):
        raise _bad(path, "no `vllm serve` command in it")
    rest = words[words.index("serve") + 2:]
    out: dict = {}
    i = 0
    while i < len(rest):
        flag, _, inline = rest[i].partition("=")
        if flag in VLLM_SWITCHES:
            out[flag] = True
            i += 1
            continue
        if flag not in VLLM_FLAGS:
            raise _bad(path, f"{flag[:40]}: not a vllm serve option txcalc models")
        value = inline or (rest[i + 1] if i + 1 < len(rest) else None)
        if value is None:
            raise _bad(path, f"{flag} has no value")
        if VLLM_FLAGS[flag]:
            out[VLLM_FLAGS[flag]] = value
        i += 1 if inline else 2
    opts = {}
    for k in ("tp", "pp", "replicas", "block_size"):
        if k in out:
            if not out[k].isdigit():
                raise _bad(path, f"{k} ({out[k]!r:.20}) must be a positive integer")
            opts[k] = int(out[k])
    for k in ("max_model_len", "max_num_batched_tokens"):
        if k in out:
            opts[k] = out[k]
    if "gpu_memory_utilization" in out:
        try:
            opts["gpu_memory_utilization"] = float(out["gpu_memory_utilization"])
        except ValueError:
            raise _bad(path, "--gpu-memory-utilization must be a number") from None
    if "precision" in out:
        back = {v: k for k, v in SERVE_DTYPE.items()}
        if out["precision"] not in back:
            raise _bad(path, f"--dtype {out['precision']!r:.20} is not modelled")
        opts["precision"] = back[out["precision"]]
    if out.get("kv_dtype", "auto") != "auto":
        back = {v: k for k, v in KV_VLLM.items() if v != "auto"}
        if out["kv_dtype"] not in back:
            raise _bad(path, f"--kv-cache-dtype {out['kv_dtype']!r:.20} is not modelled")
        opts["kv_dtype"] = back[out["kv_dtype"]]
    if "weights" in out:
        if out["weights"] != "fp8":
            raise _bad(path, f"--quantization {out['weights']!r:.20}: give --weights (the "
                       "format's bits and group), as it names a family only")
        opts["weights"] = "fp8"
    if out.get("--enable-expert-parallel"):
        opts["ep"] = opts.get("tp", 1)
    return opts
