"""ModelConfig: one frozen dataclass that describes any Transformer txcalc accounts for.

Dimension legend used in docstrings across txcalc (after the scaling book):

    B batch   S sequence   D d_model   F d_ff   H n_heads   K n_kv_heads   h head_dim
    V vocab   L layers     E experts   k top-k

Every field has a one-line docstring (the ``#:`` comment) that doubles as help text. Derived
values (``n_kv_heads`` and ``head_dim`` when left at 0) are resolved once in ``__post_init__``,
so every consumer reads plain integers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..errors import ConfigError

FAMILIES = ("decoder", "encoder", "encoder-decoder")
#: Activations of the MLP. Gated ones (GLU variants, Shazeer 2020) have two input projections.
GATED_ACTIVATIONS = ("swiglu", "geglu", "reglu", "geglu_tanh")
#: gelu_new is the tanh GELU written out elementwise (HF GPT-2): same math, more saved tensors.
PLAIN_ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "gelu_new", "silu", "relu2")
ACTIVATIONS = PLAIN_ACTIVATIONS + GATED_ACTIVATIONS
NORM_TYPES = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post", "sandwich", "post_sub")
POSITION_TYPES = ("learned", "sinusoidal", "rotary", "relative_bias", "alibi", "none")
QK_NORMS = ("none", "head", "full", "per_head", "l2")
#: lm: causal LM head; none: base model (pooler where set); mlm: masked-LM head (dense, norm,
#: vocabulary projection); seq_cls / token_cls: classifier on the first token / every token
HEADS = ("lm", "none", "mlm", "seq_cls", "token_cls")
#: heads whose output is a vocabulary-wide logit per token
VOCAB_HEADS = ("lm", "mlm")
SINUSOIDAL_TABLES = ("none", "param", "buffer")


@dataclass(frozen=True)
class ModelConfig:
    """A Transformer, encoder-only, decoder-only or encoder-decoder.

    For encoder-decoder models ``n_layers`` is the decoder depth and ``n_encoder_layers`` the
    encoder depth; both stacks share d_model, heads and MLP widths (as in T5 and BART).
    """

    name: str  #: display name (preset name or the config.json it came from)
    n_layers: int  #: L: Transformer blocks (decoder blocks for encoder-decoder models)
    d_model: int  #: D: width of the residual stream
    n_heads: int  #: H: query heads per attention layer
    vocab_size: int  #: V: rows of the token embedding
    d_ff: int = 0  #: F: hidden width of the dense MLP (0 = 4 * d_model)
    family: str = "decoder"  #: decoder | encoder | encoder-decoder
    n_encoder_layers: int = 0  #: encoder blocks (encoder-decoder only)
    n_kv_heads: int = 0  #: K: key/value heads (0 = n_heads: MHA; 1 = MQA; else GQA)
    head_dim: int = 0  #: h: width of one head (0 = d_model // n_heads)
    # --- attention -----------------------------------------------------------------------
    qkv_bias: bool = False  #: biases on the q/k/v projections
    out_bias: bool = False  #: bias on the attention output projection
    #: none | head (norm over h, Qwen3) | full (over H*h, OLMo2) | per_head (over h, a scale
    #: per head: Cohere) | l2 (over h, no scale, rotary layers only: Llama 4)
    qk_norm: str = "none"
    sliding_window: int = 0  #: window of local attention in tokens (0 = full attention)
    global_every: int = 0  #: with a window: every n-th layer attends globally (0 = none)
    #: with a window: only these layers slide (HF ``layer_types``; empty = per global_every)
    sliding_layers: tuple[int, ...] = ()
    parallel_block: bool = False  #: attention and MLP read the same input (GPT-J, NeoX, Falcon)
    parallel_norms: int = 1  #: norms feeding a parallel block: 1 shared (GPT-J) or 2 (NeoX)
    # --- multi-head latent attention (DeepSeek-V2/V3); active when kv_lora_rank > 0 ----------
    q_lora_rank: int = 0  #: rank of the low-rank query path (0 = full-rank q_proj)
    kv_lora_rank: int = 0  #: rank of the compressed KV latent (0 = no MLA)
    qk_nope_head_dim: int = 0  #: per-head query/key width without rotary
    qk_rope_head_dim: int = 0  #: per-head query/key width with rotary (key part shared by heads)
    v_head_dim: int = 0  #: per-head value width
    # --- MLP ---------------------------------------------------------------------------------
    activation: str = "gelu"  #: relu | gelu | gelu_tanh | silu | relu2 | swiglu | geglu | ...
    mlp_bias: bool = False  #: biases on the MLP projections
    # --- mixture of experts ------------------------------------------------------------------
    n_experts: int = 0  #: E: routed experts per MoE layer (0 = dense model)
    top_k: int = 0  #: k: routed experts per token
    moe_d_ff: int = 0  #: hidden width of one routed expert (0 = d_ff)
    n_shared_experts: int = 0  #: always-on experts (DeepSeek), fused into one MLP
    shared_d_ff: int = 0  #: hidden width of the fused shared MLP (0 = n_shared * moe_d_ff)
    shared_expert_gate: bool = False  #: sigmoid gate Linear(D, 1) on the shared MLP (Qwen2-MoE)
    first_k_dense: int = 0  #: the first k layers use the dense MLP (DeepSeek)
    moe_every: int = 1  #: layer i is MoE when (i + 1) % moe_every == 0 (Qwen2-MoE step)
    dense_layers: tuple[int, ...] = ()  #: layers forced dense (Qwen ``mlp_only_layers``)
    router_bias: bool = False  #: bias on the router Linear
    # --- norms -------------------------------------------------------------------------------
    norm_type: str = "layernorm"  #: layernorm | rmsnorm
    norm_bias: bool = True  #: LayerNorm has a bias (ignored for RMSNorm)
    norm_affine: bool = True  #: norms carry a learned scale (False: OLMo's parameter-free LN)
    #: pre | post (BERT, original) | sandwich (Gemma 2: pre and post) | post_sub (OLMo 2: a
    #: norm on each sub-block's output before the residual add, none on its input)
    norm_position: str = "pre"
    final_norm: bool = True  #: a norm after the last block of each stack
    embed_norm: bool = False  #: a norm right after the embeddings (BERT, BLOOM, BART)
    # --- embeddings, positions and head ------------------------------------------------------
    pos_type: str = "rotary"  #: learned | sinusoidal | rotary | relative_bias | alibi | none
    max_position: int = 2048  #: longest sequence; rows of a learned position table
    position_offset: int = 0  #: extra rows in a learned position table (OPT, BART: 2)
    relative_buckets: int = 32  #: buckets of the T5 relative-position bias
    type_vocab_size: int = 0  #: token-type (segment) embeddings, BERT: 2
    embed_dim: int = 0  #: width of the embedding if factorised (OPT-350m: 512; 0 = d_model)
    pooler: bool = False  #: BERT pooler: Linear(D, D) + tanh on the first token
    head: str = "lm"  #: lm: output projection to the vocabulary | none: base model
    tie_embeddings: bool = True  #: the output projection reuses the token embedding
    lm_head_bias: bool = False  #: bias on the output projection (GPT-J)
    # --- dropout (probabilities; masks are saved only when a Workload trains with dropout) ----
    embed_dropout: float = 0.0  #: on the embeddings' sum (GPT-2 embd_pdrop, BERT, T5)
    attn_dropout: float = 0.0  #: on the attention probabilities (S x S per head)
    resid_dropout: float = 0.0  #: on each sub-block's output before the residual add
    mlp_dropout: float = 0.0  #: inside the MLP, on the activation's output (T5, OPT, BART)
    final_dropout: float = 0.0  #: on each stack's final norm output (T5)
    # --- state-space and hybrid layers (issue 12: Mamba, Mamba-2 and the hybrids) ------------
    #: per decoder layer, its token mixer: attention | mamba | mamba2 | hybrid (attention and
    #: Mamba-2 side by side on one norm, Falcon-H1) | conv (LFM2's gated short convolution,
    #: kernel ssm_conv, bias ssm_bias) | gdn (Gated DeltaNet linear attention, Qwen3-Next:
    #: ssm_heads value heads of ssm_head_dim, ssm_groups key heads of ssm_state, chunk
    #: ssm_chunk) | rglru (Griffin's recurrent block: ssm_d_inner wide, gates in ssm_heads
    #: blocks, conv ssm_conv) | none (an FFN-only layer, Nemotron-H); empty = attention in
    #: every layer
    mixers: tuple[str, ...] = ()
    #: per decoder layer, its FFN: mlp | moe | none (a mixer-only layer); empty = by the MoE
    #: fields (``is_moe_layer``)
    ffns: tuple[str, ...] = ()
    ssm_d_inner: int = 0  #: Mamba inner width (expand * D; Mamba-2: ssm_heads * ssm_head_dim)
    ssm_state: int = 0  #: N: SSM state per channel (Mamba) or per head and group (Mamba-2)
    ssm_conv: int = 4  #: kernel of the depthwise causal conv1d
    ssm_dt_rank: int = 0  #: Mamba: rank of the dt projection (x_proj -> dt_proj)
    ssm_heads: int = 0  #: Mamba-2 heads (one dt, A and D per head)
    ssm_head_dim: int = 0  #: P: Mamba-2 head width
    ssm_groups: int = 1  #: Mamba-2 groups sharing B and C
    ssm_chunk: int = 256  #: Q: Mamba-2 chunk length of the SSD algorithm (sets its matmul FLOPs)
    ssm_conv_bias: bool = True  #: bias on the conv1d
    ssm_bias: bool = False  #: bias on in_proj
    ssm_out_bias: bool = False  #: bias on out_proj (Falcon-H1 ``projectors_bias``)
    ssm_dt_norms: bool = False  #: RMSNorms on dt, B and C after x_proj (Jamba)
    ssm_gated_norm: bool = True  #: Mamba-2: gated RMSNorm before out_proj (Falcon-H1 can drop it)
    #: a sigmoid gate on the attention output, from a second half of q_proj (Qwen3-Next's
    #: gated attention: q_proj D -> 2 H h, o_proj reads core * sigmoid(gate))
    attn_out_gate: bool = False
    #: Gated DeltaNet input projections as four Linears (Qwen3.5: in_proj_qkv, in_proj_z,
    #: in_proj_b, in_proj_a) instead of two (Qwen3-Next: in_proj_qkvz, in_proj_ba)
    gdn_split_proj: bool = False
    # --- Zamba's shared attention blocks and Griffin's RG-LRU (issue 12, txcalc/engine/mixers.py) ----
    #: layers that run a shared attention block (attention + MLP on the concatenation of the
    #: hidden state and the original embeddings, then a per-layer Linear) before their mixer
    shared_attn_layers: tuple[int, ...] = ()
    #: distinct shared blocks: the j-th use runs block j % shared_attn_blocks (Zamba2
    #: ``num_mem_blocks``); each block's parameters are counted once, at its first use
    shared_attn_blocks: int = 1
    #: rank of the per-use LoRA adapters of a shared block's MLP (Zamba2; 0 = none)
    shared_adapter_rank: int = 0
    shared_qkv_adapters: bool = False  #: per-use adapters on q, k and v too (Zamba2)
    #: False: every use holds its own copy of its block (HF unties Zamba's shared blocks with
    #: tie_word_embeddings false), the adapters of the other uses of that block included
    shared_attn_tied: bool = True
    # --- structures of issue 12 part 1 (Gemma 3, Llama 4, gpt-oss, OLMo 2/3, EXAONE 4, Cohere) -----
    nope_layers: tuple[int, ...] = ()  #: layers without rotary positions (Llama 4 NoPE layers)
    attn_sinks: bool = False  #: a learned sink logit per head in every softmax (gpt-oss)
    expert_bias: bool = False  #: biases on the routed experts' projections (gpt-oss)
    attn_chunk: int = 0  #: chunked attention: a token attends within its chunk (Llama 4)
    #: with attn_chunk: the layers that attend in chunks (HF ``layer_types``)
    chunked_layers: tuple[int, ...] = ()
    # --- encoder variants, encoder heads and unequal encoder-decoder stacks (issue 13) -----
    n_labels: int = 2  #: classes of a seq_cls / token_cls head
    #: seq_cls without pooler: a Linear(D, D) + activation on the first token before the
    #: classifier (RoBERTa/ELECTRA/MPNet classification head, DistilBERT pre_classifier);
    #: token_cls: the same on every token (ModernBERT's head)
    cls_dense: bool = False
    head_norm: bool = False  #: classifier's dense is followed by a norm (ModernBERT's head)
    head_dense_bias: bool = True  #: bias on a head's dense (ModernBERT ``classifier_bias``)
    #: ALBERT / ELECTRA: position and token-type tables and the embedding norm at embed_dim,
    #: then Linear(embed_dim, D) with a bias (``embed.proj_in``) after the norm
    embed_factorised: bool = False
    #: ALBERT ``num_hidden_groups``: 0 = every block owns its parameters; n > 0: block i uses
    #: group i * n // L, whose parameters are counted once (at its first block)
    shared_groups: int = 0
    extra_rel_bias: bool = False  #: MPNet: one relative-bias table per stack besides pos_type
    rel_bias_every_layer: bool = False  #: UMT5: each block owns its relative-bias table
    first_attn_norm: bool = True  #: False: block 0 has no attention norm (ModernBERT)
    #: sinusoidal positions: none (computed), param (an nn.Embedding table per stack, frozen:
    #: Marian, Pegasus) or buffer (M2M-100/NLLB: no parameters); rows max_position + offset
    sinusoidal_table: str = "none"
    #: ESM: Linear(L*H, 1) over the attention maps; built, run only when contacts are asked
    #: for: parameters, no FLOPs in a training step
    contact_head: bool = False
    #: Whisper: mel bins read by the encoder's convolutional stem (conv1: mels -> D, kernel 3;
    #: conv2: D -> D, kernel 3, stride 2; 0 = the encoder reads tokens); the encoder's position
    #: table is then frozen and has encoder_max_position rows
    audio_mels: int = 0
    encoder_max_position: int = 0  #: rows of the encoder's position table (0 = max_position)
    k_proj_bias: bool = True  #: False: k_proj has no bias even with qkv_bias (Whisper)
    #: DeBERTa-v2/v3 disentangled attention (He et al. 2020, arXiv:2006.03654): each block
    #: scores against 2 x rel_span relative-position embeddings (position_buckets, else
    #: max_relative_positions; 0 = none), content->position (c2p) and/or position->content
    rel_span: int = 0
    rel_c2p: bool = False  #: content->position scores: q against the projected positions
    rel_p2c: bool = False  #: position->content scores: k against the projected positions
    rel_share_key: bool = True  #: positions projected by q_proj/k_proj (else own, biased)
    rel_norm: bool = False  #: a LayerNorm on the relative embeddings (``norm_rel_ebd``)
    #: DeBERTa v3: relative positions log-bucketed into rel_span buckets up to this distance
    #: (``max_relative_positions``; 0 = not bucketed); changes values, not costs
    rel_max_position: int = 0
    #: Longformer (Beltagy et al. 2020, arXiv:2004.05150): the local window (sliding_window
    #: keys either side) runs as HF's overlapping chunks (executed FLOPs: ``Op.pairs``)
    sliding_chunks: bool = False
    #: Longformer: separate global q/k/v projections per block, run only for global tokens
    #: (none here: the base model's, masked LM's and token classifier's default)
    global_qkv: bool = False
    #: where resid_dropout applies: after both sub-blocks, only after the attention output
    #: ("attn": ALBERT, ModernBERT) or only after the MLP ("mlp": DistilBERT)
    resid_dropout_at: str = "both"
    encoder_n_heads: int = 0  #: query (= key/value) heads of the encoder stack (0 = n_heads)
    encoder_d_ff: int = 0  #: MLP width of the encoder stack (0 = d_ff)
    #: an encoder-decoder's decoder alone (WhisperForCausalLM): no encoder stack; its
    #: cross-attention reads ``src_seq`` rows of encoder states given as an input that needs
    #: no gradient (n_encoder_layers 0)
    encoder_states_given: bool = False
    # --- multimodal configs (issue 12 item 3) -------------------------------------------------
    #: parameters of the vision tower and projector of a vision-language model (one params-only
    #: op: weights, gradients, optimizer states; its FLOPs and activations are not modelled)
    vision_params: int = 0
    #: language-model tokens one image becomes (0: the config implies no fixed count, as for
    #: Qwen-VL's dynamic resolution; see hf._vision_parts for the rule per family)
    image_tokens: int = 0
    #: dynamic resolution (Qwen-VL): pixels per LM token side (patch_size x spatial_merge_size);
    #: an image of side P becomes round(P / this)^2 tokens (image_tokens is 0)
    image_token_px: int = 0
    #: Mllama (Llama 3.2 Vision): decoder blocks that are gated cross-attention blocks instead
    #: of self-attention ones (components.gated_cross_block): keys and values from src_seq rows
    #: of vision states given as input, q/k RMSNorm per head, tanh-gated residuals
    cross_layers: tuple[int, ...] = ()
    #: Mllama: vision-state rows one image gives the cross-attention layers (max_num_tiles x
    #: (patches + 1)); its prompt holds one <|image|> token per image (image_tokens 1)
    image_states: int = 0
    embed_extra_rows: int = 0  #: token-table rows beyond vocab_size, not in lm_head (Mllama: 8)
    #: LLaVA-NeXT anyres: the (height, width) resolutions an image is tiled to
    #: (``image_grid_pinpoints``); each tile is image_tile_px square, image_token_px per token
    image_grid: tuple[tuple[int, int], ...] = ()
    image_tile_px: int = 0  #: LLaVA-NeXT: side of one tile (the vision tower's image_size)
    #: Qwen-VL: the image processor's clamp on an image's pixels after resizing to whole
    #: merged patches (Qwen2VLImageProcessor's min_pixels and max_pixels; 0 = no clamp)
    image_min_px: int = 0
    image_max_px: int = 0
    # --- Gemma 3n's text part (issue 12; components.gemma3n_block) ---------------------------
    altup_inputs: int = 0  #: AltUp: copies of the residual stream (Gemma 3n: 4; 0 = no AltUp)
    laurel_rank: int = 0  #: LAuReL: rank of each block's low-rank residual branch (0 = none)
    per_layer_dim: int = 0  #: per-layer embeddings: width each block reads per token (0 = none)
    per_layer_vocab: int = 0  #: rows of the per-layer embedding table
    #: layers that reuse the keys and values of an earlier layer of the same kind (Gemma 3n's
    #: KV sharing): no k/v projections, no KV cache of their own
    kv_shared_layers: tuple[int, ...] = ()
    layer_d_ff: tuple[int, ...] = ()  #: MLP width of each layer (empty: d_ff in every layer)
    #: activation sparsity per layer (Gemma 3n's ``activation_sparsity_pattern``: the target
    #: fraction of the MLP gate's activations that its Gaussian top-k zeroes; 0 = dense, empty
    #: = none in any layer): the matmuls stay dense, the cutoff's statistics are saved
    act_sparsity: tuple[float, ...] = ()
    source: str = field(default="", compare=False)  #: where the numbers came from
    #: the HF class its config.json names (``architectures[0]``: vLLM's model-registry key,
    #: which picks serving.kv_capacity's MLP live set); "" unknown (a preset without one)
    hf_architecture: str = ""
    #: the config.json path or Hub id ``txcalc.load`` read this config from ("" for a preset
    #: or a built config): its quantization_config and architectures are the file's, not
    #: fields; serving reads them there (formats.resolve, serve.kv.hf_architecture)
    loaded_from: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        # Derived values are resolved once, before validation, so that errors name real numbers.
        if self.n_kv_heads == 0 and _is_int(self.n_heads):
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if (
            self.head_dim == 0
            and _is_int(self.d_model)
            and _is_int(self.n_heads)
            and self.n_heads > 0
        ):
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        if self.d_ff == 0 and _is_int(self.d_model):
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if self.moe_d_ff == 0 and self.n_experts:
            object.__setattr__(self, "moe_d_ff", self.d_ff)
        if self.shared_d_ff == 0 and self.n_shared_experts and _is_int(self.n_shared_experts):
            object.__setattr__(self, "shared_d_ff", self.n_shared_experts * self.moe_d_ff)
        if self.embed_dim == 0 and _is_int(self.d_model):
            object.__setattr__(self, "embed_dim", self.d_model)
        if self.encoder_n_heads == 0 and _is_int(self.n_heads):
            object.__setattr__(self, "encoder_n_heads", self.n_heads)
        if self.encoder_max_position == 0 and _is_int(self.max_position):
            object.__setattr__(self, "encoder_max_position", self.max_position)
        if self.encoder_d_ff == 0 and _is_int(self.d_ff):
            object.__setattr__(self, "encoder_d_ff", self.d_ff)
        validate(self)

    # --- derived views -------------------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    @property
    def q_dim(self) -> int:
        """Width of all query heads together (H*h; MLA: H*(nope+rope))."""
        if self.is_mla:
            return self.n_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key (or value) heads together: K*h."""
        return self.n_kv_heads * self.head_dim

    @property
    def stacks(self) -> tuple[tuple[str, int], ...]:
        """(stack name, depth) in forward order; the stack name prefixes op paths."""
        if self.family == "encoder-decoder" and self.encoder_states_given:
            return (("decoder", self.n_layers),)
        if self.family == "encoder-decoder":
            return (("encoder", self.n_encoder_layers), ("decoder", self.n_layers))
        return (("", self.n_layers),)

    def mixer(self, layer: int) -> str:
        """Token mixer of decoder block ``layer``: attention unless ``mixers`` says otherwise."""
        return self.mixers[layer] if self.mixers else "attention"

    def ffn(self, layer: int) -> str:
        """FFN of decoder block ``layer``: mlp, moe or none."""
        if self.ffns:
            return self.ffns[layer]
        return "moe" if self.is_moe_layer(layer) else "mlp"

    def has_attention(self, layer: int) -> bool:
        """Whether decoder block ``layer`` attends (and so keeps a KV cache)."""
        return self.mixer(layer) in ("attention", "hybrid") or layer in self.shared_attn_layers
    # --- per-stack views (an encoder-decoder's stacks may differ in heads and MLP width) ----
    def stack_heads(self, stack: str) -> int:
        """Query heads of a block of ``stack`` (the encoder's own count, else n_heads)."""
        return self.encoder_n_heads if stack == "encoder" else self.n_heads

    def stack_kv_heads(self, stack: str) -> int:
        """Key/value heads of ``stack``: an encoder with its own head count has as many KV
        heads (BART variants: no grouped KV); otherwise n_kv_heads."""
        if stack == "encoder" and self.encoder_n_heads != self.n_heads:
            return self.encoder_n_heads
        return self.n_kv_heads

    def stack_head_dim(self, stack: str) -> int:
        """Head width of ``stack``: head_dim, or d_model // heads for an encoder whose head
        count differs from the decoder's (BART variants)."""
        if stack == "encoder" and self.encoder_n_heads != self.n_heads:
            return self.d_model // self.encoder_n_heads
        return self.head_dim

    def stack_max_position(self, stack: str) -> int:
        return self.encoder_max_position if stack == "encoder" else self.max_position

    def stack_d_ff(self, stack: str) -> int:
        return self.encoder_d_ff if stack == "encoder" else self.d_ff

    def owns_params(self, layer: int) -> bool:
        """Whether block ``layer`` holds its own parameters (ALBERT: only the first block of
        each shared group does; the others reuse them)."""
        if not self.shared_groups:
            return True
        group = layer * self.shared_groups // self.n_layers
        return layer == 0 or (layer - 1) * self.shared_groups // self.n_layers != group

    def is_moe_layer(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) of the decoder stack uses the MoE MLP."""
        if self.ffns:
            return self.is_moe and self.ffns[layer] == "moe"
        return (
            self.is_moe
            and layer >= self.first_k_dense
            and layer not in self.dense_layers
            and (layer + 1) % self.moe_every == 0
        )

    def layer_ffn_width(self, layer: int) -> int:
        """MLP width of decoder block ``layer`` (Gemma 3n's per-layer widths, else d_ff)."""
        return self.layer_d_ff[layer] if self.layer_d_ff else self.d_ff

    def image_seq_tokens(self, images: int, side: int = 0) -> int:
        """Language-model tokens of ``images`` images (of ``side`` pixels, square, where the
        family's count depends on it): the rule per family is in hf._vision_parts."""
        from ..errors import WorkloadError
        if images and not self.vision_params:
            raise WorkloadError(f"--images ({images}): {self.name} has no vision tower (a "
                                "vision-language config.json has one)")
        if self.image_grid or self.image_max_px:
            if images and side <= 0:
                raise WorkloadError(f"--images ({images}): {self.name} sizes images by their "
                                    "resolution (LLaVA-NeXT's anyres tiles, Qwen-VL's dynamic "
                                    "resolution); give --image-size PX")
            return images * self.image_hw_tokens(side, side) if images else 0
        if self.image_tokens:
            return images * self.image_tokens
        if images and side <= 0:
            raise WorkloadError(f"--images ({images}): {self.name} sizes images dynamically "
                                f"(Qwen-VL: one token per {self.image_token_px} x "
                                f"{self.image_token_px} pixels); give --image-size PX")
        return images * max(1, round(side / self.image_token_px)) ** 2 if images else 0

    def image_hw_tokens(self, height: int, width: int) -> int:
        """Language-model tokens of one height x width image, as HF's processors count them.

        LLaVA-NeXT (``LlavaNextProcessor._get_number_of_features``): the base image
        (``image_tokens``), then the anyres tiles: the grid resolution that keeps most of the
        image and wastes least (``select_best_resolution``) gives a grid of tile patches, less
        the rows or columns of padding the image's aspect ratio leaves, plus one newline token
        per row. Qwen-VL (``Qwen2VLImageProcessor``'s ``smart_resize``, factor f = patch x
        merge = ``image_token_px``): each side rounded to f; an area over max_pixels or under
        min_pixels rescaled into the range (floor / ceil to f); one token per f x f pixels."""
        if self.image_grid:
            return self.image_tokens + _anyres_tokens(height, width, self.image_grid,
                                                      self.image_tile_px, self.image_token_px)
        f = self.image_token_px
        h, w = round(height / f) * f, round(width / f) * f
        if self.image_max_px and h * w > self.image_max_px:
            beta = math.sqrt(height * width / self.image_max_px)
            h, w = (max(f, math.floor(x / beta / f) * f) for x in (height, width))
        elif h * w < self.image_min_px:
            beta = math.sqrt(self.image_min_px / (height * width))
            h, w = (math.ceil(x * beta / f) * f for x in (height, width))
        return (h // f) * (w // f)

    def window(self, layer: int) -> int:
        """Attention window of block ``layer`` in tokens (0 = full attention)."""
        if not self.sliding_window:
            return 0
        if self.sliding_layers:
            return self.sliding_window if layer in self.sliding_layers else 0
        if self.global_every and (layer + 1) % self.global_every == 0:
            return 0
        return self.sliding_window

    def chunk(self, layer: int) -> int:
        """Attention chunk of block ``layer`` in tokens (0 = none): a query attends to the
        earlier keys of its own chunk of ``attn_chunk`` positions (Llama 4)."""
        return self.attn_chunk if layer in self.chunked_layers else 0

    def rotary(self, layer: int) -> bool:
        """Whether block ``layer`` applies rotary positions (not on NoPE layers, nor on a
        layer that does not attend: a state-space mixer)."""
        return (self.pos_type == "rotary" and layer not in self.nope_layers
                and self.has_attention(layer) and layer not in self.cross_layers)

    def qk_norm_at(self, layer: int) -> str:
        """The q/k norm of block ``layer``: Llama 4's L2 norm runs on rotary layers only."""
        if self.qk_norm == "l2" and not self.rotary(layer):
            return "none"
        return self.qk_norm

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (validated again).

        A derived field that still holds its derived value (head_dim = d_model // n_heads,
        embed_dim = d_model, ...) is derived again from the changed fields unless it is
        changed itself: ``replace(d_model=256)`` must not keep a 4096-wide embedding."""
        unknown = sorted(k for k in changes if k not in self.__dataclass_fields__)
        if unknown:
            from ..inputs import show
            raise ConfigError(f"replace(): unknown ModelConfig field(s) "
                              f"{', '.join(show(k) for k in unknown)}")
        rederive = {
            "n_kv_heads": self.n_kv_heads == self.n_heads,
            "head_dim": self.n_heads > 0 and self.head_dim == self.d_model // self.n_heads,
            "d_ff": self.d_ff == 4 * self.d_model,
            "moe_d_ff": bool(self.n_experts) and self.moe_d_ff == self.d_ff,
            "shared_d_ff": bool(self.n_shared_experts)
            and self.shared_d_ff == self.n_shared_experts * self.moe_d_ff,
            "embed_dim": self.embed_dim == self.d_model,
            "encoder_n_heads": self.encoder_n_heads == self.n_heads,
            "encoder_d_ff": self.encoder_d_ff == self.d_ff,
            "encoder_max_position": self.encoder_max_position == self.max_position,
        }
        resets = {k: 0 for k, derived in rederive.items() if derived and k not in changes}
        return dataclasses.replace(self, **(resets | changes))


def _anyres_tokens(height: int, width: int, grid, tile: int, patch: int) -> int:
    """LLaVA-NeXT's anyres tokens besides the base image (HF ``select_best_resolution`` and
    ``LlavaNextProcessor._get_unpadded_features``): unpadded tile patches + one per row."""
    best, most, waste = None, 0, float("inf")
    for gh, gw in grid:
        scale = min(gw / width, gh / height)
        kept = min(int(width * scale) * int(height * scale), width * height)
        if kept > most or (kept == most and gh * gw - kept < waste):
            best, most, waste = (gh, gw), kept, gh * gw - kept
    rows, cols = (best[0] // tile) * (tile // patch), (best[1] // tile) * (tile // patch)
    if width / height > cols / rows:
        pad = (rows - int(round(height * (cols / width), 7))) // 2
        rows -= 2 * pad
    else:
        pad = (cols - int(round(width * (rows / height), 7))) // 2
        cols -= 2 * pad
    return rows * cols + rows


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _show(v) -> str:
    """A value for an error message: huge integers as a power of ten, long reprs truncated."""
    if _is_int(v) and abs(v) >= 10**15:
        bits = abs(v).bit_length()  # str() of more than 4,300 digits raises: estimate those
        digits = len(str(abs(v))) if bits < 14000 else int(bits * 0.30103) + 1
        return f"{'-' if v < 0 else ''}about 10^{digits - 1}"
    if isinstance(v, float) and not math.isfinite(v):  # as the JSON file spells it
        return "NaN" if v != v else ("-Infinity" if v < 0 else "Infinity")
    text = repr(v)
    return text if len(text) <= 80 else text[:80] + "..."


_INT_FIELDS_POSITIVE = ("n_layers", "d_model", "n_heads", "vocab_size", "d_ff", "n_kv_heads",
                        "head_dim", "embed_dim", "max_position", "moe_every")
_INT_FIELDS_NONNEG = ("n_encoder_layers", "sliding_window", "global_every", "q_lora_rank",
                      "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                      "n_experts", "top_k", "moe_d_ff", "n_shared_experts", "shared_d_ff",
                      "first_k_dense", "position_offset", "relative_buckets", "type_vocab_size",
                      "attn_chunk", "shared_groups", "audio_mels", "rel_span", "vision_params",
                      "image_tokens", "image_token_px", "image_states", "embed_extra_rows",
                      "altup_inputs", "laurel_rank", "per_layer_dim", "per_layer_vocab",
                      "image_tile_px", "image_min_px", "image_max_px")
_INT_FIELDS_POSITIVE += ("n_labels", "encoder_n_heads", "encoder_d_ff", "encoder_max_position")
_BOOL_FIELDS = ("qkv_bias", "out_bias", "parallel_block", "mlp_bias", "shared_expert_gate",
                "router_bias", "norm_bias", "norm_affine", "final_norm", "embed_norm", "pooler",
                "tie_embeddings", "lm_head_bias", "attn_sinks", "expert_bias", "cls_dense", "head_norm",
                "head_dense_bias", "embed_factorised", "extra_rel_bias", "contact_head",
                "k_proj_bias", "rel_c2p", "rel_p2c", "rel_share_key", "rel_norm",
                "encoder_states_given",
                "rel_bias_every_layer", "first_attn_norm")
_INT_FIELDS_NONNEG += ("rel_max_position",)  # DeBERTa v3 (issue 13, part 2)
_BOOL_FIELDS += ("sliding_chunks", "global_qkv")  # Longformer
_DROPOUT_FIELDS = ("embed_dropout", "attn_dropout", "resid_dropout", "mlp_dropout",
                   "final_dropout")
_CHOICES = {"family": FAMILIES, "activation": ACTIVATIONS, "norm_type": NORM_TYPES,
            "norm_position": NORM_POSITIONS, "pos_type": POSITION_TYPES, "qk_norm": QK_NORMS,
            "head": HEADS, "sinusoidal_table": SINUSOIDAL_TABLES}


#: Upper bounds on config fields. Generous for real models (10-100x the largest published
#: ones: Llama 3.1 405B has 126 layers, d_model 16384, d_ff 53248; DeepSeek-V3 256 experts;
#: Gemma 3 a 262,144-token vocabulary; Llama 4 Scout a 10M context), and tight enough that
#: every answer comes in seconds and every product the planner forms in int64 stays exact.
MAX_LAYERS = 2**11  #: per stack (DeepNet trained 1,000 layers); 2,048 layers answer in seconds
MAX_WIDTH = 2**20  #: d_model, d_ff, head_dim, embed_dim, expert widths, MLA ranks
MAX_HEADS = 2**16  #: query and key/value heads
MAX_VOCAB = 2**24  #: vocab_size (16.8M tokens)
MAX_POSITION = 2**26  #: max_position, sliding_window, position tables (67M tokens)
MAX_EXPERTS = 2**16  #: routed and shared experts, top_k
MAX_SMALL = 2**16  #: relative_buckets, type_vocab_size, position_offset, moe/global steps
#: layers x d_model x the widest layer (MLP: max(d_ff, experts x expert width + shared width);
#: attention: q/kv widths) bounds the parameter count from above; 2^50 (1.1e15) is ~2,000x
#: DeepSeek-V3's 2.4e11, and keeps bytes x parallel degrees far inside int64 (9.2e18)
MAX_SIZE = 2**50
NAME_MAX = 256  #: characters of a config's display name
_BOUNDS = {
    **{k: MAX_LAYERS for k in ("n_layers", "n_encoder_layers", "first_k_dense")},
    "shared_groups": MAX_LAYERS, "n_labels": MAX_VOCAB, "encoder_n_heads": MAX_HEADS,
    "encoder_d_ff": MAX_WIDTH, "audio_mels": MAX_WIDTH, "rel_span": MAX_POSITION, "encoder_max_position": MAX_POSITION,
    "vision_params": MAX_SIZE, "image_tokens": MAX_POSITION, "image_token_px": MAX_WIDTH,
    "image_states": MAX_POSITION, "embed_extra_rows": MAX_SMALL, "altup_inputs": MAX_SMALL,
    "laurel_rank": MAX_WIDTH, "per_layer_dim": MAX_WIDTH, "per_layer_vocab": MAX_VOCAB,
    "image_tile_px": MAX_WIDTH, "image_min_px": MAX_SIZE, "image_max_px": MAX_SIZE,
    **{k: MAX_WIDTH for k in ("d_model", "d_ff", "head_dim", "embed_dim", "moe_d_ff",
                              "shared_d_ff", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                              "qk_rope_head_dim", "v_head_dim")},
    **{k: MAX_HEADS for k in ("n_heads", "n_kv_heads")},
    "vocab_size": MAX_VOCAB, "max_position": MAX_POSITION, "sliding_window": MAX_POSITION,
    "attn_chunk": MAX_POSITION,
    **{k: MAX_EXPERTS for k in ("n_experts", "top_k", "n_shared_experts")},
    **{k: MAX_SMALL for k in ("relative_buckets", "type_vocab_size", "position_offset",
                              "moe_every", "global_every")},
}
_BOUNDS["rel_max_position"] = MAX_POSITION  # DeBERTa v3


def _size_problems(cfg: ModelConfig) -> list[str]:
    """Fields each in range can still multiply into an absurd model: bound the products."""
    layers = cfg.n_layers + cfg.n_encoder_layers
    mlp = max(cfg.d_ff, cfg.n_experts * cfg.moe_d_ff + cfg.shared_d_ff)
    attn = max(cfg.n_heads * max(cfg.head_dim, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim,
                                 cfg.v_head_dim), cfg.kv_lora_rank, cfg.q_lora_rank)
    out = []
    size = layers * max(cfg.d_model, cfg.embed_dim) * max(mlp, attn)
    if size > MAX_SIZE:
        out.append(f"layers ({layers}) x d_model ({cfg.d_model}) x widest layer "
                   f"({max(mlp, attn)}) = {size:.3g} exceeds txcalc's bound of {MAX_SIZE:.3g} "
                   "(~2,000x the largest published model)")
    table = cfg.vocab_size * max(cfg.d_model, cfg.embed_dim)
    if table > MAX_SIZE:
        out.append(f"vocab_size ({cfg.vocab_size}) x d_model ({cfg.d_model}) = {table:.3g} "
                   f"exceeds txcalc's bound of {MAX_SIZE:.3g}")
    return out


MIXERS = ("attention", "mamba", "mamba2", "hybrid", "conv", "gdn", "rglru", "none")
FFNS = ("mlp", "moe", "none")


#: SSM fields: (smallest, largest) value
_SSM_INTS = {"ssm_d_inner": (0, MAX_WIDTH), "ssm_state": (0, MAX_WIDTH),
             "ssm_dt_rank": (0, MAX_WIDTH), "ssm_head_dim": (0, MAX_WIDTH),
             "ssm_heads": (0, MAX_HEADS), "ssm_groups": (1, MAX_HEADS),
             "ssm_chunk": (1, MAX_WIDTH), "ssm_conv": (1, MAX_SMALL)}
_SSM_BOOLS = ("ssm_conv_bias", "ssm_bias", "ssm_out_bias", "ssm_dt_norms", "ssm_gated_norm",
              "attn_out_gate", "gdn_split_proj", "shared_qkv_adapters", "shared_attn_tied")


def _hybrid_problems(cfg: ModelConfig) -> list[str]:
    """Per-layer mixers and FFNs, the SSM fields, and the sizes the mixers they name need."""
    out = []
    for name, (lo, hi) in _SSM_INTS.items():
        v = getattr(cfg, name)
        if not _is_int(v) or not lo <= v <= hi:
            out.append(f"{name} ({_show(v)}) must be an integer from {lo} to {hi:,}")
    out += [f"{name} ({getattr(cfg, name)!r}) must be true or false" for name in _SSM_BOOLS
            if not isinstance(getattr(cfg, name), bool)]
    if out:
        return out
    widest = 2 * cfg.ssm_d_inner + 2 * cfg.ssm_groups * cfg.ssm_state + cfg.ssm_heads
    if cfg.mixers and cfg.n_layers * cfg.d_model * widest > MAX_SIZE:
        out.append(f"layers ({cfg.n_layers}) x d_model ({cfg.d_model}) x Mamba width "
                   f"({widest}) exceeds txcalc's bound of {MAX_SIZE:.3g}")
    for name, choices in (("mixers", MIXERS), ("ffns", FFNS)):
        v = getattr(cfg, name)
        if not isinstance(v, tuple) or not all(isinstance(x, str) and x in choices for x in v):
            out.append(f"{name} ({_show(v)}) must be a tuple of {' | '.join(choices)}")
        elif v and len(v) != cfg.n_layers:
            out.append(f"{name} lists {len(v)} layers, not n_layers ({cfg.n_layers})")
        elif v and cfg.family != "decoder":
            out.append(f"{name} are for decoder models, not family {cfg.family!r}")
    if out:
        return out
    kinds = set(cfg.mixers)
    if "moe" in cfg.ffns and not cfg.is_moe:
        out.append("ffns name a moe layer but n_experts is 0")
    if kinds & {"mamba", "mamba2", "hybrid"}:
        for name in ("ssm_d_inner", "ssm_state"):
            if getattr(cfg, name) <= 0:
                out.append(f"{name} ({getattr(cfg, name)}) must be positive for Mamba layers")
    if "mamba" in kinds and cfg.ssm_dt_rank <= 0:
        out.append(f"ssm_dt_rank ({cfg.ssm_dt_rank}) must be positive for Mamba layers")
    if "gdn" in kinds:
        for name in ("ssm_heads", "ssm_head_dim", "ssm_state", "ssm_groups"):
            if getattr(cfg, name) <= 0:
                out.append(f"{name} ({getattr(cfg, name)}) must be positive for Gated "
                           "DeltaNet layers")
        if cfg.ssm_heads % cfg.ssm_groups:
            out.append(f"ssm_heads ({cfg.ssm_heads}: value heads) must be divisible by "
                       f"ssm_groups ({cfg.ssm_groups}: key heads) for Gated DeltaNet layers")
        elif cfg.ssm_heads * cfg.ssm_head_dim != cfg.ssm_d_inner:
            out.append(f"ssm_heads ({cfg.ssm_heads}) x ssm_head_dim ({cfg.ssm_head_dim}) must "
                       f"equal ssm_d_inner ({cfg.ssm_d_inner}) for Gated DeltaNet layers")
    if kinds & {"mamba2", "hybrid"}:
        if cfg.ssm_heads * cfg.ssm_head_dim != cfg.ssm_d_inner:
            out.append(f"ssm_heads ({cfg.ssm_heads}) x ssm_head_dim ({cfg.ssm_head_dim}) must "
                       f"equal ssm_d_inner ({cfg.ssm_d_inner}) for Mamba-2 layers")
        elif cfg.ssm_heads % cfg.ssm_groups or cfg.ssm_d_inner % cfg.ssm_groups:
            out.append(f"ssm_heads ({cfg.ssm_heads}) must be divisible by ssm_groups "
                       f"({cfg.ssm_groups})")
    return out + _shared_block_problems(cfg)


def _shared_block_problems(cfg: ModelConfig) -> list[str]:
    """Zamba's shared attention blocks and Griffin's RG-LRU layers."""
    out = []
    v = cfg.shared_attn_layers
    if not isinstance(v, tuple) or not all(_is_int(i) and 0 <= i < cfg.n_layers for i in v) \
            or list(v) != sorted(set(v)):
        return [f"shared_attn_layers ({_show(v)}) must be increasing layer indices below "
                f"n_layers ({cfg.n_layers})"]
    for name, lo in (("shared_attn_blocks", 1), ("shared_adapter_rank", 0)):
        x = getattr(cfg, name)
        if not _is_int(x) or not lo <= x <= MAX_WIDTH:
            out.append(f"{name} ({_show(x)}) must be an integer from {lo} to {MAX_WIDTH:,}")
    if v and not cfg.mixers:
        out.append("shared_attn_layers need per-layer mixers")
    if cfg.shared_qkv_adapters and not cfg.shared_adapter_rank:
        out.append("shared_qkv_adapters needs a shared_adapter_rank")
    if cfg.shared_qkv_adapters and cfg.n_heads * cfg.head_dim != 2 * cfg.d_model:
        out.append(f"shared_qkv_adapters add a 2 x d_model ({2 * cfg.d_model}) output to q: "
                   f"n_heads ({cfg.n_heads}) x head_dim ({cfg.head_dim}) must equal it")
    if cfg.shared_qkv_adapters and cfg.n_kv_heads != cfg.n_heads:
        out.append(f"shared_qkv_adapters add a 2 x d_model output to k and v: n_kv_heads "
                   f"({cfg.n_kv_heads}) must equal n_heads ({cfg.n_heads})")
    if "rglru" in cfg.mixers and (cfg.ssm_heads <= 0 or cfg.ssm_d_inner <= 0
                                  or cfg.ssm_d_inner % cfg.ssm_heads):
        out.append(f"ssm_d_inner ({cfg.ssm_d_inner}: the RG-LRU width) must be a positive "
                   f"multiple of ssm_heads ({cfg.ssm_heads}: its gate blocks)")
    return out


def _encoder_problems(cfg: ModelConfig) -> list[str]:
    """Checks of the issue-13 fields (encoder heads, shared blocks, unequal stacks)."""
    out = []
    if cfg.head in ("mlm", "seq_cls", "token_cls") and cfg.family != "encoder":
        out.append(f"head {cfg.head!r} is for encoder models, not family {cfg.family!r}")
    if cfg.pooler and cfg.head in ("mlm", "token_cls"):
        out.append(f"pooler with head {cfg.head!r}: HF builds no pooler under a masked-LM or "
                   "token-classification head")
    if cfg.shared_groups > cfg.n_layers:
        out.append(f"shared_groups ({cfg.shared_groups}) exceeds n_layers ({cfg.n_layers})")
    if cfg.shared_groups and cfg.family != "encoder":
        out.append("shared_groups (ALBERT's shared blocks) is for encoder models")
    if cfg.family != "encoder-decoder":
        for name, base in (("encoder_n_heads", "n_heads"), ("encoder_d_ff", "d_ff")):
            if getattr(cfg, name) != getattr(cfg, base):
                out.append(f"{name} ({getattr(cfg, name)}) differs from {base} "
                           f"({getattr(cfg, base)}) in a model with no encoder stack")
    elif cfg.encoder_n_heads != cfg.n_heads:
        if cfg.d_model % cfg.encoder_n_heads:
            out.append(f"d_model ({cfg.d_model}) must be divisible by encoder_n_heads "
                       f"({cfg.encoder_n_heads})")
        if cfg.head_dim * cfg.n_heads != cfg.d_model or cfg.n_kv_heads != cfg.n_heads:
            out.append("an encoder with its own head count needs decoder heads of width "
                       "d_model // n_heads and no grouped KV heads")
    if cfg.sinusoidal_table != "none" and cfg.pos_type != "sinusoidal":
        out.append(f"sinusoidal_table ({cfg.sinusoidal_table!r}) needs pos_type 'sinusoidal'")
    if cfg.rel_bias_every_layer and cfg.pos_type != "relative_bias":
        out.append("rel_bias_every_layer needs pos_type 'relative_bias'")
    if cfg.rel_span and cfg.family != "encoder":
        out.append("rel_span (DeBERTa's disentangled attention) is for encoder models")
    if (cfg.rel_c2p or cfg.rel_p2c) and not cfg.rel_span:
        out.append("rel_c2p / rel_p2c need rel_span > 0")
    if cfg.audio_mels and cfg.family != "encoder-decoder":
        out.append("audio_mels (Whisper's audio stem) needs family 'encoder-decoder'")
    if cfg.audio_mels and cfg.pos_type != "learned":
        out.append("audio_mels (Whisper) needs pos_type 'learned'")
    if cfg.embed_factorised and cfg.family != "encoder":
        out.append("embed_factorised (ALBERT, ELECTRA) is for encoder models")
    if (cfg.sliding_chunks or cfg.global_qkv) and cfg.family != "encoder":
        out.append("sliding_chunks / global_qkv (Longformer) are for encoder models")
    if cfg.sliding_chunks and not cfg.sliding_window:
        out.append("sliding_chunks (Longformer) needs a sliding_window")
    if cfg.resid_dropout_at not in ("both", "attn", "mlp"):
        out.append(f"resid_dropout_at ({_show(cfg.resid_dropout_at)}) must be one of both, "
                   "attn, mlp")
    return out


def _cross_layer_problems(cfg: ModelConfig) -> list[str]:
    """Mllama's gated cross-attention blocks: plain pre-norm decoder blocks around them."""
    if not cfg.cross_layers:
        return []
    out = [f"cross_layers {bad} exceed n_layers ({cfg.n_layers})"
           for bad in [[i for i in cfg.cross_layers if i >= cfg.n_layers]] if bad]
    if (cfg.family != "decoder" or cfg.mixers or cfg.ffns or cfg.is_mla or cfg.is_moe
            or cfg.parallel_block or cfg.norm_position != "pre"):
        out.append("cross_layers (Mllama's gated cross-attention blocks) need a dense pre-norm "
                   "decoder with attention in every block (no MLA, MoE, mixers or parallel "
                   "blocks)")
    return out


def _image_grid_problems(cfg: ModelConfig) -> list[str]:
    """LLaVA-NeXT's anyres grid: (height, width) pairs in whole tiles of whole patches."""
    g = cfg.image_grid
    if not g:
        return []
    if not (isinstance(g, tuple) and all(isinstance(x, tuple) and len(x) == 2 and all(
            _is_int(v) and 0 < v <= MAX_POSITION for v in x) for x in g)):
        return [f"image_grid ({_show(g)}) must be a tuple of (height, width) pairs"]
    t, p = cfg.image_tile_px, cfg.image_token_px
    if t <= 0 or p <= 0 or t % p or any(v % t for x in g for v in x):
        return [f"image_grid {_show(g)} needs image_tile_px ({t}) dividing each side and "
                f"image_token_px ({p}) dividing image_tile_px"]
    return []


def _gemma3n_problems(cfg: ModelConfig) -> list[str]:
    """Gemma 3n's fields: per-layer widths, shared-KV layers, a decoder with sandwich norms."""
    out = []
    v = cfg.layer_d_ff
    if not isinstance(v, tuple) or not all(_is_int(x) and 0 < x <= MAX_WIDTH for x in v):
        return [f"layer_d_ff ({_show(v)}) must be a tuple of positive widths"]
    if v and len(v) != cfg.n_layers:
        out.append(f"layer_d_ff lists {len(v)} layers, not n_layers ({cfg.n_layers})")
    bad = [i for i in cfg.kv_shared_layers if i >= cfg.n_layers]
    if bad:
        out.append(f"kv_shared_layers {bad} exceed n_layers ({cfg.n_layers})")
    if (cfg.altup_inputs or cfg.kv_shared_layers or v) and (
            cfg.family != "decoder" or cfg.mixers or cfg.ffns or cfg.is_mla or cfg.is_moe
            or cfg.cross_layers or cfg.parallel_block):
        out.append("altup_inputs, kv_shared_layers and layer_d_ff (Gemma 3n) need a dense "
                   "decoder with attention in every block")
    if (cfg.laurel_rank or cfg.per_layer_dim) and not cfg.altup_inputs:
        out.append("laurel_rank and per_layer_dim are modelled with Gemma 3n's AltUp blocks "
                   "(altup_inputs > 0)")
    if cfg.per_layer_dim and not cfg.per_layer_vocab:
        out.append("per_layer_dim needs per_layer_vocab > 0 (the per-layer table's rows)")
    a = cfg.act_sparsity
    if not isinstance(a, tuple) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1 for x in a):
        out.append(f"act_sparsity ({_show(a)}) must be a tuple of fractions in [0, 1)")
    elif a and len(a) != cfg.n_layers:
        out.append(f"act_sparsity lists {len(a)} layers, not n_layers ({cfg.n_layers})")
    elif any(a) and not cfg.altup_inputs:
        out.append("act_sparsity is modelled in Gemma 3n's blocks (altup_inputs > 0)")
    return out


def validate(cfg: ModelConfig) -> None:
    """Raise one ConfigError that names every offending value of ``cfg``."""
    if not isinstance(cfg.name, str) or len(cfg.name) > NAME_MAX:
        raise ConfigError(f"name ({_show(cfg.name)}) must be a string of at most {NAME_MAX} "
                          "characters")
    problems: list[str] = []
    for name in _INT_FIELDS_POSITIVE:
        v = getattr(cfg, name)
        if not _is_int(v) or v <= 0:
            problems.append(f"{name} ({_show(v)}) must be a positive integer")
    for name in _INT_FIELDS_NONNEG:
        v = getattr(cfg, name)
        if not _is_int(v) or v < 0:
            problems.append(f"{name} ({_show(v)}) must be a non-negative integer")
    for name, bound in _BOUNDS.items():
        v = getattr(cfg, name)
        if _is_int(v) and v > bound:
            problems.append(f"{name} ({_show(v)}) exceeds txcalc's bound of {bound:,}")
    for name in _BOOL_FIELDS:
        if not isinstance(getattr(cfg, name), bool):
            problems.append(f"{name} ({getattr(cfg, name)!r}) must be true or false")
    for name, choices in _CHOICES.items():
        if getattr(cfg, name) not in choices:
            problems.append(f"{name} ({getattr(cfg, name)!r}) must be one of {', '.join(choices)}")
    if not isinstance(cfg.dense_layers, tuple) or not all(_is_int(i) and i >= 0
                                                           for i in cfg.dense_layers):
        problems.append(f"dense_layers ({cfg.dense_layers!r}) must be a tuple of layer indices")
    for name in ("sliding_layers", "nope_layers", "chunked_layers", "cross_layers",
                 "kv_shared_layers"):
        v = getattr(cfg, name)
        if not isinstance(v, tuple) or not all(_is_int(i) and i >= 0 for i in v):
            problems.append(f"{name} ({v!r}) must be a tuple of layer indices")
    for name in _DROPOUT_FIELDS:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            problems.append(f"{name} ({v!r}) must be a probability in [0, 1)")
    for name in ("dense_layers", "sliding_layers", "nope_layers", "chunked_layers",
                 "cross_layers", "kv_shared_layers", "layer_d_ff", "act_sparsity"):
        v = getattr(cfg, name)
        if isinstance(v, tuple) and len(v) > MAX_LAYERS:
            problems.append(f"{name} lists {len(v)} layers, over the bound of {MAX_LAYERS}")
    if problems:  # the structural checks below assume well-typed numbers
        raise ConfigError(f"{cfg.name}: " + "; ".join(problems))

    if cfg.n_kv_heads > cfg.n_heads:
        problems.append(f"n_kv_heads ({cfg.n_kv_heads}) must not exceed n_heads ({cfg.n_heads})")
    elif cfg.n_heads % cfg.n_kv_heads:
        problems.append(f"n_heads ({cfg.n_heads}) must be divisible by n_kv_heads "
                        f"({cfg.n_kv_heads})")
    if cfg.family == "encoder-decoder" and cfg.n_encoder_layers <= 0 \
            and not cfg.encoder_states_given:
        problems.append(f"n_encoder_layers ({cfg.n_encoder_layers}) must be positive for an "
                        "encoder-decoder model")
    if cfg.encoder_states_given and (cfg.family != "encoder-decoder" or cfg.n_encoder_layers
                                     or cfg.audio_mels):
        problems.append(f"encoder_states_given (a decoder alone) needs family 'encoder-decoder' "
                        f"(not {cfg.family!r}), n_encoder_layers 0 ({cfg.n_encoder_layers}) and "
                        f"no audio stem (audio_mels {cfg.audio_mels})")
    if cfg.family != "encoder-decoder" and cfg.n_encoder_layers:
        problems.append(f"n_encoder_layers ({cfg.n_encoder_layers}) is only for encoder-decoder "
                        f"models, not family {cfg.family!r}")
    if not _is_int(cfg.parallel_norms) or cfg.parallel_norms not in (1, 2):
        problems.append(f"parallel_norms ({_show(cfg.parallel_norms)}) must be 1 or 2")
    problems += _size_problems(cfg)
    problems += _hybrid_problems(cfg)
    if cfg.parallel_block and cfg.family != "decoder":
        problems.append(f"parallel_block needs family 'decoder', not {cfg.family!r}")
    if cfg.norm_position == "post_sub" and cfg.family != "decoder":
        problems.append(f"norm_position 'post_sub' needs family 'decoder', not {cfg.family!r}")
    if cfg.parallel_block and cfg.norm_position != "pre":
        problems.append(f"parallel_block needs norm_position 'pre', not {cfg.norm_position!r}")
    if cfg.is_mla:
        for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(cfg, name) <= 0:
                problems.append(f"{name} ({getattr(cfg, name)}) must be positive with MLA "
                                f"(kv_lora_rank {cfg.kv_lora_rank})")
        if cfg.family == "encoder-decoder":
            problems.append("multi-head latent attention (kv_lora_rank) is for decoder stacks")
    elif cfg.q_lora_rank:
        problems.append(f"q_lora_rank ({cfg.q_lora_rank}) needs MLA: set kv_lora_rank too")
    if cfg.is_moe:
        if not 1 <= cfg.top_k <= cfg.n_experts:
            problems.append(f"top_k ({cfg.top_k}) must be between 1 and n_experts "
                            f"({cfg.n_experts})")
        if cfg.first_k_dense > cfg.n_layers:
            problems.append(f"first_k_dense ({cfg.first_k_dense}) exceeds n_layers "
                            f"({cfg.n_layers})")
        if cfg.family == "encoder-decoder":
            problems.append("mixture-of-experts layers are modelled for decoder/encoder stacks "
                            "only")
    else:
        for name in ("top_k", "n_shared_experts", "shared_d_ff", "first_k_dense"):
            if getattr(cfg, name):
                problems.append(f"{name} ({getattr(cfg, name)}) needs n_experts > 0")
        if cfg.shared_expert_gate or cfg.router_bias:
            problems.append("shared_expert_gate/router_bias need n_experts > 0")
    if cfg.global_every and not cfg.sliding_window:
        problems.append(f"global_every ({cfg.global_every}) needs a sliding_window")
    if cfg.sliding_layers and not cfg.sliding_window:
        problems.append(f"sliding_layers {list(cfg.sliding_layers)} need a sliding_window")
    if cfg.sliding_layers and cfg.global_every:
        problems.append("give sliding_layers or global_every, not both")
    for name in ("sliding_layers", "nope_layers", "chunked_layers"):
        bad = [i for i in getattr(cfg, name) if i >= cfg.n_layers]
        if bad:
            problems.append(f"{name} {bad} exceed n_layers ({cfg.n_layers})")
    if cfg.nope_layers and cfg.pos_type != "rotary":
        problems.append(f"nope_layers {list(cfg.nope_layers)} need pos_type 'rotary', not "
                        f"{cfg.pos_type!r}")
    if cfg.chunked_layers and not cfg.attn_chunk:
        problems.append(f"chunked_layers {list(cfg.chunked_layers)} need an attn_chunk")
    if cfg.attn_chunk and cfg.family != "decoder":
        problems.append(f"attn_chunk ({cfg.attn_chunk}) needs family 'decoder', not "
                        f"{cfg.family!r}")
    both = sorted(set(cfg.chunked_layers) & {i for i in range(cfg.n_layers) if cfg.window(i)})
    if both:
        problems.append(f"layers {both} are both chunked and sliding: give one of them")
    if cfg.attn_sinks and (cfg.family != "decoder" or cfg.is_mla):
        problems.append(f"attn_sinks needs family 'decoder' without MLA, not {cfg.family!r}"
                        + (f" with kv_lora_rank {cfg.kv_lora_rank}" if cfg.is_mla else ""))
    if cfg.expert_bias and not cfg.is_moe:
        problems.append("expert_bias needs n_experts > 0")
    if cfg.qk_norm == "l2" and cfg.pos_type != "rotary":
        problems.append(f"qk_norm 'l2' (Llama 4: on rotary layers) needs pos_type 'rotary', "
                        f"not {cfg.pos_type!r}")
    if cfg.pos_type == "relative_bias" and cfg.relative_buckets <= 0:
        problems.append(f"relative_buckets ({cfg.relative_buckets}) must be positive")
    if cfg.pos_type == "rotary" and not cfg.is_mla and cfg.head_dim % 2:
        problems.append(f"head_dim ({cfg.head_dim}) must be even for rotary positions")
    if cfg.head == "none" and cfg.lm_head_bias:
        problems.append("lm_head_bias needs head 'lm'")
    if cfg.pooler and cfg.family == "decoder":
        problems.append("pooler is for encoder models (BERT)")
    problems += _encoder_problems(cfg)
    problems += _cross_layer_problems(cfg)
    problems += _gemma3n_problems(cfg)
    problems += _image_grid_problems(cfg)
    bad_dense = [i for i in cfg.dense_layers if i >= cfg.n_layers]
    if bad_dense:
        problems.append(f"dense_layers {bad_dense} exceed n_layers ({cfg.n_layers})")
    if problems:
        raise ConfigError(f"{cfg.name}: " + "; ".join(problems))
