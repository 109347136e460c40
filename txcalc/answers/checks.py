"""The commands' options, checked: one table of how each option is read and its bounds
(``txcalc.inputs`` holds the parsers and the named bounds; this table only names which
applies to which option). The answers check their arguments with ``checked``, so the CLI, the
page and a script calling an answer refuse a value with the same one line."""

from __future__ import annotations

from ..inputs import (GPU_GB_RANGE, MAX_BATCH, MAX_DAYS, MAX_GPUS, MAX_KV_TOKENS, MAX_PARAMS,
                      MAX_PRICE, MAX_ROWS, MAX_SEQ, MAX_TOKENS, OVERHEAD_GIB_MAX, TFLOPS_RANGE,
                      TOKENS_PER_S_MAX, choice, integer, number, parse_context, parse_count,
                      path_text, text)


def _named_choices(key: str) -> tuple:
    """The values of a choice option whose table lives in an engine module that a command
    without the option need not load (``flops`` reads no precision: txcalc.engine.memory)."""
    if key == "stack":
        from ..engine.stacks import STACKS
        return tuple(STACKS)
    from ..engine.kvcache import KV_DTYPES
    from ..engine.memory import OPTIMIZERS, PRECISIONS
    return {"precision": tuple(PRECISIONS), "optimizer": OPTIMIZERS,
            "kv_dtype": tuple(KV_DTYPES)}[key]


def _option_specs() -> dict:
    """{option: (kind, lo, hi, extra)}: how each CLI option is read and its bounds."""
    from ..engine.workload import ATTN_IMPLS, RECOMPUTE, RECOMPUTE_METHODS
    gpus = ("int", 1, MAX_GPUS)
    return {
        # sequence lengths: an int, or text read as --context is (4k = 4096, 1M, 8192)
        "batch": ("int", 1, MAX_BATCH), "seq": ("tokens", 1, MAX_SEQ),
        "src_seq": ("tokens", 0, MAX_SEQ), "concurrency": ("int", 1, MAX_BATCH),
        "global_tokens": ("tokens", 0, MAX_SEQ),
        "images": ("int", 0, 2**16), "image_size": ("int", 0, 2**16),
        "global_batch": ("int", 1, MAX_BATCH), "micro_batch": ("int", 1, MAX_BATCH),
        "max_gpus": gpus, "gpus": gpus, "gpus_per_node": gpus, "tp": gpus, "pp": gpus, "cp": gpus, "ep": gpus,
        "zero": ("int", 0, 3), "rows": ("int", 1, MAX_ROWS),
        "kv_tokens": ("int", 0, MAX_KV_TOKENS),
        "days": ("float", 0, MAX_DAYS, "(]"), "price": ("float", 0, MAX_PRICE, "[]"),
        "achieved_tflops": ("float", *TFLOPS_RANGE, "[]"),
        "tokens_per_s": ("float", 0, TOKENS_PER_S_MAX, "(]"),
        "gpu_gb": ("float", *GPU_GB_RANGE, "[]"),
        "safety": ("float", 0, GPU_GB_RANGE[1], "[]", " GB (1e9 bytes kept free on the GPU)"),
        "cuda_context_gib": ("float", 0, OVERHEAD_GIB_MAX, "[]",
                             " GiB (it sets Overheads.cuda_context_bytes)"),
        "comm_buffer_gib": ("float", 0, OVERHEAD_GIB_MAX, "[]",
                            " GiB (it sets Overheads.comm_buffer_bytes)"),
        "fragmentation": ("float", 0, 1, "[)", " (a fraction of the tensors' bytes)"),
        "goodput": ("float", 0, 1, "(]", " (the fraction of wall-clock time spent training)"),
        "attn": ("choice", ATTN_IMPLS), "recompute": ("choice", RECOMPUTE),
        "stack": ("choice", None), "overlap": ("text", 200),
        "recompute_method": ("choice", RECOMPUTE_METHODS),
        "recompute_layers": ("int", 0, MAX_BATCH),
        # None: the values come from _named_choices
        "precision": ("choice", None), "optimizer": ("choice", None),
        "kv_dtype": ("choice", None), "device": ("choice", ("meta", "cpu", "cuda")),
        "tokens": ("count", MAX_TOKENS), "params": ("count", MAX_PARAMS),
        "context": ("context", True), "required_context": ("context", False),
        "gpu": ("text", 200), "gpu_file": ("path",), "out": ("path",),
        "validation_dir": ("path",),
    }


def checked(**given) -> dict:
    """Check options by their flags' names (``batch=...`` is ``--batch``); None means not given.
    Returns the values read: counts, contexts and sequence lengths as ints (a sequence length
    given as text reads as a context does: ``4k`` = 4096), floats as floats."""
    specs = _option_specs()
    out = {}
    for key, value in given.items():
        spec = specs[key]
        flag = "--" + ("context" if key == "required_context" else key).replace("_", "-")
        kind = spec[0]
        if value is None:
            out[key] = None
        elif kind == "int":
            out[key] = integer(flag, value, spec[1], spec[2])
        elif kind == "tokens":  # "0" reads as 0 where 0 is allowed (src_seq: the same as seq)
            n = value
            if isinstance(value, str):  # plain digits without Decimal (a command's start-up)
                n = int(value) if value.isascii() and value.isdigit() and len(value) < 19 \
                    else parse_context(value, flag, zero=spec[1] == 0)
            out[key] = integer(flag, n, spec[1], spec[2])
        elif kind == "float":
            ends = spec[3]
            out[key] = number(flag, value, spec[1], spec[2], lo_open=ends[0] == "(",
                              hi_open=ends[1] == ")", note=spec[4] if len(spec) > 4 else "")
        elif kind == "choice":
            out[key] = choice(flag, value, spec[1] if spec[1] is not None else
                              _named_choices(key))
        elif kind == "count":
            out[key] = parse_count(value, flag, spec[1])
        elif kind == "context":
            out[key] = parse_context(value, flag, zero=spec[1])
        elif kind == "text":
            out[key] = text(flag, value, max_len=spec[1])
        else:
            out[key] = path_text(flag, value)
    return out
