"""One FSDP2 training step measured per rank on a fake process group under FakeTensorMode.

The same measurement serves tests/conformance/test_distributed.py (llama-3-8b at full scale),
tests/unit/test_engine.py (ZeRO-2 against ZeRO-3, precision policies x optimizers x world sizes)
and tests/conformance/test_fp8_fsdp.py (torchao Float8 with fp8 all-gather): every block and then the root
wrapped with ``fully_shard``; one whole step first (outside the tracker), then micro-batch 1 of
2, then, inside torch's FSDPMemTracker, micro-batch 2 (accumulating onto the gradients) and the
optimizer step. Run it inside ``fake_pg(world)``, in a spawned process (the fake group is global
state).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-4),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-4, momentum=0.9),
    "none": lambda ps: None,  # gradients only: zero_grad on the model
}


@contextmanager
def fake_pg(world: int):
    """torch.distributed's fake process group of ``world`` ranks, this process as rank 0."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def fsdp2_peak(make_model, world: int, seq: int, *, mp_policy=None, reshard: bool = True,
               optimizer: str = "adamw") -> dict[str, int]:
    """FSDPMemTracker's per-rank peak by category ({category name: bytes}) of the step above.

    make_model() builds an HF causal LM (``model.model.layers``); it is called under
    FakeTensorMode, so it may also convert or cast the model before it is sharded."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    kw = {"mp_policy": mp_policy} if mp_policy is not None else {}
    with FakeTensorMode():
        model = make_model()
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, **kw)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, **kw)
        opt = OPTIMIZERS[optimizer](model.parameters())
        ids = torch.randint(0, model.config.vocab_size, (1, seq))

        def step():
            model(input_ids=ids, labels=ids).loss.backward()
            if opt is not None:
                opt.step()
            (opt or model).zero_grad()

        step()
        model(input_ids=ids, labels=ids).loss.backward()  # micro-batch 1 of 2
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((ids,))
        with tracker:
            step()  # micro-batch 2 accumulates, then the optimizer step
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    return {str(getattr(k, "value", k)): int(v) for k, v in peak.items()}
