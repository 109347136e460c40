"""Measurements of the reference model, keyed by module path so they join the engine's op rows.

    quantity                  | how it is measured
    --------------------------|-----------------------------------------------------------------
    parameters                | numel of each parameter, attributed to the module that owns it
    FLOPs per module          | torch.utils.flop_counter.FlopCounterMode over the forward (exact
                              |   attribution) and over loss + backward (totals)
    bytes saved for backward  | reference/saved.py (saved_tensors_hooks, unique storages)
    memory by phase, category | torch.distributed._tools.mem_tracker.MemTracker (reference/train.py)
    KV-cache bytes            | unique storages held by the caches after generate()
    time per op               | torch.profiler (CPU; CUDA kernels on a GPU)

Joining: each engine op has a *home module*, the longest module path that equals the op path
or is a dotted prefix of it (``layers.0.attn.core.scores`` lives in ``layers.0.attn.core``).
Predicted rows are summed per home module; measured values are per module, not counting
children that are themselves homes of ops.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

import torch

from .model import ReferenceModel, build, default_labels
from .saved import saved_bytes_by_module


def home_module(path: str, modules: set[str]) -> str:
    """The longest module path that is ``path`` or a dotted prefix of it ("" = the model)."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        cand = ".".join(parts[:n])
        if cand in modules:
            return cand
    return ""


def join(predicted: dict[str, int], measured: dict[str, int],
         modules: Iterable[str]) -> list[dict]:
    """Rows {module, predicted, measured, ops}: predicted op values summed per home module,
    measured values moved up to the nearest module that is a home (or the model, "")."""
    mods = set(modules)
    pred: dict[str, int] = defaultdict(int)
    ops: dict[str, list[str]] = defaultdict(list)
    for path, v in predicted.items():
        home = home_module(path, mods)
        pred[home] += v
        ops[home].append(path)
    homes = set(pred)
    meas: dict[str, int] = defaultdict(int)
    for path, v in measured.items():
        parts = path.split(".") if path else []
        home = path  # a module no op lives in keeps its own row
        for n in range(len(parts), 0, -1):
            cand = ".".join(parts[:n])
            if cand in homes:
                home = cand
                break
        meas[home] += v
    keys = sorted(set(pred) | set(meas), key=_natural)
    return [{"module": k, "predicted": pred.get(k, 0), "measured": meas.get(k, 0),
             "ops": ops.get(k, [])} for k in keys]


def _natural(path: str):
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split(".")]


def layer_of(path: str) -> tuple[str, int]:
    """(stack, layer) of a module path; layer -1 outside the blocks."""
    parts = path.split(".")
    stack = parts[0] if parts and parts[0] in ("encoder", "decoder") else ""
    if "layers" in parts:
        i = parts.index("layers")
        if i + 1 < len(parts) and parts[i + 1].isdigit():
            return stack, int(parts[i + 1])
    return stack, -1


def by_layer(values: dict[str, int]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = defaultdict(int)
    for path, v in values.items():
        out[layer_of(path)] += v
    return dict(out)


# --- parameters -----------------------------------------------------------------------------
def params_by_module(model: torch.nn.Module) -> dict[str, int]:
    """{owning module path: numel}; a tied weight counts once, in the module that owns it."""
    out: dict[str, int] = defaultdict(int)
    for name, p in model.named_parameters():
        out[name.rpartition(".")[0]] += p.numel()
    return dict(out)


# --- inputs -----------------------------------------------------------------------------------
def make_inputs(model: ReferenceModel, batch: int, seq: int, src_seq: int = 0,
                device="meta", generator: torch.Generator | None = None):
    """Token ids (B, seq), labels, and source ids for encoder-decoder models."""
    V = model.cfg.vocab_size

    def ids(n):
        if device == "meta":
            return torch.zeros(batch, n, dtype=torch.long, device="meta")
        return torch.randint(0, V, (batch, n), device=device, generator=generator)
    x = ids(seq)
    src = ids(src_seq or seq) if model.cfg.family == "encoder-decoder" \
        or model.cfg.cross_layers else None
    labels = default_labels(x) if model.cfg.head == "lm" else None
    return x, labels, src


def run_forward(model: ReferenceModel, inputs) -> Callable[[], torch.Tensor]:
    x, labels, src = inputs
    return lambda: model(x, labels, src)


# --- FLOPs ------------------------------------------------------------------------------------
def flops_by_module(model: ReferenceModel, inputs) -> tuple[dict[str, int], int, int]:
    """({module path: forward FLOPs of its own ops}, forward total, backward total).

    Forward FLOPs are attributed to the innermost module running (exact); backward is a total,
    counted by a second FlopCounterMode while loss.backward() runs.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=flop_mapping()) as fwd:
        loss = run_forward(model, inputs)()
    with FlopCounterMode(display=False, custom_mapping=flop_mapping()) as bwd:
        loss.backward()
    return (exclusive_flops(fwd.get_flop_counts(), type(model).__name__),
            fwd.get_total_flops(), bwd.get_total_flops())


def flops_and_saved_by_module(model: ReferenceModel, inputs) -> tuple[
        dict[str, int], int, int, dict[str, int]]:
    """``flops_by_module`` and ``saved_by_module``'s bytes from one forward instead of two:
    FlopCounterMode is a dispatch mode, below autograd, so the tensors autograd saves (and the
    saved_tensors_hooks see) are the same with it as without. Returns (FLOPs per module,
    forward total, backward total, {module path: unique saved bytes})."""
    from torch.utils.flop_counter import FlopCounterMode

    run = run_forward(model, inputs)
    out = {}

    def counted():
        with FlopCounterMode(display=False, custom_mapping=flop_mapping()) as fwd:
            out["loss"] = run()
        out["fwd"] = fwd
    saved, _ = saved_bytes_by_module(model, counted)
    fwd = out["fwd"]
    with FlopCounterMode(display=False, custom_mapping=flop_mapping()) as bwd:
        out.pop("loss").backward()
    return (exclusive_flops(fwd.get_flop_counts(), type(model).__name__),
            fwd.get_total_flops(), bwd.get_total_flops(), saved)


def cpu_flash_flops() -> dict:
    """FlopCounterMode counts the CUDA flash kernels but not the CPU one (MEASURING.md): map
    the CPU kernel and its backward to torch's own SDPA formulas (backward 2.5x forward)."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten

    def fwd(query, key, value, *args, out_shape=None, **kwargs) -> int:
        return fc.sdpa_flop_count(query, key, value)

    def bwd(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
        return fc.sdpa_backward_flop_count(grad_out, query, key, value)
    return {aten._scaled_dot_product_flash_attention_for_cpu: fwd,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: bwd}


def flop_mapping() -> dict:
    """FlopCounterMode's formulas with two corrections: the CPU flash kernel
    (``cpu_flash_flops``) and grouped convolutions' weight gradient
    (``conv_backward_by_groups``)."""
    return cpu_flash_flops() | {torch.ops.aten.convolution_backward: conv_backward_by_groups}


def conv_backward_by_groups(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation,
                            transposed, output_padding, groups, output_mask, out_shape=None,
                            **_) -> int:
    """torch's ``conv_backward_flop`` with the weight gradient divided by ``groups``: torch
    counts every output channel against every input channel, C times the real work of a
    depthwise conv (Mamba's conv1d); the input gradient's formula is right as it is."""
    from torch.utils.flop_counter import conv_backward_flop
    raw = conv_backward_flop.__wrapped__  # the shape formula under torch's shape wrapper
    args = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
            output_padding, groups)
    return (raw(*args, [output_mask[0], False, False], out_shape)
            + raw(*args, [False, output_mask[1], False], out_shape) // groups)


def exclusive_flops(counts: dict, root: str) -> dict[str, int]:
    """FlopCounterMode's per-module counts (each includes its submodules) -> the FLOPs of each
    module's own ops, keyed by path below the root module ("" = the root itself)."""
    inclusive = {}
    for key, per_op in counts.items():
        if key == "Global":
            continue
        path = key[len(root) + 1:] if key.startswith(root + ".") else ("" if key == root else key)
        inclusive[path] = sum(per_op.values())
    exclusive = dict(inclusive)
    for path, v in inclusive.items():
        if path:
            parent = path.rpartition(".")[0]
            while parent not in inclusive and parent:
                parent = parent.rpartition(".")[0]
            if parent in exclusive:
                exclusive[parent] -= v
    return {k: v for k, v in exclusive.items() if v}


# --- bytes saved for backward -------------------------------------------------------------------
def saved_by_module(model: ReferenceModel, inputs) -> tuple[dict[str, int], list[tuple]]:
    """({module path: unique bytes saved for backward}, records) over one forward and loss."""
    return saved_bytes_by_module(model, run_forward(model, inputs))


def _under_fake(measure, cfg, work, dtype, softmax_fp32: bool = True):
    """Run ``measure(model, inputs)`` with real CPU kernels but no memory: the model is built
    and run under FakeTensorMode (SDPA then takes the CPU flash kernel: no S x S)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        model = build(cfg, dtype, "cpu", attn_impl="eager" if work.attn_impl == "eager"
                      else "sdpa", recompute=work.recompute, softmax_fp32=softmax_fp32,
                      init=False)
        inputs = make_inputs(model, work.batch, work.seq, work.src_seq, device="cpu")
        return measure(model, inputs)


def saved_under_fake(cfg, work, dtype, softmax_fp32: bool = True):
    """saved_by_module under FakeTensorMode."""
    return _under_fake(saved_by_module, cfg, work, dtype, softmax_fp32)


def flops_under_fake(cfg, work, dtype, softmax_fp32: bool = True):
    """flops_by_module under FakeTensorMode (the fused kernels run and are counted)."""
    return _under_fake(flops_by_module, cfg, work, dtype, softmax_fp32)


def flops_and_saved_under_fake(cfg, work, dtype, softmax_fp32: bool = True):
    """flops_and_saved_by_module under FakeTensorMode: one build and one forward for both."""
    return _under_fake(flops_and_saved_by_module, cfg, work, dtype, softmax_fp32)


# --- KV cache -----------------------------------------------------------------------------------
def kv_cache_after_generate(model: ReferenceModel, batch: int, prompt: int, new_tokens: int,
                            src_seq: int = 0, seed: int = 0, **sampling) -> tuple[int, int]:
    """(bytes held by the caches, tokens in the self-attention cache) after generate()."""
    from .model import cache_bytes, generate

    g = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    x, _, src = make_inputs(model, batch, prompt, src_seq, device=device, generator=g)
    _, caches = generate(model, x, new_tokens, src_ids=src, generator=g, **sampling)
    return cache_bytes(caches), prompt + new_tokens - 1


# --- time ---------------------------------------------------------------------------------------
def op_times(model: ReferenceModel, inputs, steps: int = 2) -> list[dict]:
    """Per-op self times (µs) of forward + backward from torch.profiler, averaged over steps
    after one warm-up step; rows sorted by time, with input shapes."""
    from torch.profiler import ProfilerActivity, profile

    run = run_forward(model, inputs)
    run().backward()
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            run().backward()
    rows = []
    for ev in prof.key_averages(group_by_input_shape=True):
        rows.append({"op": ev.key, "shapes": str(ev.input_shapes), "calls": ev.count // steps,
                     "cpu_us": ev.self_cpu_time_total / steps,
                     "device_us": getattr(ev, "self_device_time_total", 0) / steps})
    rows.sort(key=lambda r: -(r["device_us"] or r["cpu_us"]))
    return rows
