"""State-space token mixers: Mamba (Gu and Dao 2023, arXiv:2312.00752), Mamba-2 (Dao and Gu
2024, arXiv:2405.21060) and LFM2's gated short convolution, each as named Ops that declare
their costs once; further down, Gated DeltaNet, Zamba's shared attention block
(``shared_block``) and Griffin's recurrent block (``rglru_block``), with their own tables.

Legend: D d_model, E = ssm_d_inner (expand * D), N ssm_state, R ssm_dt_rank, k ssm_conv,
H ssm_heads, P ssm_head_dim (H * P = E), G ssm_groups, Q ssm_chunk, T = B * S tokens.

Mamba (``layers.{i}.mamba.*``):

    op         | operation                         | params              | forward FLOPs
    -----------|-----------------------------------|---------------------|--------------------
    in_proj    | D -> 2E (x and the gate z)        | 2DE (+2E)           | 2T D 2E
    conv1d     | depthwise causal conv over E      | E k (+E)            | 2B (S+k-1) E k
    x_proj     | E -> R + 2N (dt, B, C)            | E(R + 2N)           | 2T E (R+2N)
    dt_norm..  | RMSNorms on dt, B, C (Jamba)      | R + 2N              | -
    dt_proj    | R -> E                            | RE + E              | 2T R E
    scan       | h_t = exp(dt A) h_{t-1} + dt B x; | A_log E N, D E      | 2T E N (y = C h)
               |   y_t = C_t h_t + D x, * silu(z)  |                     |
    out_proj   | E -> D                            | ED (+D)             | 2T E D

Mamba-2 (``layers.{i}.mamba.*``), conv width C = E + 2GN:

    op         | operation                         | params              | forward FLOPs
    -----------|-----------------------------------|---------------------|--------------------
    in_proj    | D -> E (z) + C (x, B, C) + H (dt) | D(E+C+H) (+E+C+H)   | 2T D (E+C+H)
    conv1d     | depthwise causal conv over C      | C k (+C)            | 2B (S+k-1) C k
    scan       | chunked SSD                       | dt_bias, A_log, D: H| ``ops.ssd_flops``
    norm       | gated RMSNorm: norm(y * silu(z))  | E                   | -
    out_proj   | E -> D                            | ED (+D)             | 2T E D

FLOPs convention: as everywhere in txcalc, matmul work only (what FlopCounterMode counts:
mm, bmm, convolution). The conv is counted as executed by the reference code (HF and
Mamba's own ``causal_conv1d`` fallback: padded by k-1 on both sides, S+k-1 outputs, the last
k-1 dropped). The Mamba scan's matmul work is the output contraction y_t = C_t h_t (one bmm
per position in HF's sequential scan); its elementwise work (discretisation exp(dt A) and
dt B x, 3 multiplies and an exp per (token, channel, state), the recurrence's multiply-add,
the D skip and the gate) is not counted: ``scan_elementwise_flops`` states it separately.
Mamba-2's scan is the SSD algorithm's five einsums at chunk length Q (``ops.ssd_flops``; one
that sums over a single element is a multiply, 0, as torch runs it).
Backward is 2x forward for every op here (input and weight gradients; the conv's weight
gradient over its groups: FlopCounterMode's ``convolution_backward`` formula ignores
``groups`` and counts C times the real work of a depthwise conv; the tests measure with that
one formula corrected, ``reference.measure.conv_backward_by_groups``).

Saved for backward (checked per layer with saved_tensors_hooks against reference/model.py,
which runs the scans as HF's torch paths do, fp32 inside): Mamba's sequential scan keeps two
E x N fp32 tensors per token (exp(dt A) and h_t), ``_mamba_scan_saved``; Mamba-2's chunked SSD
keeps chunk-shaped temporaries, ``ops.ssd_saved_bytes``. Fused kernels (mamba_ssm) keep far
less; they are not modelled.

Serving state (elements per sequence, constant in context): the conv1d keeps its last k inputs
(HF's cache: conv_state [B, C, k], ``Op.state``, in the KV dtype), the scan its SSM state
(Mamba: E x N; Mamba-2: H x P x N; ``Op.state_fp32``), which HF's cache keeps in fp32 whatever
the model's dtype (as the Mamba kernels' reference path and FLA do).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from ..model.config import ModelConfig
from .ops import Op, Where, _roles, attention_core, elementwise, linear, norm


def conv1d(path: str, where: Where, component: str, channels: int, kernel: int, bias: bool,
           saved: tuple[tuple[int, str], ...]) -> Op:
    """Depthwise causal conv1d: ``channels`` x ``kernel`` weights (+ bias); keeps its last
    ``kernel`` inputs per sequence for decoding (HF's conv_state)."""
    return Op(path, "conv1d", where[0], where[1], component,
              channels * kernel + (channels if bias else 0), 1, 1, channels, kernel,
              saved=saved, bias=bias, state=channels * kernel, **_roles("conv1d", where[1]))


def mamba(cfg: ModelConfig, p: str, where: Where, shares_input: bool = False) -> Iterator[Op]:
    """The Mamba (v1) mixer, in forward order (table in the module docstring)."""
    D, E, N, R, k = cfg.d_model, cfg.ssm_d_inner, cfg.ssm_state, cfg.ssm_dt_rank, cfg.ssm_conv
    c = p + "mamba."
    yield linear(c + "in_proj", where, "mamba.in_proj", D, 2 * E, cfg.ssm_bias,
                 shares_input=shares_input)
    # saved: the conv's input is a view of in_proj's output (x and z together, 2E), whose
    # silu(z) gate reads the other half; the conv output for its silu
    yield conv1d(c + "conv1d", where, "mamba.conv1d", E, k, cfg.ssm_conv_bias,
                 saved=((2 * E, "a"), (E, "a")))
    yield linear(c + "x_proj", where, "mamba.x_proj", E, R + 2 * N, False)
    if cfg.ssm_dt_norms:
        for name, width in (("dt_norm", R), ("b_norm", N), ("c_norm", N)):
            yield norm(c + name, where, "mamba." + name, width, "rmsnorm", False, True)
    yield linear(c + "dt_proj", where, "mamba.dt_proj", R, E, True)
    yield Op(c + "scan", "ssm_scan", where[0], where[1], "mamba.scan", E * N + E, 1, 1, E, N,
             saved=_mamba_scan_saved(E, N), saved_once=((2 * E * N, "f32"),), state_fp32=E * N,
             **_roles("ssm_scan", where[1]))
    yield linear(c + "out_proj", where, "mamba.out_proj", E, D, cfg.ssm_out_bias)


def _mamba_scan_saved(E: int, N: int) -> tuple[tuple[int, str], ...]:
    """Per token, what the sequential scan keeps for backward (HF's ``mamba_selective_scan``
    and reference/model.py's ``MambaScan``, fp32 inside): exp(dt A) and the state h_t (E N
    each); softplus's input and output dt, dt * x and the output before the gate (E each);
    B and C upcast (N each); x upcast (a copy only when the model is not fp32); silu(z) in
    the activation dtype. Once per forward: exp(A_log) and A = -exp(A_log) (E N each, fp32:
    ``Op.saved_once``)."""
    return ((2 * E * N + 4 * E + 2 * N, "f32"), (E, "up32"), (E, "a"))


def mamba2(cfg: ModelConfig, p: str, where: Where, shares_input: bool = False) -> Iterator[Op]:
    """The Mamba-2 mixer, in forward order (table in the module docstring)."""
    D, E, N, k = cfg.d_model, cfg.ssm_d_inner, cfg.ssm_state, cfg.ssm_conv
    H, P, G = cfg.ssm_heads, cfg.ssm_head_dim, cfg.ssm_groups
    C = E + 2 * G * N
    c = p + "mamba."
    yield linear(c + "in_proj", where, "mamba.in_proj", D, E + C + H, cfg.ssm_bias,
                 shares_input=shares_input)
    yield conv1d(c + "conv1d", where, "mamba.conv1d", C, k, cfg.ssm_conv_bias,
                 saved=((E + C + H, "a"), (C, "a")))
    # saved per token: softplus's input dt (H), dt and x in fp32 (H + E); the chunked
    # temporaries: ops.ssd_saved_bytes; once: exp(A_log) and A (H each)
    yield Op(c + "scan", "ssd_scan", where[0], where[1], "mamba.scan", 3 * H, 1, 1, P, N,
             heads=H, scan_chunk=cfg.ssm_chunk, saved=((H, "a"), (H + E, "f32")),
             saved_once=((2 * H, "f32"),), state_fp32=H * P * N,
             **_roles("ssd_scan", where[1]))
    # y * silu(z) in fp32 (z upcast: a copy unless fp32, where z is part of in_proj's output,
    # already saved), then RMSNorm over G groups: y, silu(z), their product, 1/rms per group,
    # the normalised product in the activation dtype for the scale
    gate = ((3 * E + G, "f32"), (E, "up32"), (E, "a")) if cfg.ssm_gated_norm else \
        ((2 * E, "f32"), (E, "up32"))
    if cfg.ssm_gated_norm:
        op = norm(c + "norm", where, "mamba.norm", E, "rmsnorm", False, True)
        yield dataclasses.replace(op, saved=gate)
    else:
        yield elementwise(c + "gate", where, "mamba.gate", "activation", gate)
    yield linear(c + "out_proj", where, "mamba.out_proj", E, D, cfg.ssm_out_bias)


def short_conv(cfg: ModelConfig, p: str, where: Where) -> Iterator[Op]:
    """LFM2's gated short convolution (``layers.{i}.conv.*``): in_proj D -> 3D (B, C, x),
    B * x, a depthwise causal conv1d over D channels (kernel ssm_conv, no activation), C * the
    conv's output, out_proj D -> D; every projection and the conv biased by ``ssm_bias``.
    Saved besides the projections' inputs: in_proj's output (B and x for their product, C
    for the gate), B * x (the conv's input) and the conv's S kept outputs. Serving state: the
    conv's last k inputs (D x k)."""
    D, k, bias = cfg.d_model, cfg.ssm_conv, cfg.ssm_bias
    c = p + "conv."
    yield linear(c + "in_proj", where, "conv.in_proj", D, 3 * D, bias)
    yield conv1d(c + "conv1d", where, "conv.conv1d", D, k, bias, saved=((5 * D, "a"),))
    yield linear(c + "out_proj", where, "conv.out_proj", D, D, bias)


def gated_deltanet(cfg: ModelConfig, p: str, where: Where) -> Iterator[Op]:
    """Qwen3-Next's Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024, arXiv:2412.06464) under
    ``layers.{i}.linear_attn.*``, in forward order. Legend: Hk key heads (``ssm_groups``) of
    dk (``ssm_state``), Hv value heads (``ssm_heads``) of dv (``ssm_head_dim``), conv width
    C = 2 Hk dk + Hv dv, kernel k, chunk Q (``ssm_chunk``: HF's 64).

        op           | operation                          | params         | forward FLOPs
        -------------|------------------------------------|----------------|----------------
        in_proj_qkvz | D -> q, k (Hk dk each), v, z (Hv dv)| D(C + Hv dv)   | 2T D (C + Hv dv)
        in_proj_ba   | D -> beta, a (Hv each)             | 2 D Hv         | 2T D 2Hv
        conv1d       | depthwise causal conv over q, k, v | C k (no bias)  | 2B (S+k-1) C k
        scan         | chunked gated delta rule           | dt_bias, A_log | ``ops.gdn_flops``
        norm         | RMSNorm over dv, * silu(z)         | dv             | -
        out_proj     | Hv dv -> D                         | Hv dv D        | 2T Hv dv D

    Qwen3.5 (``gdn_split_proj``) projects with four Linears instead: in_proj_qkv (D -> C),
    in_proj_z (D -> Hv dv), in_proj_b and in_proj_a (D -> Hv each): the same parameters and
    FLOPs. The decay g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b) are
    elementwise.
    Serving state (HF's cache): the conv's last k inputs (C x k, in the KV dtype) and the
    recurrent state (Hv x dk x dv), in fp32 whatever the model dtype (HF's torch path, FLA)."""
    D, k = cfg.d_model, cfg.ssm_conv
    Hv, dv, Hk, dk = cfg.ssm_heads, cfg.ssm_head_dim, cfg.ssm_groups, cfg.ssm_state
    C = 2 * Hk * dk + Hv * dv
    c = p + "linear_attn."
    widths = (("in_proj_qkv", C), ("in_proj_z", Hv * dv), ("in_proj_b", Hv), ("in_proj_a", Hv)) \
        if cfg.gdn_split_proj else (("in_proj_qkvz", C + Hv * dv), ("in_proj_ba", 2 * Hv))
    for n, (name, width) in enumerate(widths):  # the later ones read the first one's input
        yield linear(c + name, where, "linear_attn." + name, D, width, False,
                     shares_input=n > 0)
    yield conv1d(c + "conv1d", where, "linear_attn.conv1d", C, k, False,
                 saved=_GDN_CONV_SAVED(C))
    # once per forward: exp(A_log) and -exp(A_log) (Hv each, fp32)
    yield Op(c + "scan", "gdn_scan", where[0], where[1], "linear_attn.scan", 2 * Hv, 1, 1,
             dk, dv, heads=Hv, scan_chunk=cfg.ssm_chunk, saved=_gdn_scan_saved(Hv, Hk, dk, dv),
             saved_once=((2 * Hv, "f32"),), state_fp32=Hv * dk * dv,
             **_roles("gdn_scan", where[1]))
    op = norm(c + "norm", where, "linear_attn.norm", dv, "rmsnorm", False, True)
    yield dataclasses.replace(op, saved=_gdn_norm_saved(Hv, dv))
    yield linear(c + "out_proj", where, "linear_attn.out_proj", Hv * dv, D, False)


def scan_elementwise_flops(cfg: ModelConfig, tokens: int) -> int:
    """Elementwise FLOPs of one Mamba scan forward over ``tokens`` tokens, not in the matmul
    FLOPs (a convention, stated for those who count them): per (token, channel, state) dt*A,
    exp, dt*B, *x, the recurrence's multiply and add (6); per (token, channel) the D skip's
    multiply-add and the gate's multiply (3)."""
    E, N = cfg.ssm_d_inner, cfg.ssm_state
    return tokens * (6 * E * N + 3 * E)


def _GDN_CONV_SAVED(C: int) -> tuple[tuple[int, str], ...]:
    """Gated DeltaNet's conv1d: its input (q, k, v gathered out of in_proj_qkvz: C) and the
    SiLU's input (C)."""
    return ((C, "a"), (C, "a"))


def _gdn_scan_saved(Hv: int, Hk: int, dk: int, dv: int) -> tuple[tuple[int, str], ...]:
    """Per token, what the scan (reference/model.py ``GDNScan``, fp32 inside) keeps besides its
    chunk-shaped temporaries (``ops.gdn_saved_bytes``): beta = sigmoid(b), softplus's input
    and output (Hv each), and each L2 norm's input and 1/|x| over the Hv heads (q and k
    repeated from the Hk key heads: Hv (dk + 1) each)."""
    return ((3 * Hv + 2 * Hv * (dk + 1), "f32"),)


def _gdn_norm_saved(Hv: int, dv: int) -> tuple[tuple[int, str], ...]:
    """Per token, the gated RMSNorm over each value head (``GDNNorm``): its fp32 input, 1/rms
    per head and the fp32 gate z (fp32 copies, or in an fp32 model the tensors themselves),
    the normalised input and the scaled one in the activation dtype, silu(z) in fp32."""
    return ((Hv * (3 * dv + 1), "f32"), (2 * Hv * dv, "a"))


# --- Zamba's shared attention blocks (Glorioso et al. 2024, arXiv:2405.16712; Zamba2,
# arXiv:2411.15242) -----------------------------------------------------------------------------


def shared_block(cfg: ModelConfig, p: str, where: Where) -> Iterator[Op]:
    """The shared attention block a Zamba layer runs before its Mamba mixer, in forward order
    (``layers.{i}.shared.*``). Its input is the concatenation of the hidden state and the
    original embeddings (2D wide); its output, through a per-layer Linear, is added to the
    Mamba layer's input. No residual inside the block. Legend: H heads, K kv heads, h
    head_dim, F d_ff, r the adapter rank.

        op                | operation                        | params (counted)
        ------------------|----------------------------------|------------------------------
        attn_norm         | RMSNorm over 2D                  | 2D (once per block)
        attn.{q,k,v}_proj | 2D -> H h, K h, K h              | 2D (H + 2K) h (once per block)
        attn.{q,k,v}_ad.. | down 2D -> r, up r -> 2D, added  | 3 x 4 D r (per use, Zamba2
                          |   to q, k, v                     |   use_shared_attention_adapter)
        attn.core         | causal softmax(q k^T) v          | -
        attn.o_proj       | H h -> D                         | H h D (once per block)
        mlp_norm          | RMSNorm over D                   | D (once per block)
        mlp.{gate,up}_pr..| D -> F each (Zamba2: one gate_up)| 2 D F (once per block)
        mlp.adapter.*     | down D -> r, up r -> 2F, added   | D r + 2 F r (per use, Zamba2)
                          |   to gate and up                 |
        mlp.down_proj     | F -> D                           | F D (once per block)
        proj              | D -> D (HF's per-layer ``linear``)| D^2 (per use)

    Use j (the j-th of ``shared_attn_layers``) runs block j % ``shared_attn_blocks``; a
    block's weights are counted at its first use and reused (no parameters, same FLOPs and
    saved tensors) after. Each use owns its adapters, as HF's adapter lists hold one per use.
    Untied (``shared_attn_tied`` false: HF with tie_word_embeddings false), every use holds a
    copy of its block, with the adapters of all that block's uses (``idle_adapters``: built,
    never run).
    """
    D, H, K, h, F = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff
    r, uses = cfg.shared_adapter_rank, cfg.shared_attn_layers
    j, blocks = uses.index(where[1]), cfg.shared_attn_blocks
    owner = j < blocks or not cfg.shared_attn_tied
    c, comp = p + "shared.", "shared."

    def block(op: Op) -> Op:  # a weight of the shared block: counted at its first use only
        if owner:
            return op
        return dataclasses.replace(op, params=0, tied=op.kind == "linear", bias=False)

    yield block(norm(c + "attn_norm", where, comp + "attn_norm", 2 * D, "rmsnorm", False, True))
    for n, width in (("q", H * h), ("k", K * h), ("v", K * h)):
        yield block(linear(f"{c}attn.{n}_proj", where, f"{comp}attn.{n}_proj", 2 * D, width,
                           False, shares_input=n != "q", tp="colwise"))
        if cfg.shared_qkv_adapters:
            yield from _adapter(f"{c}attn.{n}_adapter", where, f"{comp}attn.{n}_adapter",
                                2 * D, r, 2 * D)
    if cfg.pos_type == "rotary" and j == 0:  # Zamba2 use_mem_rope: cos/sin once per forward
        yield elementwise(c + "attn.rotary", where, comp + "attn.rotary", "rotary",
                          ((h, "a"), (h, "a")), stream="pos")
    yield from attention_core(c + "attn.core", where, comp + "attn.core", heads=H,
                              kv_heads=K, qk_dim=h, v_dim=h, stream="seq", kv_stream="seq",
                              causal=True, window=0, dropout=cfg.attn_dropout,
                              kv_elements=2 * K * h)
    yield block(linear(c + "attn.o_proj", where, comp + "attn.o_proj", H * h, D, False,
                       tp="rowwise"))
    yield block(norm(c + "mlp_norm", where, comp + "mlp_norm", D, "rmsnorm", False, True))
    bias = cfg.mlp_bias
    yield block(linear(c + "mlp.gate_proj", where, comp + "mlp.gate_proj", D, F, bias,
                       tp="colwise"))
    yield block(linear(c + "mlp.up_proj", where, comp + "mlp.up_proj", D, F, bias,
                       shares_input=True, tp="colwise"))
    if r:
        yield from _adapter(c + "mlp.adapter", where, comp + "mlp.adapter", D, r, 2 * F)
    # act(gate) * up: the activation's input and output and up's output
    yield elementwise(c + "mlp.act", where, comp + "mlp.act", "activation", ((3 * F, "a"),))
    yield block(linear(c + "mlp.down_proj", where, comp + "mlp.down_proj", F, D, bias,
                       tp="rowwise"))
    yield linear(c + "proj", where, comp + "proj", D, D, False)
    if r and not cfg.shared_attn_tied:  # an untied copy holds every use's adapters of its
        # block (HF's adapter lists), and runs only its own: parameters only
        idle = sum(1 for i in range(len(uses)) if i % blocks == j % blocks) - 1
        per_use = D * r + r * 2 * F + (3 * 4 * D * r if cfg.shared_qkv_adapters else 0)
        if idle:
            yield Op(c + "idle_adapters", "params", where[0], where[1], comp + "idle_adapters",
                     params=idle * per_use, d_in=idle * per_use)


def _adapter(c: str, where: Where, comp: str, d_in: int, rank: int, d_out: int) -> Iterator[Op]:
    """A per-use LoRA-style adapter (Zamba2): down d_in -> rank (reads the projection's saved
    input), up rank -> d_out, added to the projection's output."""
    yield linear(c + ".down", where, comp + ".down", d_in, rank, False, shares_input=True)
    yield linear(c + ".up", where, comp + ".up", rank, d_out, False)


# --- Griffin's recurrent block (De et al. 2024, arXiv:2402.19427; RecurrentGemma) -------------


def rglru_block(cfg: ModelConfig, p: str, where: Where) -> Iterator[Op]:
    """Griffin's recurrent block (``layers.{i}.recurrent.*``), in forward order. Legend: L
    lru_width (``ssm_d_inner``), Hb gate blocks (``ssm_heads``: HF's num_attention_heads) of
    b = L / Hb, k the conv width (``ssm_conv``).

        op             | operation                            | params     | forward FLOPs
        ---------------|--------------------------------------|------------|----------------
        linear_y       | D -> L, then gelu (the gate branch)  | DL + L     | 2T D L
        linear_x       | D -> L                               | DL + L     | 2T D L
        conv1d         | depthwise causal conv over L         | Lk + L     | 2B (S+k-1) L k
        input_gate     | block-diagonal: Hb blocks b -> b     | Hb b^2 + L | 2T L b
        recurrent_gate | the same (both read the conv output) | Hb b^2 + L | 2T L b
        scan           | a = exp(-8 r softplus(Lambda)),      | L (Lambda) | -
                       |   h_t = a h_{t-1} + sqrt(1-a^2) i x  |            |
        linear_out     | (h * y) L -> D                       | LD + D     | 2T L D

    A block-diagonal gate has the parameters and FLOPs of a dense b -> L Linear (declared so:
    its weight is [Hb, b, b] in HF, a baddbmm). Serving state: the conv's last k - 1 inputs
    (L x (k-1), HF's ``conv1d_state``) and the recurrence h (L, fp32)."""
    D, L, k = cfg.d_model, cfg.ssm_d_inner, cfg.ssm_conv
    b = L // cfg.ssm_heads
    c, comp = p + "recurrent.", "recurrent."
    yield linear(c + "linear_y", where, comp + "linear_y", D, L, True)
    # gelu's input, and its output y, which the output product keeps
    yield elementwise(c + "act", where, comp + "act", "activation", ((2 * L, "a"),))
    yield linear(c + "linear_x", where, comp + "linear_x", D, L, True, shares_input=True)
    conv = conv1d(c + "conv1d", where, comp + "conv1d", L, k, True, saved=((L, "a"),))
    yield dataclasses.replace(conv, state=L * (k - 1))
    for n, name in enumerate(("input_gate", "recurrent_gate")):
        gate = linear(c + name, where, comp + name, b, L, True)
        # both read the conv output (saved once, L wide); each keeps its sigmoid output
        yield dataclasses.replace(gate, saved=((L, "a"),) * (2 - n))
    yield Op(c + "scan", "rglru_scan", where[0], where[1], comp + "scan", L, 1, 1, L, L,
             saved=_RGLRU_SCAN_SAVED(L), saved_once=((L, "a"),), state_fp32=L,
             **_roles("rglru_scan", where[1]))
    yield linear(c + "linear_out", where, comp + "linear_out", L, D, True)


def _RGLRU_SCAN_SAVED(L: int) -> tuple[tuple[int, str], ...]:
    """Per token, what the RG-LRU scan keeps (reference/model.py ``RGLRUScan``, as HF computes
    it): -8 r, a and a^2 (their exps' outputs), 1 - a^2 (the bounded sqrt's input), i x and
    the sqrt(1 - a^2) factor (their product's operands), and the output h (its product with
    y), in the activation dtype; a_t in fp32 and h_{t-1} (fp32) for the recurrence's
    multiply. Once per forward: softplus(Lambda) (L)."""
    return ((7 * L, "a"), (2 * L, "f32"))
