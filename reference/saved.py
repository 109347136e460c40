"""Bytes saved for backward, per module, measured with torch.autograd.graph.saved_tensors_hooks.

Each saved tensor is attributed to the innermost module running when autograd packed it, and
counted once per storage (key: ``untyped_storage()._cdata``; on the meta device every
``data_ptr()`` is 0). Each counted storage is held until the run ends, so that its key cannot be
reused by a later storage (a freed storage's address may be handed out again) and that storage
wrongly skipped as already counted. Parameters and buffers are excluded: they are model state, not
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
    held: list = []  # the counted storages, so that no key in ``seen`` is reused during run()
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
            held.append(st)
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


def live_bytes_after(model: torch.nn.Module, run) -> tuple[int, object]:
    """Bytes of the storages ``run()`` creates that are still alive when it returns, while
    its result (the loss and, through it, the autograd graph) is held: what the forward keeps
    for backward, whoever keeps it (autograd's saved tensors, a non-reentrant checkpoint's
    inputs, selective checkpointing's cached outputs, which saved_tensors_hooks do not see).
    Returns (bytes, result); the result's own storage is counted (the scalar loss).

    Every op output's storage is watched through a weak reference
    (torch.multiprocessing.reductions.StorageWeakRef); the model's parameters and buffers
    (whose views, such as a weight's transpose, are op outputs too) and storages made before
    ``run`` (the inputs) are not counted."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    watched: dict[int, tuple[StorageWeakRef, int]] = {}

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    st = t.untyped_storage()
                    ref = watched.get(st._cdata)
                    if ref is None or ref[0].expired():
                        watched[st._cdata] = (StorageWeakRef(st), st.nbytes())
            return out

    state = {t.untyped_storage()._cdata for t in list(model.parameters()) + list(model.buffers())}
    with Watch():
        result = run()
    import gc
    gc.collect()
    return sum(n for key, (ref, n) in watched.items() if key not in state
               and not ref.expired()), result
