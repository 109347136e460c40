"""Bytes saved for backward, per module, measured with torch.autograd.graph.saved_tensors_hooks.

Each saved tensor is attributed to the innermost module running when autograd packed it, and
counted once per storage (key: ``untyped_storage()._cdata``; on the meta device every
``data_ptr()`` is 0). Parameters and buffers are excluded: they are model state, not
activations.
"""

from __future__ import annotations

from collections import defaultdict

import torch


def saved_bytes_by_module(model: torch.nn.Module, run) -> tuple[dict[str, int], list[tuple]]:
    """Run ``run()`` (a forward pass) and return ({module path: unique saved bytes}, records).

    records: (module path, shape, dtype, bytes) of each new storage, in order.
    """
    state_ids = {t.untyped_storage()._cdata for t in list(model.parameters()) + list(model.buffers())}
    stack: list[str] = [""]
    seen: set[int] = set()
    per_module: dict[str, int] = defaultdict(int)
    records: list[tuple] = []

    def pre(name):
        def hook(mod, args):
            stack.append(name)
        return hook

    def post(name):
        def hook(mod, args, out):
            stack.pop()
        return hook

    handles = []
    for name, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(pre(name)))
        handles.append(mod.register_forward_hook(post(name)))

    def pack(t):
        st = t.untyped_storage()
        key = st._cdata
        if key not in seen and key not in state_ids:
            seen.add(key)
            nbytes = st.nbytes()
            per_module[stack[-1]] += nbytes
            records.append((stack[-1], tuple(t.shape), t.dtype, nbytes))
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run()
    finally:
        for h in handles:
            h.remove()
    return dict(per_module), records
