"""Reference quantisers: pack a model's real weights into each toolchain's checkpoint tensors.

Independent of txcalc.engine.formats: every tensor here comes out of actually quantising and packing
the weights (bit streams, block scales, bitsandbytes' JSON quant state), following each
toolchain's published layout, so the shapes and dtypes are what the packing produces, not a
formula typed again. tests/conformance/test_formats.py writes the result with safetensors and compares the
file's tensors with ``txcalc.engine.formats.checkpoint_tensors`` byte for byte.

    toolchain          | which weights are packed (its convention)
    -------------------|-----------------------------------------------------------------
    gptq, awq, ct,     | Linear weights inside the blocks, not the MoE router / shared gate
      int8, fp8*, nvfp4|
    bnb nf4 / fp4      | every Linear (router included) except the output head
    mxfp4              | the routed experts (stacked [E, out, in] weights)
"""

from __future__ import annotations

import json

import torch

NF4_CODE = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                         -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                         0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                         0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                         0.7229568362236023, 1.0])
FP4_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def pack_bits(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack unsigned ``bits``-bit integers along dim 0 into int32 words, as a little-endian bit
    stream (AutoGPTQ's layout for 2/3/4/8 bits): rows -> rows * bits / 32 words."""
    v = values.to(torch.int64)
    n = v.shape[0]
    total = n * bits
    assert total % 32 == 0, "rows x bits must fill whole int32 words"
    words = torch.zeros((total // 32,) + tuple(v.shape[1:]), dtype=torch.int64)
    for i in range(n):
        for b in range(bits):
            pos = i * bits + b
            words[pos // 32] |= ((v[i] >> b) & 1) << (pos % 32)
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32)


def _minmax(w: torch.Tensor, bits: int, group: int):
    """Asymmetric min-max quantisation per group of ``group`` inputs: (ints [out, in], scales
    [G, out], zeros [G, out])."""
    out_f, in_f = w.shape
    g = in_f if group == -1 else group
    n_groups = -(-in_f // g)
    q = torch.empty(out_f, in_f, dtype=torch.int64)
    scales = torch.empty(n_groups, out_f)
    zeros = torch.empty(n_groups, out_f, dtype=torch.int64)
    qmax = 2**bits - 1
    for j in range(n_groups):
        blk = w[:, j * g:(j + 1) * g].float()
        lo, hi = blk.min(1).values.clamp(max=0), blk.max(1).values.clamp(min=0)
        s = ((hi - lo) / qmax).clamp(min=1e-8)
        z = torch.round(-lo / s).clamp(0, qmax).to(torch.int64)
        q[:, j * g:(j + 1) * g] = (torch.round(blk / s[:, None]) + z[:, None]).clamp(0, qmax)
        scales[j], zeros[j] = s, z
    return q, scales, zeros


def gptq(w: torch.Tensor, bits: int, group: int) -> dict[str, torch.Tensor]:
    q, scales, zeros = _minmax(w, bits, group)
    g = w.shape[1] if group == -1 else group
    return {"qweight": pack_bits(q.t().contiguous(), bits),
            "qzeros": pack_bits(zeros.t().contiguous(), bits).t().contiguous(),
            "scales": scales.half(),
            "g_idx": (torch.arange(w.shape[1]) // g).to(torch.int32)}


def awq(w: torch.Tensor, group: int) -> dict[str, torch.Tensor]:
    q, scales, zeros = _minmax(w, 4, group)  # AutoAWQ GEMM: 8 nibbles per int32 along d_out
    return {"qweight": pack_bits(q.contiguous(), 4).t().contiguous(),
            "qzeros": pack_bits(zeros.t().contiguous(), 4).t().contiguous(),
            "scales": scales.half()}


def ct_int(w: torch.Tensor, bits: int, group: int) -> dict[str, torch.Tensor]:
    """compressed-tensors pack-quantized, symmetric: int32 words along d_in."""
    out_f, in_f = w.shape
    n_groups = -(-in_f // group)
    half = 2 ** (bits - 1)
    scales = torch.stack([w[:, j * group:(j + 1) * group].abs().amax(1) / (half - 1)
                          for j in range(n_groups)], 1).clamp(min=1e-8)
    q = torch.round(w / scales.repeat_interleave(group, 1)[:, :in_f]).clamp(-half, half - 1)
    packed = pack_bits((q.to(torch.int64) + half).t().contiguous(), bits).t().contiguous()
    return {"weight_packed": packed, "weight_scale": scales.bfloat16(),
            "weight_shape": torch.tensor([out_f, in_f], dtype=torch.int64)}


def int8(w: torch.Tensor) -> dict[str, torch.Tensor]:
    s = (w.abs().amax(1, keepdim=True) / 127).clamp(min=1e-8)
    return {"weight": torch.round(w / s).clamp(-127, 127).to(torch.int8),
            "weight_scale": s.bfloat16()}


def fp8(w: torch.Tensor, mode: str) -> dict[str, torch.Tensor]:
    """mode: tensor (with a static input scale), dynamic, channel, block (128 x 128)."""
    fmax = torch.finfo(torch.float8_e4m3fn).max
    if mode == "block":
        o, i = w.shape
        bo, bi = -(-o // 128), -(-i // 128)
        s = torch.empty(bo, bi)
        q = torch.empty(o, i, dtype=torch.float8_e4m3fn)
        for a in range(bo):
            for b in range(bi):
                blk = w[a * 128:(a + 1) * 128, b * 128:(b + 1) * 128]
                s[a, b] = blk.abs().max().clamp(min=1e-8) / fmax
                q[a * 128:(a + 1) * 128, b * 128:(b + 1) * 128] = (blk / s[a, b]).to(
                    torch.float8_e4m3fn)
        return {"weight": q, "weight_scale_inv": s.float()}
    if mode == "channel":
        s = w.abs().amax(1, keepdim=True).clamp(min=1e-8) / fmax
        return {"weight": (w / s).to(torch.float8_e4m3fn), "weight_scale": s.bfloat16()}
    s = w.abs().max().clamp(min=1e-8) / fmax
    out = {"weight": (w / s).to(torch.float8_e4m3fn), "weight_scale": s.reshape(1).bfloat16()}
    if mode == "tensor":
        out["input_scale"] = torch.ones(1, dtype=torch.bfloat16)
    return out


def _nearest(x: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    return (x[..., None] - code).abs().argmin(-1)


def bnb4(w: torch.Tensor, quant_type: str, double_quant: bool, dtype_name: str
         ) -> dict[str, torch.Tensor]:
    """bitsandbytes Params4bit + QuantState.as_dict(packed=True): blocks of 64, absmax per
    block; with double quant the absmax (minus its mean) is itself quantised in blocks of 256
    to 8 bits with the dynamic map."""
    flat = w.float().flatten()
    n = flat.numel()
    nb = -(-n // 64)
    pad = torch.zeros(nb * 64)
    pad[:n] = flat
    blocks = pad.view(nb, 64)
    absmax = blocks.abs().amax(1).clamp(min=1e-8)
    code = NF4_CODE if quant_type == "nf4" else torch.cat([FP4_E2M1, -FP4_E2M1]) / 6
    idx = _nearest(blocks / absmax[:, None], code).flatten()[:n]
    if n % 2:
        idx = torch.cat([idx, idx.new_zeros(1)])
    packed = (idx[0::2] << 4 | idx[1::2]).to(torch.uint8).reshape(-1, 1)
    out = {"weight": packed}
    state = {"quant_type": quant_type, "blocksize": 64, "dtype": dtype_name,
             "shape": list(w.shape)}
    if double_quant:
        offset = absmax.mean()
        centred = absmax - offset
        n2 = -(-nb // 256)
        pad2 = torch.zeros(n2 * 256)
        pad2[:nb] = centred
        nested = pad2.view(n2, 256).abs().amax(1).clamp(min=1e-8)
        dyn = torch.linspace(-1, 1, 256)  # stands in for bnb's dynamic map: 256 fp32 values
        q2 = _nearest(pad2.view(n2, 256) / nested[:, None], dyn).flatten()[:nb]
        out |= {"weight.absmax": q2.to(torch.uint8), "weight.nested_absmax": nested,
                "weight.nested_quant_map": dyn.clone()}
        state |= {"nested_blocksize": 256, "nested_dtype": "float32",
                  "nested_offset": offset.item()}
    else:
        out["weight.absmax"] = absmax
    out["weight.quant_map"] = code.clone().float()
    out[f"weight.quant_state.bitsandbytes__{quant_type}"] = torch.tensor(
        list(json.dumps(state).encode()), dtype=torch.uint8)
    return out


def _e2m1_pack(x: torch.Tensor) -> torch.Tensor:
    """FP4 e2m1 codes (sign bit + 3 bits), two per byte along the last dim."""
    sign = (x < 0).to(torch.int64) << 3
    idx = _nearest(x.abs(), FP4_E2M1) | sign
    return (idx[..., 0::2] | idx[..., 1::2] << 4).to(torch.uint8)


def mxfp4(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """OCP MXFP4 as gpt-oss stores it: blocks [out, in/32, 16] bytes, e8m0 scales [out, in/32]."""
    o, i = w.shape
    blk = w.float().view(o, i // 32, 32)
    exp = torch.floor(torch.log2(blk.abs().amax(-1).clamp(min=2**-126))) - 2
    scaled = blk / torch.exp2(exp)[..., None]
    return {"blocks": _e2m1_pack(scaled), "scales": (exp + 127).to(torch.uint8)}


def nvfp4(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """NVIDIA ModelOpt NVFP4: e4m3 scale per 16 values, fp32 global scale."""
    o, i = w.shape
    blk = w.float().view(o, i // 16, 16)
    global_scale = blk.abs().max().clamp(min=1e-8) / (6 * 448)
    s = (blk.abs().amax(-1) / 6 / global_scale).to(torch.float8_e4m3fn)
    scaled = blk / (s.float().clamp(min=1e-8) * global_scale)[..., None]
    return {"weight": _e2m1_pack(scaled).view(o, i // 2), "weight_scale": s,
            "weight_scale_2": global_scale.reshape(()), "input_scale": torch.ones(())}


def quantise_model(model: torch.nn.Module, method: str, dtype=torch.bfloat16,
                   **kw) -> dict[str, torch.Tensor]:
    """The state dict a checkpoint of ``method`` stores for the reference model (tied weights
    once). Methods: gptq(bits, group), awq(group), ct(bits, group), int8, fp8(mode), nf4/fp4
    (double_quant), mxfp4, nvfp4."""
    from .mlp import GroupedLinear, Router, SharedGate
    linear_types = (torch.nn.Linear, GroupedLinear, Router, SharedGate)
    owners = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owners[f"{mname}.{pname}" if mname else pname] = mod
    out: dict[str, torch.Tensor] = {}
    bias_dtype = torch.float16 if method in ("gptq", "awq") else dtype
    dense_bytes = {torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    for name, p in model.named_parameters():
        mod = owners[name]
        stem, leaf = name.rsplit(".", 1)
        is_linear = isinstance(mod, linear_types) and leaf == "weight"
        in_block = ".layers." in f".{name}" or name.startswith("layers.")
        router = isinstance(mod, (Router, SharedGate))
        if method in ("nf4", "fp4"):
            quantise = is_linear and not name.startswith("lm_head")
        elif method == "mxfp4":
            quantise = is_linear and isinstance(mod, GroupedLinear)
        else:
            quantise = is_linear and in_block and not router
        if not quantise:
            out[name] = p.detach().to(bias_dtype if leaf == "bias" and method in (
                "gptq", "awq") and in_block and isinstance(mod, torch.nn.Linear) else dtype)
            continue
        mats = p.detach().float()
        per = [mats] if mats.dim() == 2 else list(mats)  # stacked experts: one per expert
        packed = []
        for m in per:
            if method == "gptq":
                packed.append(gptq(m, kw["bits"], kw["group"]))
            elif method == "awq":
                packed.append(awq(m, kw["group"]))
            elif method == "ct":
                packed.append(ct_int(m, kw["bits"], kw["group"]))
            elif method == "int8":
                packed.append(int8(m))
            elif method == "fp8":
                packed.append(fp8(m, kw["mode"]))
            elif method in ("nf4", "fp4"):
                packed.append(bnb4(m, method, kw.get("double_quant", True), dense_bytes))
            elif method == "mxfp4":
                packed.append(mxfp4(m))
            elif method == "nvfp4":
                packed.append(nvfp4(m))
        for k in packed[0]:
            t = packed[0][k] if len(packed) == 1 else torch.stack([d[k] for d in packed])
            out[f"{stem}.{k}"] = t.contiguous()
    return out
