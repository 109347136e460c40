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
from .checks import GATED_ACTIVATIONS, _is_int, validate


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
    #: Qwen-VL's dynamic resolution; see hf.vision.vision_parts for the rule per family)
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
    #: the weight format (a formats.scheme name) the publisher released a preset's checkpoint
    #: in, as its config.json's quantization_config says (gpt-oss: mxfp4, DeepSeek-V3:
    #: fp8-block); serving's default weights (formats.resolve). "" = 16-bit weights. Not a
    #: shape: configs that differ only here are equal
    released_weights: str = field(default="", compare=False, repr=False)
    #: multi-token-prediction modules the released checkpoint stores besides the model
    #: (DeepSeek-V3's ``num_nextn_predict_layers``: its layer 61, with its own copies of the
    #: token table and head): counted in the checkpoint's bytes (formats.model_checkpoint_bytes),
    #: not in the model's parameters or FLOPs (HF and vLLM's plain decoding load and run
    #: without it). A config.json gives its own (formats.scheme_from_config_file)
    released_mtp_layers: int = field(default=0, compare=False, repr=False)

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
        family's count depends on it): the rule per family is in hf.vision.vision_parts."""
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
