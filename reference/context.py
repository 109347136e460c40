"""What every block of one forward reads: the per-forward context (``Ctx``: positions, rotary
tables, masks and position biases, built once), the KV cache of one attention layer, and the
position tables (rotary, sinusoidal, ALiBi slopes, T5 buckets, DeBERTa's relative positions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from txcalc.model.config import ModelConfig


@dataclass
class Ctx:
    """What all blocks of one stack share in one forward: positions, rotary tables, biases.

    ``bias`` maps a mask key to the additive (1|H, s_q, s_k) bias of the layers with that key,
    built once per forward; ``bias_for`` builds one for cached keys (decoding). The key is the
    layer's window (0 = full attention) or, for a chunked layer, minus its chunk length.
    """

    model: object
    stack: str
    q_pos: torch.Tensor
    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None
    bias: dict | None = None
    #: DeBERTa: the (normalised) relative embeddings (2 span x D) and the S x S int64 relative
    #: positions (log-bucketed for v3), built once per forward
    rel: torch.Tensor | None = None
    rel_pos: torch.Tensor | None = None
    #: Longformer: which tokens are padding, bool (B, S), built once per forward (HF
    #: ``is_index_masked``, read by every block's masked_fill; none is padding here)
    pad_masked: torch.Tensor | None = None

    def padding(self, batch: int, seq: int, device) -> torch.Tensor:
        if self.pad_masked is None:
            self.pad_masked = torch.zeros(batch, seq, dtype=torch.bool, device=device)
        return self.pad_masked

    def plain_causal(self, window: int) -> bool:
        """Whether the layer's bias is nothing but the causal mask over s x s (so a fused
        kernel can take ``is_causal`` instead of a mask tensor)."""
        cfg = self.model.cfg
        s = self.q_pos.shape[0]
        return (self.bias is not None and self.model.causal(self.stack)
                and cfg.pos_type not in ("alibi", "relative_bias")
                and (not window or abs(window) >= s))

    def bias_for(self, window: int, k_pos: torch.Tensor | None = None):
        if k_pos is None:
            return self.bias[window]
        return self.model.attn_bias(self.stack, self.q_pos, k_pos, window)


class KVCache:
    """The keys and values of one attention layer, grown by concatenation along ``dims``.

    A sliding-window layer keeps only its last ``window`` tokens. ``pos`` holds the absolute
    position of every cached token (what masks and position biases need).
    """

    def __init__(self, window: int = 0, dims: tuple[int, int] = (2, 2)):
        self.window, self.dims = window, dims
        self.parts: list[torch.Tensor] | None = None
        self.pos: torch.Tensor | None = None

    def update(self, new: tuple[torch.Tensor, ...], pos: torch.Tensor):
        """Append ``new`` (at positions ``pos``); return everything to attend over, and its
        positions."""
        if self.parts is None:
            parts, positions = list(new), pos
        else:
            parts = [torch.cat((p, n), d) for p, n, d in zip(self.parts, new, self.dims)]
            positions = torch.cat((self.pos, pos))
        # a chunked layer (negative key) keeps its last chunk of tokens, as HF's cache does
        n, keep = positions.numel(), abs(self.window) or positions.numel()
        self.parts = [p.narrow(d, n - min(n, keep), min(n, keep)).clone(
            memory_format=torch.contiguous_format) for p, d in zip(parts, self.dims)]
        self.pos = positions[n - min(n, keep):]
        return parts, positions

    def tensors(self) -> list[torch.Tensor]:
        return list(self.parts or [])


def mask_key(cfg: ModelConfig, i: int) -> int:
    """Causal layer i's mask: its window (0 = full attention), or minus its chunk length."""
    return cfg.window(i) or -cfg.chunk(i)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x, cos, sin):
    """x: (B, heads, S, w); cos/sin (S, w) carry no gradient, so the products save only them."""
    return x * cos + _rotate_half(x) * sin


def rotary_tables(width: int, positions: torch.Tensor, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, width, 2, device=positions.device,
                                        dtype=torch.float32) / width))
    freqs = positions.float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def sinusoidal_table(positions: torch.Tensor, width: int, dtype):
    half = width // 2
    inv = torch.exp(-math.log(10000.0) * torch.arange(half, device=positions.device,
                                                        dtype=torch.float32) / max(half, 1))
    ang = positions.float()[:, None] * inv[None, :]
    table = torch.cat((ang.sin(), ang.cos()), dim=-1)
    if width % 2:
        table = F.pad(table, (0, 1))
    return table.to(dtype)


def alibi_slopes(n_heads: int, device) -> torch.Tensor:
    # Press et al. 2021 (arXiv:2108.12409): geometric slopes 2^(-8i/H)
    return torch.tensor([2 ** (-8 * (i + 1) / n_heads) for i in range(n_heads)], device=device)


def relative_bucket(rel: torch.Tensor, bidirectional: bool, buckets: int, max_distance=128):
    """T5's bucketing of relative positions (Raffel et al. 2019, section 2.1)."""
    ret = torch.zeros_like(rel)
    if bidirectional:
        buckets //= 2
        ret = ret + (rel > 0).long() * buckets
        n = rel.abs()
    else:
        n = (-rel).clamp(min=0)
    max_exact = max(buckets // 2, 1)
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact)
                         / math.log(max(max_distance / max_exact, 1.0 + 1e-6))
                         * (buckets - max_exact)).long()
    large = large.clamp(max=buckets - 1)
    return (ret + torch.where(is_small, n, large)).clamp(max=2 * buckets - 1 if bidirectional
                                                         else buckets - 1)


def deberta_relative_positions(q_pos, k_pos, buckets: int, max_position: int):
    """HF ``build_relative_position``: query minus key position, log-bucketed when DeBERTa v3
    sets position_buckets (``make_log_bucket_position``); int64 (S_q, S_k)."""
    rel = q_pos[:, None] - k_pos[None, :]
    if buckets > 0 and max_position > 0:
        mid = buckets // 2
        sign = torch.sign(rel)
        abs_pos = torch.where((rel < mid) & (rel > -mid),
                              torch.tensor(mid - 1, device=rel.device).type_as(rel), rel.abs())
        log_pos = torch.ceil(torch.log(abs_pos / mid) / math.log((max_position - 1) / mid)
                             * (mid - 1)) + mid
        rel = torch.where(abs_pos <= mid, rel.type_as(log_pos), log_pos * sign)
    return rel.to(torch.long)
