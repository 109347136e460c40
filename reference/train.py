"""A training step of the reference model under the engine's precision policies and
optimizers, and its memory by phase and category (MemTracker).

    policy      | model weights/grads | optimizer works on          | step
    ------------|---------------------|-----------------------------|-------------------------------
    fp32        | fp32                | the weights                 | opt.step()
    bf16-mixed  | bf16                | fp32 master copies          | master.grad = grad.float();
    fp16-mixed  | fp16 (loss scaled)  | fp32 master copies          |   opt.step(); weight.copy_(master)
    bf16        | bf16                | the weights (bf16 states)   | opt.step()

Optimizers: torch.optim.AdamW / Adam (foreach), SGD with momentum 0.9 (foreach), Adafactor;
adam8bit needs bitsandbytes, which the reference does not use (a user error here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from txcalc.errors import WorkloadError

from .measure import make_inputs
from .model import DTYPES, ReferenceModel, build

FP16_LOSS_SCALE = 1024.0


@dataclass
class Trainer:
    """The model, its optimizer and (mixed precision) the fp32 master weights."""

    model: ReferenceModel
    precision: str
    optimizer_name: str
    optimizer: torch.optim.Optimizer | None = None
    masters: list[torch.Tensor] = field(default_factory=list)

    def __post_init__(self):
        # frozen parameters (fine-tuning, reference/lora.py) have no optimizer state or master
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.precision in ("bf16-mixed", "fp16-mixed") and self.optimizer_name != "none":
            self.masters = [p.detach().float().clone().requires_grad_(True) for p in params]
            params = self.masters
        self.optimizer = make_optimizer(self.optimizer_name, params)

    def forward_backward(self, inputs, phase=lambda name: None) -> torch.Tensor:
        x, labels, src = inputs
        loss = self.model(x, labels, src)
        phase("forward")
        scaled = loss * FP16_LOSS_SCALE if self.precision == "fp16-mixed" else loss
        scaled.backward()
        del scaled
        phase("backward")
        return loss

    def step(self) -> None:
        """Optimizer step; gradients stay until zero_grad()."""
        if self.optimizer is None:
            return
        if self.masters:
            unscale = 1.0 / FP16_LOSS_SCALE if self.precision == "fp16-mixed" else 1.0
            trained = [p for p in self.model.parameters() if p.requires_grad]
            for p, m in zip(trained, self.masters):
                # a parameter the step did not reach has no gradient (Longformer's global
                # projections without global tokens): its master stays without one, and the
                # optimizer skips it as it would the weight itself
                m.grad = None if p.grad is None else p.grad.float() if unscale == 1.0 \
                    else p.grad.float() * unscale
            self.optimizer.step()
            with torch.no_grad():
                for p, m in zip(trained, self.masters):
                    if m.grad is not None:
                        p.copy_(m)
                    m.grad = None
        else:
            self.optimizer.step()

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)


def make_optimizer(name: str, params) -> torch.optim.Optimizer | None:
    if name == "none":
        return None
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, foreach=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-3, foreach=False)
    raise WorkloadError(f"optimizer {name!r} is not implemented by the reference model "
                        "(adam8bit needs bitsandbytes)")


class _NoHook:
    def remove(self) -> None:
        pass


def memory_by_phase(cfg, work, precision: str = "bf16-mixed", optimizer: str = "adamw",
                    fake: bool = False, steps: int = 2, finetune=None) -> dict:
    """MemTracker bytes by category after forward, backward and the optimizer step, and the
    peaks of forward, backward and the whole step, for step ``steps`` (later steps are steady:
    optimizer state exists). ``fake``: under FakeTensorMode (no memory, any size).

    Returns {phase: {category: bytes}} with MemTracker's categories (param, buffer, grad, act,
    temp, opt, other), master (the fp32 master weights, counted here: they are made before the
    tracker starts) and total.
    """
    import contextlib

    from torch.distributed._tools.mem_tracker import MemTracker, _ModState

    dtype = DTYPES[precision] if precision != "fp16-mixed" else torch.float16
    ctx = contextlib.nullcontext()
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode
        ctx = FakeTensorMode()
    with ctx:
        model = build(cfg, dtype, "cpu", attn_impl="sdpa" if work.attn_impl != "eager"
                      else "eager", recompute=work.recompute, softmax_fp32=work.softmax_fp32,
                      init=not fake)
        model.global_tokens = work.global_tokens  # Longformer's global attention
        if finetune is not None:  # adapters and frozen parameters (reference/lora.py)
            from .lora import finetune as apply
            apply(model, finetune)
        if work.loss != "full":  # chunked or fused-linear cross-entropy (reference/loss.py)
            from .loss import use_loss
            use_loss(model, work.loss)
        trainer = Trainer(model, precision, optimizer)
        tracker = MemTracker()
        for p in model.parameters():  # MemTracker hooks every parameter's gradient, which a
            if not p.requires_grad:   # frozen one refuses: mark those as already hooked
                tracker._param_to_grad_hook_handles[p] = (_NoHook(), _NoHook())
        tracker.track_external(model, *([trainer.optimizer] if trainer.optimizer else []))
        out: dict[str, dict[str, int]] = {}

        def snap(kind="current"):
            s = tracker.get_tracker_snapshot(kind)
            cats = next(iter(s.values())) if s else {}
            return {str(k).rpartition(".")[2].lower(): v for k, v in cats.items()}

        with tracker:
            for i in range(steps):
                last = i == steps - 1
                if last:
                    tracker.reset_mod_stats()
                    out["start"] = snap()
                inputs = make_inputs(model, work.batch, work.seq, work.src_seq, device="cpu")
                loss = trainer.forward_backward(
                    inputs, (lambda name: out.__setitem__(f"after_{name}", snap()))
                    if last else (lambda name: None))
                trainer.step()
                if last:
                    out["after_step"] = snap()
                trainer.zero_grad()
                del loss, inputs
            out["peak"] = snap("peak")
        # the fp32 master weights exist before tracking starts: MemTracker does not see them
        master = sum(m.untyped_storage().nbytes() for m in trainer.masters)
        for cats in out.values():
            cats["master"] = master
            cats["total"] = cats.get("total", 0) + master
        mod = tracker.memory_tracking[model]
        for name, state in (("peak_forward", _ModState.PEAK_FW),
                            ("peak_backward", _ModState.PEAK_BW)):
            cats = mod.snapshots[state][-1]
            out[name] = {str(k).rpartition(".")[2].lower(): v
                         for k, v in next(iter(cats.values())).items()}
            out[name]["master"] = master
            out[name]["total"] += master
    return out
