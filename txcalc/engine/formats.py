"""Weight formats: the exact tensors a quantised checkpoint stores, and which ops they cover.

A *format* is how one weight matrix W (d_out x d_in, torch layout) is stored; a *scheme* says
which ops of the model get which format (each toolchain's convention) and the dtype of the
rest. ``assign(ops, scheme)`` writes each op's storage format into its ``weight_format`` role;
``op_tensors(op)`` lists the tensors a checkpoint holds for it; ``checkpoint_bytes`` sums them
(tied weights once). Everything is exact integers.

Storage of one Linear weight W (d_out x d_in), G = ceil(d_in / g) groups of g inputs:

    format        | toolchain            | tensors (dtype [shape])                            | bits/weight
    --------------|----------------------|----------------------------------------------------|------------
    gptq-intB-gg  | AutoGPTQ / optimum   | qweight i32 [d_in*B/32, d_out], qzeros i32          | B + 16/g
                  |                      |   [G, d_out*B/32], scales f16 [G, d_out],           |  + B/g
                  |                      |   g_idx i32 [d_in]                                  |
    awq-int4-gg   | AutoAWQ (GEMM)       | qweight i32 [d_in, d_out/8], qzeros i32             | 4 + 16/g
                  |                      |   [G, d_out/8], scales f16 [G, d_out]               |  + 4/g
    int8          | compressed-tensors   | weight i8 [d_out, d_in], weight_scale [d_out, 1]    | 8
                  |   W8A8 (SmoothQuant) |   (the checkpoint dtype)                            |
    fp8           | compressed-tensors   | weight f8e4m3 [d_out, d_in], weight_scale [1],      | 8
                  |   (static per-tensor)|   input_scale [1] (checkpoint dtype)                |
    fp8-channel   | compressed-tensors   | weight f8 [d_out, d_in], weight_scale [d_out, 1]    | 8
    fp8-block     | DeepSeek-V3          | weight f8 [d_out, d_in], weight_scale_inv f32       | 8 + 32/16384
                  |                      |   [ceil(d_out/128), ceil(d_in/128)]                 |
    nf4 / fp4     | bitsandbytes 4-bit   | weight u8 [ceil(n/2), 1] (n = d_out*d_in), absmax   | 4 + 8/64
                  |   (blocks of 64;     |   u8 [ceil(n/64)], nested_absmax f32 [ceil(nb/256)],|  (+ fp32
                  |   double quant)      |   nested_quant_map f32 [256], quant_map f32 [16],   |  second
                  |                      |   quant_state.bitsandbytes__nf4 u8 [json length]    |  level)
                  |   (no double quant)  | weight, absmax f32 [ceil(n/64)], quant_map, state   | 4 + 32/64
    mxfp4         | OCP MX (gpt-oss)     | blocks u8 [d_out, d_in/32, 16], scales u8 (e8m0)    | 4.25
                  |                      |   [d_out, d_in/32]                                  |
    nvfp4         | NVIDIA ModelOpt      | weight u8 [d_out, d_in/2], weight_scale f8e4m3      | 4.5
                  |                      |   [d_out, d_in/16], weight_scale_2 f32 [],          |
                  |                      |   input_scale f32 []                                |
    gguf:T        | llama.cpp            | d_out rows of d_in/blck blocks of type T (below)    | table

GGUF block types (ggml-common.h: elements per block, bytes per block):

    Q4_0 32/18  Q4_1 32/20  Q5_0 32/22  Q5_1 32/24  Q8_0 32/34  IQ4_NL 32/18
    Q2_K 256/84 Q3_K 256/110 Q4_K 256/144 Q5_K 256/176 Q6_K 256/210 IQ4_XS 256/136
    F32 4 bytes, F16/BF16 2 bytes per element

Which ops each scheme quantises (overridable with ``keep`` patterns):

    scheme                 | quantised                               | kept in the checkpoint dtype
    -----------------------|-----------------------------------------|------------------------------
    gptq, awq, int8, fp8*, | Linears inside the blocks               | embeddings, lm_head, norms,
      nvfp4                |                                         |   MoE router and shared gate
    nf4, fp4 (bnb)         | every nn.Linear                         | lm_head (transformers keeps
                           |                                         |   the output embeddings)
    mxfp4 (gpt-oss)        | the routed experts only                 | attention, router, embeddings
    gguf recipes           | every 2-D weight (token_embd included)  | 1-D tensors in F32, the MoE
                           |   with llama.cpp's per-tensor mix       |   router in F16

The *_K_M mixes are llama.cpp's ``llama_tensor_get_type`` (src/llama-quant.cpp), stated for a
dense model and Mixtral-like MoE: output.weight Q6_K; attn_v and ffn_down Q6_K on the layers
``use_more_bits`` picks (the first and last eighth and every third in between), the rest of the
recipe's base type (Q4_K for Q4_K_M, Q5_K for Q5_K_M); 8-expert models put attn_v and attn_k in
Q8_0 and (Q4_K_M) attn_output in Q5_K; IQ4_XS puts attn_v in Q5_K when n_heads/n_kv_heads >= 4;
a row whose width is not a multiple of the block size falls back (Q4_K -> Q5_0, Q5_K -> Q5_1,
Q6_K -> Q8_0, IQ4_XS -> IQ4_NL).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from dataclasses import dataclass

from ..errors import TxcalcError
from .ops import Op
from ..units import cdiv


class FormatError(TxcalcError):
    """An unknown weight format, or a quantization_config txcalc cannot read."""


#: bytes per element of the dtypes checkpoints use
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f8": 1, "i64": 8, "i32": 4, "i8": 1, "u8": 1}

#: GGUF block types: (elements per block, bytes per block) from ggml-common.h
GGUF_BLOCKS = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2),
    "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34),
    "IQ4_NL": (32, 18), "MXFP4": (32, 17),
    "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144), "Q5_K": (256, 176),
    "Q6_K": (256, 210), "IQ4_XS": (256, 136),
}
#: llama.cpp's fallback when a row is not a whole number of 256-element super-blocks
GGUF_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1",
                 "Q6_K": "Q8_0", "IQ4_XS": "IQ4_NL"}
#: recipes (llama.cpp ftypes): base type of the weights
GGUF_RECIPES = {"Q8_0": "Q8_0", "Q6_K": "Q6_K", "Q5_K_M": "Q5_K", "Q5_K_S": "Q5_K",
                "Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K", "Q4_0": "Q4_0", "IQ4_XS": "IQ4_XS",
                "F16": "F16", "BF16": "BF16"}

#: bitsandbytes 4-bit: elements per absmax block and per second-level (nested) block
BNB_BLOCK, BNB_NESTED_BLOCK = 64, 256
#: characters of the float ``nested_offset`` (the mean absmax, repr'd by json.dumps) in the
#: packed quant-state JSON: a 17-significant-digit value like 0.021438010782003403 (19-20
#: characters; the real length varies by a few bytes per tensor, about 1e-8 of the checkpoint)
BNB_OFFSET_CHARS = 20


# --- one storage format ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Format:
    """How one weight matrix is stored. ``kind``: dense | gptq | awq | int8 | fp8 | fp8-channel |
    fp8-block | nf4 | fp4 | mxfp4 | nvfp4 | gguf; bnb-nf4 | bnb-fp4 | bnb-int8: a QLoRA base on
    the device (``finetune.bnb_format``, bytes ``finetune.quantized_weight_bytes``). ``compute``: the dtype the matmul runs in
    (fp8 / int8 where the kernel multiplies in it; weight-only formats dequantise to bf16)."""

    name: str
    kind: str
    bits: int = 16
    group: int = 0  #: inputs per scale group (gptq/awq); -1: one group per row
    gguf_type: str = ""
    double_quant: bool = True  #: bitsandbytes: absmax quantised to 8 bits
    input_scale: bool = True  #: fp8 per-tensor: a static activation scale is stored
    block: int = 128  #: fp8-block: square block side
    scale_dtype: str = "bf16"  #: compressed-tensors scales: the checkpoint dtype
    compute: str = "bf16"

    @property
    def weight_only(self) -> bool:
        return self.compute == "bf16"

    def tensors(self, d_out: int, d_in: int, dense: str = "bf16"
                ) -> list[tuple[str, str, tuple[int, ...]]]:
        """(suffix, dtype, shape) of every tensor that stores one d_out x d_in weight."""
        k = self.kind
        if k == "dense":
            return [("weight", dense, (d_out, d_in))]
        if k in ("gptq", "awq", "ct"):
            b, g = self.bits, (d_in if self.group == -1 else self.group)
            n_groups = cdiv(d_in, g)
            if k == "ct":  # compressed-tensors pack-quantized (symmetric): int32 along d_in
                return [("weight_packed", "i32", (d_out, d_in * b // 32)),
                        ("weight_scale", self.scale_dtype, (d_out, n_groups)),
                        ("weight_shape", "i64", (2,))]
            if k == "awq":  # AutoAWQ GEMM: packed along the output dimension, 8 nibbles per int32
                return [("qweight", "i32", (d_in, d_out * b // 32)),
                        ("qzeros", "i32", (n_groups, d_out * b // 32)),
                        ("scales", "f16", (n_groups, d_out))]
            return [("qweight", "i32", (d_in * b // 32, d_out)),
                    ("qzeros", "i32", (n_groups, d_out * b // 32)),
                    ("scales", "f16", (n_groups, d_out)),
                    ("g_idx", "i32", (d_in,))]
        if k == "int8":
            return [("weight", "i8", (d_out, d_in)), ("weight_scale", self.scale_dtype, (d_out, 1))]
        if k == "fp8":
            out = [("weight", "f8", (d_out, d_in)), ("weight_scale", self.scale_dtype, (1,))]
            return out + ([("input_scale", self.scale_dtype, (1,))] if self.input_scale else [])
        if k == "fp8-channel":
            return [("weight", "f8", (d_out, d_in)), ("weight_scale", self.scale_dtype, (d_out, 1))]
        if k == "fp8-block":
            return [("weight", "f8", (d_out, d_in)),
                    ("weight_scale_inv", "f32", (cdiv(d_out, self.block), cdiv(d_in, self.block)))]
        if k in ("nf4", "fp4"):  # the device tensors but the offset, which the JSON holds
            out = [t for t in bnb_4bit_tensors(d_out * d_in, BNB_BLOCK, self.double_quant)
                   if t[0] != "weight.nested_offset"]
            return out + [(f"weight.quant_state.bitsandbytes__{k}", "u8",
                           (bnb_state_bytes(k, d_out, d_in, dense, self.double_quant),))]
        if k == "mxfp4":  # 32 FP4 values (16 bytes) per block and one e8m0 scale byte
            return [("blocks", "u8", (d_out, cdiv(d_in, 32), 16)),
                    ("scales", "u8", (d_out, cdiv(d_in, 32)))]
        if k == "nvfp4":  # 16 FP4 values per e4m3 scale, a global fp32 scale per tensor
            return [("weight", "u8", (d_out, cdiv(d_in, 2))),
                    ("weight_scale", "f8", (d_out, cdiv(d_in, 16))),
                    ("weight_scale_2", "f32", ()), ("input_scale", "f32", ())]
        if k == "gguf":
            return [("weight", "gguf:" + self.gguf_type, (d_out, d_in))]
        raise FormatError(f"unknown storage kind {k!r}")


def bnb_4bit_tensors(n: int, block: int = BNB_BLOCK, double_quant: bool = True
                     ) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype, shape) of what bitsandbytes keeps for one 4-bit (NF4/FP4) weight of n
    elements on the device (``functional.quantize_4bit`` and its ``QuantState``; 0.50): the
    one layout that both the fine-tuning memory (``finetune.quantized_weight_bytes``) and
    the checkpoint (``Format.tensors``: names as ``QuantState.as_dict(packed=True)``) read.

        tensor                  | dtype | elements                  | when
        ------------------------|-------|---------------------------|-------------------
        weight (packed codes)   | u8    | ceil(n / 2), 2 per byte   | always
        absmax (one per block)  | u8    | ceil(n / block)           | double quant
                                | f32   | ceil(n / block)           | without
        nested_absmax           | f32   | ceil(blocks / 256)        | double quant
        nested_quant_map        | f32   | 256 (the 8-bit code)      | double quant
        nested_offset           | f32   | 1 (the mean absmax)       | double quant
        quant_map (the 4-bit    | f32   | 16                        | always
          code book)            |       |                           |

    Double quantisation (QLoRA section 3): 8/64 + 32/(64*256) = 0.127 bits per parameter of
    constants instead of 32/64 = 0.5."""
    nb = cdiv(n, block)
    out = [("weight", "u8", (cdiv(n, 2), 1))]
    if double_quant:
        out += [("weight.absmax", "u8", (nb,)),
                ("weight.nested_absmax", "f32", (cdiv(nb, BNB_NESTED_BLOCK),)),
                ("weight.nested_quant_map", "f32", (256,)),
                ("weight.nested_offset", "f32", ())]
    else:
        out += [("weight.absmax", "f32", (nb,))]
    return out + [("weight.quant_map", "f32", (16,))]


def bnb_state_bytes(quant_type: str, d_out: int, d_in: int, dense: str,
                    double_quant: bool) -> int:
    """Length of bitsandbytes' packed quant state: ``json.dumps`` of its non-tensor fields
    (QuantState.as_dict(packed=True)), the float offset taken as BNB_OFFSET_CHARS long."""
    fields = {"quant_type": quant_type, "blocksize": BNB_BLOCK,
              "dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dense],
              "shape": [d_out, d_in]}
    if double_quant:
        fields |= {"nested_blocksize": BNB_NESTED_BLOCK, "nested_dtype": "float32",
                   "nested_offset": 0}
    import json  # here: the CLI's start-up reads no JSON
    text = json.dumps(fields)
    return len(text) - (1 if double_quant else 0) + (BNB_OFFSET_CHARS if double_quant else 0)


def tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of one stored tensor; GGUF types count whole blocks per row."""
    if dtype.startswith("gguf:"):
        per, size = GGUF_BLOCKS[dtype[5:]]
        rows = 1
        for s in shape[:-1]:
            rows *= s
        return rows * cdiv(shape[-1], per) * size
    n = 1
    for s in shape:
        n *= s
    return n * DTYPE_BYTES[dtype]


# --- names ----------------------------------------------------------------------------------------
_INT = re.compile(r"^(?:(gptq|awq|ct)-)?int([2348])(?:-g(\d+|-1))?$")


def parse_format(name: str) -> Format:
    """A storage format from its name (``_parse_format``, cached: formats are frozen)."""
    if not isinstance(name, str):
        raise FormatError(f"weight format ({name!r:.60}) must be a string")
    return _parse_format(name)


@functools.lru_cache(maxsize=256)
def _parse_format(name: str) -> Format:
    """A storage format from its name: ``int4-g128`` (GPTQ packing), ``awq-int4-g128``,
    ``gptq-int3-g128``, ``int8``, ``fp8``, ``fp8-channel``, ``fp8-block``, ``nf4``, ``fp4``,
    ``nf4-nodq``, ``mxfp4``, ``nvfp4``, ``gguf-type:Q6_K``, ``bf16``, ``f16``."""
    if not isinstance(name, str):
        raise FormatError(f"weight format ({name!r:.60}) must be a string")
    m = _INT.match(name)
    if m and not (m.group(2) == "8" and not m.group(1)):
        tool, bits, group = m.group(1) or "gptq", int(m.group(2)), int(m.group(3) or 128)
        if tool == "awq" and bits != 4:
            raise FormatError(f"AWQ stores 4-bit weights only, not {bits}-bit ({name!r})")
        if group == 0 or group < -1:
            raise FormatError(f"group size ({group}) must be positive or -1 ({name!r})")
        return Format(name, tool, bits, group)
    simple = {
        "int8": Format("int8", "int8", 8, compute="int8"),
        "fp8": Format("fp8", "fp8", 8, compute="fp8"),
        "fp8-dynamic": Format("fp8-dynamic", "fp8", 8, input_scale=False, compute="fp8"),
        "fp8-channel": Format("fp8-channel", "fp8-channel", 8, compute="fp8"),
        "fp8-block": Format("fp8-block", "fp8-block", 8, compute="fp8"),
        "nf4": Format("nf4", "nf4", 4), "fp4": Format("fp4", "fp4", 4),
        "nf4-nodq": Format("nf4-nodq", "nf4", 4, double_quant=False),
        "fp4-nodq": Format("fp4-nodq", "fp4", 4, double_quant=False),
        "mxfp4": Format("mxfp4", "mxfp4", 4, compute="fp4"),
        "nvfp4": Format("nvfp4", "nvfp4", 4, compute="fp4"),
        "bf16": Format("bf16", "dense"), "f16": Format("f16", "dense"),
    }
    if name in simple:
        return simple[name]
    if name.startswith("gguf-type:") and name[10:] in GGUF_BLOCKS:
        return Format(name, "gguf", gguf_type=name[10:])
    raise FormatError(f"unknown weight format {name!r}")


# --- schemes: which op gets which format ---------------------------------------------------------
@dataclass(frozen=True)
class Scheme:
    """A checkpoint's layout: the format of the quantised Linears, the scope (blocks | linears |
    experts | gguf), the dtype of everything else and the user's ``keep`` patterns (fnmatch on
    op paths or components: matching ops stay in ``dense``)."""

    name: str
    fmt: Format | None  #: None for a gguf recipe (per-tensor types)
    scope: str = "blocks"
    dense: str = "bf16"
    keep: tuple[str, ...] = ()
    recipe: str = ""  #: gguf recipe (Q4_K_M ...)
    notes: tuple[str, ...] = ()


#: --weights names: the scheme each toolchain uses
_SCOPE = {"gptq": "blocks", "awq": "blocks", "ct": "blocks", "int8": "blocks", "fp8": "blocks",
          "fp8-channel": "blocks", "fp8-block": "blocks", "nvfp4": "blocks", "nf4": "linears",
          "fp4": "linears", "mxfp4": "experts", "dense": "none"}
WEIGHTS_EXAMPLES = ("bf16", "int8", "int4-g128", "awq-int4-g128", "int3-g128", "fp8",
                    "fp8-channel", "fp8-block", "nf4", "fp4", "mxfp4", "nvfp4", "gguf:Q4_K_M",
                    "gguf:Q5_K_M", "gguf:Q6_K", "gguf:Q8_0", "gguf:Q4_0", "gguf:IQ4_XS")


def scheme(name: str, keep: tuple[str, ...] = (), dense: str = "bf16") -> Scheme:
    """The scheme of a ``--weights`` name (WEIGHTS_EXAMPLES, or any ``parse_format`` name)."""
    if isinstance(name, str) and name.startswith("gguf:"):
        recipe = name[5:]
        if recipe not in GGUF_RECIPES:
            raise FormatError(f"unknown GGUF recipe {recipe!r}; choose one of "
                              f"{', '.join(GGUF_RECIPES)}")
        return Scheme(name, None, "gguf", "f16", tuple(keep), recipe)
    try:
        fmt = parse_format(name)
    except FormatError:
        raise FormatError(f"unknown weight format {name!r:.80}; choose one of "
                          f"{', '.join(WEIGHTS_EXAMPLES)} (int4-g32, gptq-int3-g128 ...)") from None
    return Scheme(name, fmt, _SCOPE[fmt.kind], dense, tuple(keep))


def _matches(op: Op, patterns) -> bool:
    return any(fnmatch.fnmatchcase(op.path, p) or fnmatch.fnmatchcase(op.component, p)
               for p in patterns)


def _is_router(op: Op) -> bool:
    return op.component in ("moe.router", "moe.shared_gate")


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _gguf_type(op: Op, recipe: str, cfg) -> str:
    """llama.cpp's type for one 2-D weight under ``recipe`` (module docstring)."""
    base = GGUF_RECIPES[recipe]
    comp = op.component
    n_expert = cfg.n_experts if cfg is not None else 0
    n_layers = cfg.n_layers if cfg is not None else 1
    gqa = cfg.n_heads // cfg.n_kv_heads if cfg is not None and cfg.n_kv_heads else 1
    t = base
    if op.component == "lm_head" or (op.kind == "embedding" and op.component == "embed.tokens"
                                      and cfg is not None and cfg.tie_embeddings):
        t = "Q8_0" if base == "Q8_0" else "Q6_K"
    elif comp.endswith("v_proj") and op.layer >= 0:
        if recipe in ("Q4_K_M", "Q5_K_M") and _use_more_bits(op.layer, n_layers):
            t = "Q6_K"
        if recipe == "IQ4_XS" and gqa >= 4:
            t = "Q5_K"
        if n_expert == 8:
            t = "Q8_0"
    elif comp.endswith("k_proj") and op.layer >= 0 and n_expert == 8:
        t = "Q8_0"
    elif comp.endswith("down_proj") and op.layer >= 0:
        if recipe in ("Q4_K_M", "Q5_K_M") and _use_more_bits(op.layer, n_layers):
            t = "Q6_K"
        elif recipe == "Q4_K_S" and op.layer < n_layers // 8:
            t = "Q5_K"
        elif recipe == "IQ4_XS" and op.layer < n_layers // 8:
            t = "Q5_K"
    elif comp.endswith("o_proj") and op.layer >= 0 and n_expert == 8 and recipe in (
            "Q4_K_M", "Q4_K_S", "IQ4_XS"):
        t = "Q5_K"
    per, _ = GGUF_BLOCKS[t]
    if per > 1 and op.d_in % per:
        t = GGUF_FALLBACK.get(t, t)
        if op.d_in % GGUF_BLOCKS[t][0]:
            t = "F16"
    return t


def assign(ops, sch: Scheme, cfg=None) -> tuple[Op, ...]:
    """The ops with ``weight_format`` set to the storage format of their weights under the
    scheme (a ``Format``, parsed once; None = the scheme's dense dtype). ``cfg`` (the ModelConfig) is needed by GGUF recipes
    (layer count, GQA ratio, experts)."""
    out = []
    for op in ops:
        fmt = None
        has_matrix = op.params and op.kind in ("linear", "embedding") and not (
            op.kind == "linear" and op.tied)
        if has_matrix and not _matches(op, sch.keep):
            s = sch.scope
            if s == "blocks" and op.kind == "linear" and op.layer >= 0 and not _is_router(op) \
                    and op.component != "lm_head":  # an MTP module's copy of the head: bf16
                fmt = sch.fmt
            elif s == "linears" and op.kind == "linear" and op.component != "lm_head":
                fmt = sch.fmt
            elif s == "experts" and op.kind == "linear" and op.instances > 1:
                fmt = sch.fmt
            elif s == "gguf" and not _is_router(op) and op.component not in (
                    "embed.positions", "rel_bias", "embed.token_types"):
                fmt = parse_format("gguf-type:" + _gguf_type(op, sch.recipe, cfg))
        out.append(dataclasses.replace(op, weight_format=fmt) if fmt != op.weight_format else op)
    return tuple(out)


# --- the checkpoint -------------------------------------------------------------------------------
def op_tensors(op: Op, dense: str = "bf16", gguf: bool = False
               ) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype, shape) of the tensors a checkpoint stores for one op (all instances:
    stacked experts are one tensor per name). Names are the op path plus the suffix."""
    out = []
    small = "f32" if gguf else dense  # GGUF keeps 1-D tensors (norms, biases) in F32
    for i, (d0, rest, ndim) in enumerate(op.tensors()):
        first = op.kind == "linear" and not op.tied and i == 0 or op.kind == "embedding"
        if ndim == 2 and first:
            d_out, d_in = (d0, rest)
            fmt = op.weight_format or Format(dense, "dense")
            for suffix, dtype, shape in fmt.tensors(d_out, d_in, dense):
                if op.instances > 1:
                    shape = (op.instances,) + shape
                out.append((f"{op.path}.{suffix}", dtype, shape))
        else:
            name = "bias" if op.kind == "linear" else ("weight" if i == 0 else "bias")
            fmt = op.weight_format
            # GPTQ/AWQ store biases in f16
            dtype = "f16" if fmt is not None and fmt.kind in ("gptq", "awq") else small
            shape = (d0,) if ndim == 1 else (d0, rest)
            if op.instances > 1:
                shape = (op.instances,) + shape
            out.append((f"{op.path}.{name}", dtype, shape))
    return out


def checkpoint_tensors(ops, sch: Scheme | None = None, cfg=None):
    """Every (name, dtype, shape) a checkpoint of the scheme stores (tied weights once)."""
    if sch is not None:
        ops = assign(ops, sch, cfg)
    dense = sch.dense if sch is not None else "bf16"
    gguf = sch is not None and sch.scope == "gguf"
    seen = set()
    for op in ops:
        if not op.params or op.path in seen:
            continue
        seen.add(op.path)
        yield from op_tensors(op, dense, gguf)


def checkpoint_bytes(ops, sch: Scheme | None = None, cfg=None) -> int:
    """Bytes of every tensor a safetensors (or GGUF) checkpoint of the scheme stores: the sum of
    ``tensor_bytes`` over ``checkpoint_tensors`` (no file headers, no GGUF metadata)."""
    return sum(tensor_bytes(dt, shape) for _, dt, shape in checkpoint_tensors(ops, sch, cfg))


def weight_bytes_of(op: Op, dense: str = "bf16", gguf: bool = False) -> int:
    """Bytes of one op's stored parameters (all instances) in its assigned format."""
    if not op.params:
        return 0
    return sum(tensor_bytes(dt, shape) for _, dt, shape in op_tensors(op, dense, gguf))


def model_checkpoint_bytes(cfg, sch: Scheme | None = None, mtp_layers: int = 0) -> int:
    """``checkpoint_bytes`` of a ModelConfig, with ``mtp_layers`` multi-token-prediction modules
    that the checkpoint stores besides the model (DeepSeek-V3's ``num_nextn_predict_layers``:
    each one decoder block, enorm and hnorm (D), eh_proj (2D -> D), its own copy of the token
    table and of the output head, and the head's norm)."""
    from .components import model_ops_tuple
    ops = list(model_ops_tuple(cfg))
    ops += mtp_ops(cfg, mtp_layers)
    return checkpoint_bytes(ops, sch, cfg)


def mtp_ops(cfg, n: int) -> list[Op]:
    """The ops of ``n`` DeepSeek-V3 multi-token-prediction modules, as stored in the checkpoint
    (layers n_layers, n_layers + 1, ... of the file), placed as blocks."""
    from .components import block
    from .ops import embedding, linear, norm
    out: list[Op] = []
    D = cfg.d_model
    for j in range(n):
        i = cfg.n_layers + j
        where = ("", i)
        p = f"layers.{i}."
        out += list(block(cfg, "", i))
        out += [norm(p + "enorm", where, "mtp.enorm", D, "rmsnorm", False, True),
                norm(p + "hnorm", where, "mtp.hnorm", D, "rmsnorm", False, True),
                linear(p + "eh_proj", where, "mtp.eh_proj", 2 * D, D, False),
                norm(p + "shared_head.norm", where, "mtp.head_norm", D, "rmsnorm", False, True),
                embedding(p + "embed_tokens", where, "mtp.embed", cfg.vocab_size, D),
                dataclasses.replace(linear(p + "shared_head.head", where, "mtp.head", D,
                                           cfg.vocab_size, False), component="lm_head")]
    return out


# --- quantization_config of a config.json -----------------------------------------------------------
_HF_NAMES = {"lm_head": "lm_head", "embed_tokens": "embed.tokens", "self_attn": "*.attn.*",
             "gate": "moe.router", "mlp.gate": "moe.router", "router": "moe.router",
             "block_sparse_moe.gate": "moe.router", "shared_expert_gate": "moe.shared_gate"}


def _keep_patterns(names) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """HF module names a quantization_config leaves unquantised -> our patterns, and the names
    not understood (reported in the scheme's notes)."""
    keep, unknown = [], []
    for n in names or ():
        if not isinstance(n, str):
            unknown.append(repr(n)[:40])
            continue
        key = n[3:] if n.startswith("re:") else n
        key = key.strip("$^").replace(".*", "").replace("\\.", ".")
        key = key.removeprefix("model.")
        m = re.match(r"^layers\.(\d+)\.(.+)$", key)
        if key in _HF_NAMES:
            keep.append(_HF_NAMES[key])
        elif m and m.group(2) in _HF_NAMES:
            keep.append(f"layers.{m.group(1)}.{_HF_NAMES[m.group(2)].strip('*.')}*")
        else:
            unknown.append(n[:60])
    return tuple(keep), tuple(unknown)


def scheme_from_quant_config(qc, where: str = "config.json") -> Scheme:
    """The scheme a ``quantization_config`` describes (gptq, awq, fp8, compressed-tensors,
    bitsandbytes, mxfp4)."""
    if not isinstance(qc, dict):
        raise FormatError(f"{where}: quantization_config ({qc!r:.60}) must be an object")
    method = qc.get("quant_method")
    if method == "gptq":
        bits, group = qc.get("bits", 4), qc.get("group_size", 128)
        keep, unknown = _keep_patterns(qc.get("modules_to_not_convert"))
        return _checked(scheme(f"gptq-int{bits}-g{group}", keep, "f16"), unknown, where)
    if method == "awq":
        bits, group = qc.get("bits", qc.get("w_bit", 4)), qc.get("group_size", qc.get("q_group_size", 128))
        keep, unknown = _keep_patterns(qc.get("modules_to_not_convert"))
        return _checked(scheme(f"awq-int{bits}-g{group}", keep, "f16"), unknown, where)
    if method == "fp8":  # transformers' FineGrainedFP8 (DeepSeek-V3): block scales
        block = qc.get("weight_block_size")
        keep, unknown = _keep_patterns(qc.get("modules_to_not_convert"))
        if block and list(block) != [128, 128]:
            fmt = dataclasses.replace(parse_format("fp8-block"), block=int(block[0]),
                                      name="fp8-block")
            if block[0] != block[1]:
                raise FormatError(f"{where}: weight_block_size {block} is not square")
            return Scheme("fp8-block", fmt, "blocks", "bf16", keep, notes=unknown)
        return _checked(scheme("fp8-block" if block else "fp8-channel", keep), unknown, where)
    if method == "bitsandbytes":
        if qc.get("load_in_8bit"):
            raise FormatError(f"{where}: bitsandbytes 8-bit checkpoints are not modelled")
        qt = qc.get("bnb_4bit_quant_type", "fp4")
        dq = qc.get("bnb_4bit_use_double_quant", False)
        keep, unknown = _keep_patterns(qc.get("llm_int8_skip_modules"))
        name = qt + ("" if dq else "-nodq")
        sch = scheme(name, keep + ("lm_head",))
        dense = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}.get(
            qc.get("bnb_4bit_compute_dtype"), "bf16")
        return _checked(dataclasses.replace(sch, dense=dense), unknown, where)
    if method == "mxfp4":
        keep, unknown = _keep_patterns(qc.get("modules_to_not_convert"))
        return _checked(scheme("mxfp4", keep), unknown, where)
    if method == "compressed-tensors":
        return _compressed_tensors(qc, where)
    raise FormatError(f"{where}: quant_method {method!r:.40} is not modelled; known: gptq, awq, "
                      "fp8, compressed-tensors, bitsandbytes, mxfp4")


def _checked(sch: Scheme, unknown, where) -> Scheme:
    return dataclasses.replace(sch, notes=tuple(
        f"{where}: module {u!r} left as given (not mapped to an op)" for u in unknown))


def _compressed_tensors(qc: dict, where: str) -> Scheme:
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        raise FormatError(f"{where}: compressed-tensors config has no config_groups")
    g = next(iter(groups.values()))
    w = g.get("weights") or {}
    t, bits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
    acts = g.get("input_activations") or {}
    keep, unknown = _keep_patterns(qc.get("ignore"))
    if t == "float" and bits == 8:
        if strategy == "tensor":
            name = "fp8" if acts and not acts.get("dynamic", False) else "fp8-dynamic"
        elif strategy == "channel":
            name = "fp8-channel"
        elif strategy == "block":
            name = "fp8-block"
        else:
            raise FormatError(f"{where}: fp8 strategy {strategy!r:.30} is not modelled")
        return _checked(scheme(name, keep), unknown, where)
    if t == "int" and bits == 8 and strategy == "channel":
        return _checked(scheme("int8", keep), unknown, where)
    if t == "int" and bits in (4, 8) and strategy == "group":
        # pack-quantized: weight_packed [d_out, d_in*bits/32] int32, scales per group
        if not w.get("symmetric", True):
            raise FormatError(f"{where}: asymmetric compressed-tensors int weights not modelled")
        group = w.get("group_size", 128)
        return _checked(scheme(f"ct-int{bits}-g{group}", keep), unknown, where)
    raise FormatError(f"{where}: compressed-tensors weights {t}/{bits}/{strategy} not modelled")


def scheme_from_config_file(path) -> tuple[Scheme | None, int]:
    """(the scheme of the file's quantization_config or None, num_nextn_predict_layers)."""
    from ..safeio import read_json
    raw = read_json(path, FormatError, infinity=True)  # a HF config.json (see safeio)
    if not isinstance(raw, dict):
        return None, 0
    mtp = raw.get("num_nextn_predict_layers") or 0
    mtp = mtp if isinstance(mtp, int) and not isinstance(mtp, bool) and 0 <= mtp <= 8 else 0
    qc = raw.get("quantization_config")
    return (scheme_from_quant_config(qc, str(path)) if qc is not None else None), mtp


def resolve(model, weights: str | None = None) -> tuple[Scheme | None, int]:
    """(scheme, mtp layers) for a model argument: ``--weights`` when given, else the
    quantization_config of the config.json the model names, or the one a ModelConfig was loaded
    from (its ``loaded_from``), or a preset's released format (its ``released_weights``: the
    quantization_config of the checkpoint it was released as); None: the precision's dtype."""
    import os
    from pathlib import Path
    if weights is not None:
        return scheme(weights), 0
    released = getattr(model, "released_weights", "")
    released_mtp = getattr(model, "released_mtp_layers", 0)
    model = getattr(model, "loaded_from", model) or None
    if not isinstance(model, (str, os.PathLike)):
        return (scheme(released) if released else None), released_mtp
    try:
        p = Path(model)
        if isinstance(model, str) and not p.exists() and "/" in model:  # a Hub id, once loaded
            from ..model.hub import cached_config, is_hub_id
            p = (is_hub_id(model) and cached_config(model)) or p
        if p.is_dir():
            p = p / "config.json"
        if not (str(p).endswith(".json") and p.is_file()):
            return _released(model)
    except (OSError, ValueError):
        return None, 0
    return scheme_from_config_file(p)


def _released(name) -> tuple[Scheme | None, int]:
    """(the released format or None, the multi-token-prediction modules its checkpoint
    stores) of a preset named ``name`` (``resolve`` given a name, not a ModelConfig)."""
    from ..model.presets import PRESETS
    key = name.strip().lower() if isinstance(name, str) else None
    cfg = PRESETS[key] if key in PRESETS else None
    if cfg is None:
        return None, 0
    return (scheme(cfg.released_weights) if cfg.released_weights else None,
            cfg.released_mtp_layers)


def compute_dtype(op: Op, peaks: dict[str, float], default: str = "bf16") -> str:
    """The tensor-core dtype an op's matmul runs in: fp8 / int8 where its format computes in
    it and the GPU has that peak; FP4 formats on the fp8 peak (the catalog has no FP4 column);
    everything else (weight-only formats, unquantised ops) in ``default``."""
    if op.weight_format is None or op.kind != "linear":
        return default
    want = op.weight_format.compute
    want = "fp8" if want == "fp4" else want
    return want if peaks.get(want, 0) > 0 else default


def is_weight_only(op: Op, peaks: dict[str, float]) -> bool:
    """A quantised Linear whose kernel dequantises its weights to 16 bits."""
    if op.weight_format is None or op.kind != "linear":
        return False
    want = op.weight_format.compute
    want = "fp8" if want == "fp4" else want
    return want == "bf16" or peaks.get(want, 0) <= 0
