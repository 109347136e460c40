"""The Op record: one named computation of the model and every cost it declares, once.

An Op is a module-sized piece of the model (a Linear, a norm, an embedding table, the attention
core). Its ``path`` is the dotted name of the matching module in the reference model
(``layers.3.attn.q_proj``; ``encoder.layers.0.mlp.up_proj`` for encoder-decoder models), so
predicted and measured rows join by name. Every total, per-layer view and DataFrame in txcalc is
a sum over Op rows; nothing re-derives a formula.

Parameters of an op:

    operation                | shape of weights           | params
    -------------------------|----------------------------|-------------------------
    linear(d_in -> d_out)    | W: d_out x d_in, b: d_out  | d_in*d_out (+ d_out)
    embedding(rows, width)   | E: rows x width            | rows*width
    layernorm(width)         | gamma, beta: width         | 2*width (1*width no bias)
    rmsnorm(width)           | gamma: width               | width
    routed experts           | E copies of an MLP         | E * (one expert); k active

FLOPs (a multiply-add is 2 FLOPs; "rows" are the tokens an op sees, T = B*S):

    operation                  | forward FLOPs                 | backward FLOPs
    ---------------------------|-------------------------------|--------------------------------
    linear(d_in -> d_out)      | 2 * T * d_in * d_out * active | 2 x forward (input and weight
                               |   (bias adds are elementwise: |   gradients); FlopCounterMode
                               |   not counted)                |   counts exactly these
    attn scores  Q K^T         | 2 * B * H * S_q * S_k * h_qk  | 2 x forward (dQ, dK)
    attn context P V           | 2 * B * H * S_q * S_k * h_v   | 2 x forward (dP, dV)
    fused attention (flash)    | same as eager                 | 2.5 x forward (the kernel
                               |                               |   recomputes the scores)
    embedding, norm, softmax   | 0 matmul FLOPs                | 0

Serving state (``kvcache``): the ``.keys`` row of each attention core declares the elements one
cached token adds to its layer (``kv_elements``) and how many tokens it keeps (``kv_window``);
each state-space op its state per sequence (``state``, ``state_fp32``).

Executed attention FLOPs use the full S_q x S_k (what dense kernels run and what torch's
FlopCounterMode counts); model FLOPs count only the attended pairs: causal i >= j, and
i - j < window with sliding windows.
"""

from __future__ import annotations

from dataclasses import dataclass

from .workload import SKIPPED, Workload, global_rows, loss_chunks

#: where an op sits: (stack, block index), ("", -1) outside the blocks
Where = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Op:
    """One computation and its declared costs.

    ``instances`` counts identical copies that share one row (the routed experts of a MoE
    layer); ``active`` is how many of them one token uses (top-k). ``params`` is per copy.
    A tied output head has ``params == 0``: the weights are counted once, in the embedding.
    """

    path: str  #: dotted module path in the reference model
    kind: str  #: linear | embedding | norm | ...
    stack: str  #: "" (single stack), "encoder" or "decoder"
    layer: int  #: block index within the stack, -1 outside the blocks
    component: str  #: path inside the block ("attn.q_proj") or outside it ("embed.tokens")
    params: int = 0  #: parameters of one instance
    instances: int = 1  #: identical copies (routed experts)
    active: int = 1  #: copies one token uses (top-k of the routed experts)
    d_in: int = 0  #: input width (linear), table rows (embedding), h_qk (attention)
    d_out: int = 0  #: output width; h_v for the attention context
    stream: str = "seq"  #: whose tokens are the rows: seq, src (encoder) or first (pooler)
    kv_stream: str = ""  #: attention only: whose tokens are the keys
    heads: int = 0  #: head count: attention's query heads, a scan's heads, a per-head norm's
    causal: bool = False  #: attention only: causal mask
    window: int = 0  #: attention only: sliding window (0 = none)
    kv_heads: int = 0  #: attention only: key/value heads (what a fused GQA kernel stores)
    dropout: float = 0.0  #: attention scores: dropout probability on the probabilities
    attn_chunk: int = 0  #: attention only: chunked attention, chunk length (0 = none; Llama 4)
    sinks: bool = False  #: attention scores: a learned sink logit per head (gpt-oss)
    saved: tuple[tuple[int, str], ...] = ()  #: per row: (width, dtype tag) saved for backward
    # --- roles, declared where components.py builds the op (read by memory, sharding, planner)
    tied: bool = False  #: linear: the weight belongs to another op (tied output head)
    bias: bool = False  #: linear: has its own bias vector
    tp: str = "replicate"  #: TP style: colwise | rowwise | vocab | replicate (EP: instances > 1)
    act_split: str = "residual"  #: saved tensors under TP: tp | residual (tp only with SP) | whole
    placement: str = "block"  #: pipeline placement: pre (before the blocks) | block | post
    #: recompute class: "none" (never re-run: outside the blocks), "full" (a block op: full
    #: recompute drops it and re-runs it), "selective" (the attention core: re-run by both);
    #: a "checkpoint" op lists the modes under which its input stays alive in ``kept``
    recompute: str = "none"
    kept: tuple[str, ...] = ()  #: checkpoint ops: recompute modes that keep this input
    ckpt_heads: int = 0  #: checkpoint ops: heads of a per-pair input (T5's position bias)
    trainable: bool = True  #: False = frozen (fine-tuning, HF's frozen tables): no grad or states
    #: the storage format of a quantised weight, parsed once where it is chosen: a
    #: ``formats.Format`` (not imported here: formats reads Op) from a checkpoint's scheme
    #: (``formats.assign``) or a QLoRA base (``Finetune.base``); None: the policy's dtype
    weight_format: Format | None = None  # noqa: F821
    #: a frozen parameter a fine-tuning recipe keeps in fp32 whatever the policy (PEFT's
    #: prepare_model_for_kbit_training: engine.recipes), 4 bytes per parameter
    upcast: bool = False
    #: attention keys only: elements one cached token adds to this layer's KV cache (k and v,
    #: 2 K h; MLA's latent and rotary key, kv_lora_rank + rope); 0: the op keeps no cache of its
    #: own (an encoder, a shared-KV layer reading an earlier one's). Tokens cached: the key
    #: stream's (``kv_stream`` "src": the source tokens), at most ``kv_window`` of them
    #: (``kvcache.kv_rows``)
    kv_elements: int = 0
    # --- state-space mixers (txcalc/engine/mixers.py) ----------------------------------------------
    scan_chunk: int = 0  #: ssd_scan, gdn_scan: chunk length Q of the chunked scan algorithm
    #: serving state this op keeps per sequence, in elements, constant in context: the
    #: conv1d's last inputs, the scan's SSM state (read by ``kvcache.kv_rows``)
    state: int = 0
    #: serving state kept in fp32 whatever the KV dtype, elements per sequence: the recurrent
    #: (SSM) state of a scan, which HF's cache, the Mamba kernels and FLA keep in fp32
    state_fp32: int = 0
    #: saved for backward once per forward, not per row: a tensor derived from a parameter
    #: (Mamba's A = -exp(A_log), E x N); same (width, dtype tag) form as ``saved``
    saved_once: tuple[tuple[int, str], ...] = ()
    rank: int = 0  #: weight_product only: the adapter rank r of DoRA's B A
    input_grad: bool = True  #: linear: its input needs a gradient (False: Whisper's conv1 on mels)
    #: rows that do not scale with the workload: a Linear over DeBERTa's 2 x span relative
    #: embeddings (computed once per forward), or the keys of a rel_scores op
    fixed_rows: int = 0
    #: what a fused kernel keeps instead of ``saved`` when the workload runs it fused
    #: (``Workload.fused`` holds FUSED_KIND[kind]); None: the same as ``saved``
    saved_fused: tuple[tuple[int, str], ...] | None = None
    #: attention only: Longformer's sliding chunks, the one-sided window W (executed pairs:
    #: ``Op.pairs``; 0 = none)
    overlap: int = 0
    #: Longformer: HF pads the input to a multiple of attention_window (``pad_to``) and runs
    #: the embeddings and every block on the padded length (``Workload.length``); executed
    #: FLOPs and saved bytes count the padding, model FLOPs do not (0 = no padding)
    pad_to: int = 0

    @property
    def kv_window(self) -> int:
        """Tokens an attention op's cache keeps at most: its sliding window, or its attention
        chunk (a chunked layer caches the last chunk, as a window would: HF's cache); 0: all."""
        return self.window or self.attn_chunk

    @property
    def block_path(self) -> str:
        """Path of the block the op sits in (``decoder.layers.0``), "" outside the blocks: where
        full recompute reports what the block keeps."""
        if self.layer < 0:
            return ""
        return f"{self.stack}.layers.{self.layer}" if self.stack else f"layers.{self.layer}"

    def tensors(self) -> tuple[tuple[int, int, int], ...]:
        """Parameter tensors of one instance as (dim 0, elements per dim-0 row, ndim), in
        torch's layout: a Linear's weight is [out, in] (absent when tied), its bias [out]; an
        embedding table [rows, width]; a norm's scale (and shift) [width]."""
        if self.kind == "linear":
            return (((self.d_out, self.d_in, 2),) if not self.tied else ()) + \
                (((self.d_out, 1, 1),) if self.bias else ())
        if self.kind == "embedding":
            return ((self.d_in, self.d_out, 2),) if self.params else ()
        if self.kind == "conv1d":  # weight [C, 1, k], bias [C]
            return ((self.d_in, self.d_out, 3),) + (((self.d_in, 1, 1),) if self.bias else ())
        if self.kind == "ssm_scan":  # Mamba: A_log [d_inner, N] and D [d_inner]
            return ((self.d_in, self.d_out, 2), (self.d_in, 1, 1))
        if self.kind == "ssd_scan":  # Mamba-2: dt_bias, A_log and D, one per head
            return ((self.heads, 1, 1),) * 3
        if self.kind == "gdn_scan":  # Gated DeltaNet: dt_bias and A_log, one per value head
            return ((self.heads, 1, 1),) * 2
        if self.params and self.kind == "norm" and self.heads:  # a (heads, h) scale per head
            return ((self.heads, self.d_in, 2),) * (self.params // (self.heads * self.d_in))
        if self.params:
            return ((self.d_in, 1, 1),) * (self.params // self.d_in)
        return ()

    def reruns(self, recompute: str, kept_output: bool = False) -> bool:
        """Whether backward runs this op's forward again under the recompute mode of its block
        (``Workload.block_mode``); ``kept_output``: op-level checkpointing keeps this op's
        output (``op_level_kept``), so it does not run again."""
        if recompute == "full":
            return self.recompute in ("full", "selective")
        if recompute == "op":
            return self.recompute in ("full", "selective") and not kept_output
        return recompute == "selective" and self.recompute == "selective"

    @property
    def params_total(self) -> int:
        return self.params * self.instances

    @property
    def params_active(self) -> int:
        return self.params * self.active

    # --- FLOPs ---------------------------------------------------------------------------
    def pairs(self, w: Workload, model: bool = False) -> int:
        """(query, key) pairs per sequence and head: all of them, or only the attended ones."""
        pad = 0 if model else self.pad_to
        s_q, s_k = w.length(self.stream, pad), w.length(self.kv_stream, pad)
        if self.overlap and not model:
            return sliding_chunk_pairs(self.kind, s_q, self.overlap)
        if model and not self.causal and self.window:
            return bidirectional_pairs(s_q, self.window)
        if not model or not self.causal:
            return s_q * s_k
        return causal_pairs(s_q, self.window, self.attn_chunk)

    def _matmul(self, rows: int, keys: int) -> int:
        """The one place the matmul formula lives (2 FLOPs per multiply-add): a Linear over
        ``rows`` tokens (``keys`` unused); an attention matmul over ``rows`` sequences x
        ``keys`` (query, key) pairs per head."""
        if self.kind == "linear":
            return 2 * rows * self.d_in * self.d_out * self.active
        if self.kind == "rel_scores":  # DeBERTa: each query row against 2 x span positions
            return 2 * rows * self.heads * keys * self.d_in
        if self.kind in ("attn_scores", "attn_context"):
            width = self.d_in if self.kind == "attn_scores" else self.d_out
            return 2 * rows * self.heads * keys * width
        if self.kind == "conv1d":  # ``keys``: output positions per sequence
            return 2 * rows * keys * self.d_in * self.d_out
        if self.kind == "ssm_scan":  # ``keys``: positions per sequence
            return 2 * rows * keys * self.d_in * self.d_out
        if self.kind == "ssd_scan":  # ``keys``: positions per sequence
            return ssd_flops(rows, keys, self.heads, self.d_in, self.d_out, self.scan_chunk)
        if self.kind == "gdn_scan":  # ``keys``: positions per sequence
            return gdn_flops(rows, keys, self.heads, self.d_in, self.d_out, self.scan_chunk)[0]
        if self.kind == "altup_mix":  # Gemma 3n's AltUp: per token (D x A) @ (A x A)
            return 2 * rows * self.d_in * self.d_out * self.d_out
        if self.kind == "weight_product":  # DoRA's B A as PEFT forms it, once a step:
            # lora_B(lora_A(eye(d_in))), A on the d_in x d_in identity, then B
            return 2 * self.d_in * self.rank * (self.d_in + self.d_out)
        return 0

    def fwd_flops(self, w: Workload, model: bool = False) -> int:
        """Forward matmul FLOPs; ``model`` skips masked attention pairs."""
        if self.kind in ("linear", "weight_product", "altup_mix"):
            f = self._matmul(self.fixed_rows or w.rows(self.stream, 0 if model else self.pad_to),
                             1)
            if self.grad_in_forward(w):  # the head's input and weight gradients, one each
                f += f * (self.trainable + self.input_grad)
            return f
        if self.kind == "rel_scores":
            return self._matmul(w.rows(self.stream), self.fixed_rows)
        if self.kind == "conv1d":  # padded on both sides by k - 1, then cut to the S causal
            return self._matmul(w.batch, w.seq + self.d_out - 1)  # outputs (HF, Mamba's
        if self.kind in ("ssm_scan", "ssd_scan", "gdn_scan"):  # reference code)
            return self._matmul(w.batch, w.seq)
        return self._matmul(w.batch, self.pairs(w, model))

    def prefill_flops(self, w: Workload, model: bool = False) -> int:
        """Forward of a prompt: like training's forward, but the output head projects only the
        last position of each sequence (what serving engines compute)."""
        if self.placement == "post" and self.kind == "linear" and self.stream == "seq":
            return self._matmul(w.batch, 1)
        return self.fwd_flops(w, model)

    def decode_flops(self, batch: int, context: int, src_seq: int = 0,
                     model: bool = True) -> int:
        """One new token per sequence with ``context`` tokens cached (the new one included).

        Encoder ops and the cross-attention k/v projections ran once at prefill (their rows
        are source tokens), so they cost nothing per decoded token. Attention reads the cache:
        min(context, window) keys for self-attention, all source tokens for cross-attention.
        ``model=False`` ignores the window (a kernel that scans the whole cache).
        """
        # encoder ops, the pooler, DoRA's product, Whisper's audio stem do not decode, nor a
        # block that does not run (SKIPPED: Mllama's cross blocks, text only, cache empty)
        if self.stream in ("src", "first", "one", "mel", SKIPPED):
            return 0
        if self.kind == "conv1d":  # the k cached inputs and the new one: two outputs (HF's
            return self._matmul(batch, 2)  # causal_conv1d_update keeps the last)
        if self.kind == "ssm_scan":  # one recurrence step: C_t . h_t per channel
            return self._matmul(batch, 1)
        if self.kind == "ssd_scan":  # one recurrence step: h_t C_t per head (a bmm)
            return 2 * batch * self.heads * self.d_in * self.d_out
        if self.kind == "gdn_scan":  # one step: the state read by k_t and by q_t (see gdn_flops)
            return 2 * 2 * batch * self.heads * self.d_in * self.d_out
        keys = src_seq if self.kv_stream == "src" else context
        if model and self.window and self.kv_stream != "src":
            keys = min(keys, self.window)
        if model and self.attn_chunk:  # the keys of the new token's own chunk, itself included
            keys = (keys - 1) % self.attn_chunk + 1
        return self._matmul(batch, keys)

    # --- bytes saved for backward -------------------------------------------------------------
    def saved_bytes(self, w: Workload, act_bytes: int, pairs: bool = True) -> int:
        """Bytes of the tensors this op keeps for backward under workload ``w``.
        ``pairs=False`` leaves out the S x S part (selective recompute rebuilds it).

        ``saved`` lists per-row widths with a dtype tag: ``a`` (activation dtype, act_bytes),
        ``f32`` (kept in fp32 whatever the policy: norm statistics, upcast norm inputs, fp32
        logits), ``i64`` (token ids and labels), ``mask`` (a dropout mask: 1-byte bool on CUDA,
        the activation dtype on CPU and meta; saved only when ``w.dropout``), ``cast``/``up32``
        (a copy made only to change dtype, to the activation dtype / to fp32: in an fp32 model
        the conversion is a no-op and the tensor is the one already counted), ``view32`` (the
        opposite: kept only in an fp32 model, where an "fp32 copy" of a slice is a view that
        keeps its whole tensor), ``reread`` (keys and values read again by a shared-KV layer:
        a new copy unless the eager core can read the producer's, none under a fused kernel).

        The attention core depends on the kernel:

            kernel        | scores op saves                  | keys op saves (per key token)
            --------------|----------------------------------|------------------------------
            eager / sdpa  | q; per pair and head the softmax | k and v repeated to H heads
            (math path)   |  output, fp32 + its cast copy    |  (GQA's repeat_kv)
                          |  (4 + a) if upcast (a = 4: one   |
                          |  copy), else a; with dropout the |
                          |  mask and the dropped probs      |
                          |  replace the cast copy           |
            flash (fused) | q, the output, the fp32 row      | k and v with K heads
                          |  logsumexp (H x 4 bytes); the    |
                          |  output is o_proj's input        |

        ``pairs=False`` (selective recompute: the core is checkpointed) keeps only the core's
        inputs: no S x S and no logsumexp.
        """
        if self.kind == "dropout" and not w.dropout:
            return 0
        saved = self.saved
        if self.saved_fused is not None and self.runs_fused(w):
            saved = self.saved_fused
        if self.grad_in_forward(w):  # Liger keeps grad_input, its input's size, trained or not
            saved = ((self.d_in, "a"),)
        fused = self.fused_attn(w)
        mask = 1 if w.dropout_mask == "bool" else act_bytes
        fp32 = act_bytes == 4
        # "undropped": kept only when the step runs without dropout (a dropout after it then
        # takes its place: DeBERTa's relative embeddings)
        size = {"a": act_bytes, "f32": 4, "i64": 8, "mask": mask,
                "cast": 0 if fp32 else act_bytes, "up32": 0 if fp32 else 4,
                # the rest of a tensor whose fp32 "copy" in an fp32 model is a view of it
                # (Gemma 3n: a norm over one of the AltUp streams keeps the whole stack)
                "view32": 4 if fp32 else 0,
                # keys and values a layer re-reads from another (Gemma 3n's shared KV): the
                # eager core's own copies, unless k and v are already contiguous with one
                # head each per query head (none then: the storage is the producer's); a
                # fused kernel keeps the shared tensors themselves (none)
                "reread": 0 if fused or self.heads == self.kv_heads and (
                    self.kv_heads == 1 or w.length(self.stream, self.pad_to) == 1) else act_bytes,
                "undropped": 0 if w.dropout else act_bytes,
                # a frozen o_proj's input: the attention output, which a fused kernel keeps
                # itself (not when selective recompute checkpoints the core)
                "attn_out": act_bytes if fused and pairs else 0,
                "bool": 1}  # a torch.bool tensor (Longformer's padding mask)
        if self.overlap and pairs and self.kind in ("attn_scores", "attn_keys"):
            # Longformer's chunked kernel (whatever attn_impl: HF has no fused one)
            drop = mask if self.dropout and w.dropout else 0
            return w.batch * self.heads * sliding_chunk_saved_bytes(
                self.kind, w.length(self.stream, self.pad_to), self.overlap, self.d_in,
                act_bytes, drop,
                single=w.batch * self.heads == 1)
        if global_rows(self.kv_stream) and self.kind in ("attn_scores", "attn_context"):
            # Longformer's local queries against the global keys (``global_key_saved_bytes``);
            # under selective recompute all of it is rebuilt from the core's inputs
            drop = mask if self.dropout and w.dropout else 0
            s = w.length(self.stream, self.pad_to)
            return w.batch * self.heads * global_key_saved_bytes(
                self.kind, s, w.length(self.kv_stream), self.d_in, act_bytes, drop,
                single=w.batch * self.heads == 1 or s == self.pad_to) if pairs else 0
        per_row = sum(width * size[tag] for width, tag in saved)
        if self.kind == "attn_keys" and fused and self.kv_heads:
            per_row = per_row * self.kv_heads // self.heads
        if self.kind == "attn_scores" and fused and pairs:
            per_row += self.heads * 4  # logsumexp per query row and head
        if self.kind == "attn_scores" and fused and w.fused_qkv:
            # HF GPT-2: q is a view of the fused c_attn output, which it keeps alive whole
            per_row += 2 * self.kv_heads * self.d_in * act_bytes
        # a Linear or norm over DeBERTa's relative embeddings: 2 x span rows, whatever B x S
        rows = self.fixed_rows if self.fixed_rows and self.kind in ("linear", "norm",
                                                                 "checkpoint", "dropout") else \
            w.rows(self.stream, self.pad_to)
        total = rows * per_row
        if self.kind == "rel_scores":  # DeBERTa's c2p / p2c (HF DisentangledSelfAttention):
            # the bmm keeps the projected positions repeated per sequence (B H x 2span x h);
            # the gather keeps its int64 index (an S x S tensor, expanded) and, but under
            # selective recompute, its input (B H x S x 2span)
            s = w.length(self.stream)
            total += w.batch * self.heads * self.fixed_rows * self.d_in * act_bytes + s * s * 8
            if pairs:
                total += w.batch * self.heads * s * self.fixed_rows * act_bytes
        if self.kind == "attn_scores" and not fused and pairs:
            # the softmax keeps its output (fp32 when it upcasts; in an fp32 model that is
            # its own cast); P V keeps its input: the cast copy, or with dropout the mask and
            # the dropped probabilities (dropout keeps only its mask, not the cast copy)
            # (Longformer's, ``pad_to``: HF's softmax runs in fp32 whatever is asked)
            upcast = (w.softmax_fp32 or bool(self.pad_to)) and not fp32
            per_pair = 4 if upcast else act_bytes
            if self.dropout and w.dropout:
                per_pair += mask + act_bytes
            elif upcast:
                per_pair += act_bytes
            total += w.batch * self.heads * self.pairs(w) * per_pair
            if self.sinks:
                # gpt-oss: the softmax runs over S_k + 1 logits (the sink last); P V reads the
                # first S_k columns (a view, or the cast copy): one more column per query row
                total += w.rows(self.stream, self.pad_to) * self.heads * \
                    (4 if upcast else act_bytes)
        if self.ckpt_heads:  # a checkpointed per-pair input (T5's position bias), act dtype
            total += self.ckpt_heads * self.pairs(w) * act_bytes
        if self.component == "rel_bias" and self.trainable:  # T5 bucket ids: one int64 per
            # (query, key) pair, for the table's gradient (a frozen table keeps none)
            total += self.pairs(w) * 8
        if self.kind == "loss" and w.loss == "fused-linear":
            return 0  # Liger: no logits; the head keeps grad_input (its own saved row)
        if self.kind == "loss":  # the scalar total weight, one per chunk (torchtune: one
            from .lm_loss import chunk_copy_extra  # cross_entropy call a chunk), label copies
            total += 4 * loss_chunks(w.loss) + chunk_copy_extra(w, 8)
        if self.grad_in_forward(w) and self.trainable:  # Liger's grad_weight, weight dtype
            total += self.d_in * self.d_out * act_bytes
        if self.kind == "linear" and self.component == "lm_head" and saved and \
                loss_chunks(w.loss) > 1:  # its input chunks, folded to 2-D (a frozen head
            from .lm_loss import chunk_copy_extra  # keeps none)
            total += chunk_copy_extra(w, self.d_in * act_bytes)
        total += sum(width * size[tag] for width, tag in self.saved_once)
        if self.kind == "ssd_scan":
            total += ssd_saved_bytes(w.batch, w.seq, self.heads, self.d_in, self.d_out,
                                     self.scan_chunk)
        if self.kind == "gdn_scan":
            total += gdn_saved_bytes(w.batch, w.seq, self.heads, self.d_in, self.d_out,
                                     self.scan_chunk)
        return total

    def output_bytes(self, w: Workload, act_bytes: int) -> int:
        """Bytes of the output op-level checkpointing keeps (``op_level_kept``): a Linear's
        output (rows x d_out x active); the fused attention kernel's output and its fp32
        logsumexp (rows x H x (h_v x a + 4)). Other ops: 0."""
        rows = w.rows(self.stream, self.pad_to)
        if self.kind == "linear":
            return rows * self.d_out * self.active * act_bytes
        if self.kind == "attn_scores" and self.fused_attn(w):
            return rows * self.heads * (self.d_out * act_bytes + 4)
        return 0

    def runs_fused(self, w: Workload) -> bool:
        """Whether this op runs as its fused kernel: its kernel is in ``Workload.fused``
        (FUSED_KIND), or it is a norm or gated activation inside a block and the blocks are
        compiled whole ("layers": torchtune's compile_model; the final norm, outside the
        blocks, stays eager)."""
        kernel = FUSED_KIND.get(self.kind)
        return kernel in w.fused or (
            "layers" in w.fused and kernel in LAYER_FUSED and self.layer >= 0)

    def fused_attn(self, w: Workload) -> bool:
        """Whether this op runs under a fused attention kernel: ``attn_impl`` flash, but not
        Longformer's ops (``pad_to``): HF's LongformerSelfAttention runs its own chunked eager
        attention whatever is asked (LongformerModel refuses sdpa and flash_attention_2)."""
        return w.attn_impl == "flash" and not self.pad_to

    def grad_in_forward(self, w: Workload) -> bool:
        """Liger's fused linear cross-entropy (``Workload.loss`` fused-linear) computes the LM
        head's gradients inside the forward, chunk by chunk, and recomputes nothing: its
        backward FLOPs move to the forward, the step's total is unchanged."""
        return w.loss == "fused-linear" and self.kind == "linear" and self.component == "lm_head"

    def bwd_flops(self, w: Workload, model: bool = False) -> int:
        """Backward matmul FLOPs: 2x forward; a fused attention kernel counts 2.5x; a frozen
        Linear 1x (the input gradient only, no weight gradient); DoRA's weight product none."""
        if self.grad_in_forward(w):
            return 0
        fwd = self.fwd_flops(w, model)
        if self.kind in ("attn_scores", "attn_context") and self.fused_attn(w):
            return fwd * 5 // 2
        if self.kind == "weight_product":
            return 0
        if self.kind == "gdn_scan":
            return gdn_flops(w.batch, w.seq, self.heads, self.d_in, self.d_out, self.scan_chunk)[1]
        if self.kind == "linear" and not self.trainable:  # the input gradient only
            return fwd if self.input_grad else 0
        if not self.input_grad:  # the weight gradient only
            return fwd
        return 2 * fwd


def ssd_flops(batch: int, seq: int, heads: int, p: int, n: int, chunk: int) -> int:
    """Matmul FLOPs of Mamba-2's chunked SSD forward (Dao and Gu 2024, arXiv:2405.21060,
    section 6; HF ``mamba2_chunk_scan``, its five einsums) over c = ceil(S/Q) chunks of Q
    positions (the last one zero-padded), H heads of width P, state N:

        einsum                      | what                          | FLOPs        | sums over
        ----------------------------|-------------------------------|--------------|----------
        C B^T in each chunk         | position x position scores    | 2 B c H Q^2 N| N
        (scores * decay) x          | the diagonal blocks' output   | 2 B c H Q^2 P| Q
        B^T x per chunk             | each chunk's final state      | 2 B c H Q P N| Q
        decay across chunks         | every chunk's start state     | 2B H(c+1)^2PN| c + 1
        C . start state             | the off-diagonal output       | 2 B c H Q P N| N

    An einsum that sums over a single element is a broadcast multiply, not a matmul (torch
    runs it as ``mul``): it counts 0, like the elementwise discretisation, decay masks, D skip
    and gate. Backward is 2x (both operands of each einsum need gradients)."""
    c = -(-seq // chunk)
    qn, qq = (n > 1) * c * chunk * p * n, (chunk > 1) * c * chunk
    return 2 * batch * heads * ((n > 1) * c * chunk * chunk * n + qq * chunk * p + qq * p * n
                                + qn + (c + 1) ** 2 * p * n)


def gdn_flops(batch: int, seq: int, heads: int, dk: int, dv: int, chunk: int) -> tuple[int, int]:
    """(forward, backward) matmul FLOPs of the chunked gated delta rule (Yang, Kautz and
    Hatamizadeh 2024, arXiv:2412.06464; HF ``torch_chunk_gated_delta_rule``, Qwen3-Next) over
    c = ceil(S/Q) chunks of Q positions (the last one zero-padded), H value heads (the key
    heads repeated to H), key width dk, value width dv, state dk x dv per head:

        product (per chunk and head)       | what                          | forward FLOPs
        -----------------------------------|-------------------------------|---------------
        (beta k) k^T, masked by the decays | the UT system (Q x Q)         | 2 Q^2 dk
        q k^T, masked by the decays        | intra-chunk scores            | 2 Q^2 dk
        two unit-triangular solves         | new values u, decayed keys w  | not counted
        w S                                | what the old state predicts   | 2 Q dk dv
        q S                                | read of the old state         | 2 Q dk dv
        scores (u - w S)                   | intra-chunk output            | 2 Q^2 dv
        k^T (u - w S)                      | the state update              | 2 Q dk dv

    Convention (FlopCounterMode's, as everywhere in txcalc): matmul work only. The triangular
    solves (``torch.linalg.solve_triangular``, Q^2 (dk + dv) multiply-adds per chunk and head
    in forward) are not matmuls to the counter and count 0, like the decays, the L2 norms of
    q and k, beta, the gate and the padding; their backward's weight gradient is one: grad_A =
    -grad_B X^T, 2 Q^2 (dk + dv) per chunk and head, counted. Backward is otherwise 2x forward,
    less what HF's algorithm never runs: in chunk 0 the state is a constant zero (w S and q S
    need only one gradient each) and the last chunk's state update feeds nothing (the final
    state is dropped in training): 4 x 2 Q dk dv per head fewer."""
    c = -(-seq // chunk)
    fwd = 2 * batch * heads * c * (2 * chunk * chunk * dk + chunk * chunk * dv
                                   + 3 * chunk * dk * dv)
    solve = 2 * batch * heads * c * chunk * chunk * (dk + dv)
    return fwd, 2 * fwd + solve - 4 * 2 * batch * heads * chunk * dk * dv


def gdn_saved_bytes(batch: int, seq: int, heads: int, dk: int, dv: int, chunk: int) -> int:
    """Bytes the chunked gated delta rule (reference/model.py ``GDNScan``, fp32 inside) keeps
    for backward beyond its per-token inputs (``Op.saved``), over c = ceil(S/Q) chunks of Q
    positions, H value heads:

        per padded position (B c Q) and head, fp32: k, q, beta k, the solve's w (dk each);
        v, the solve's u, u - w S (dv each); beta and two decay vectors (for beta k and q)
        per chunk and head, fp32: the Q x Q decays, both raw products ((beta k) k^T, q k^T),
        the UT system and the masked scores (5 Q^2); the state entering the chunk (dk dv)
        with more than one chunk (c > 1), besides: the decayed q and k (dk each per padded
        position), k's decay vector (1) and each chunk's total decay (1 per chunk): chunk 0
        reads a zero state (which needs no gradient of q) and the last state update feeds
        nothing, so with one chunk nothing keeps them
        once: the Q x Q causal mask (bool)
    """
    c = -(-seq // chunk)
    padded = batch * c * chunk * heads * ((4 + 2 * (c > 1)) * dk + 3 * dv + 3 + (c > 1))
    chunks = batch * c * heads * (5 * chunk * chunk + (c > 1) + dk * dv)
    return 4 * (padded + chunks) + chunk * chunk


def ssd_saved_bytes(batch: int, seq: int, heads: int, p: int, n: int, chunk: int) -> int:
    """Bytes the chunked SSD (reference/model.py ``SSDScan``, fp32 inside) keeps for backward
    beyond its per-token inputs (``Op.saved``), over c = ceil(S/Q) chunks of Q positions:

        per padded position (B c Q), per head, fp32: B and C spread to the heads and
          transposed (2N), x * dt transposed (P), C B^T, its decays and their product (3Q),
          B decayed to
          the chunk end (N), the start-state read-out (P), two decay vectors (2)
        per sequence, per head, fp32: the (c+1)^2 chunk decays, the c+1 chunk states and
          the c start states (P N each)
        once: the Q x Q and (c+1) x (c+1) causal masks (bool)
    """
    c = -(-seq // chunk)
    padded = batch * c * chunk * heads * (3 * n + 2 * p + 3 * chunk + 2)
    chunks = batch * heads * ((c + 1) ** 2 + (2 * c + 1) * p * n)
    return 4 * (padded + chunks) + chunk * chunk + (c + 1) ** 2


def sliding_chunk_pairs(kind: str, s: int, w: int) -> int:
    """(query, key) products per head that HF's Longformer executes for a window of w keys
    either side over s tokens (s a multiple of 2w: HF pads the input to a multiple of
    attention_window = 2w), ``LongformerSelfAttention._sliding_chunks_*``:

        product   | chunks                     | per chunk   | pairs
        ----------|----------------------------|-------------|--------------
        Q K^T     | s/w - 1, 2w long, overlap w| 2w x 2w     | 4 w (s - w)
        P V       | s/w, w queries each        | w x 3w      | 3 w s

    The attended pairs (model FLOPs) are ``bidirectional_pairs(s, w)``. HF builds the padding
    mask's diagonals with the same chunking over one head of width 1: torch's einsum runs
    that contraction over a dimension of 1 as an elementwise product, no matmul FLOPs."""
    return 4 * w * (s - w) if kind == "attn_scores" else 3 * w * s


def sliding_chunk_saved_bytes(kind: str, s: int, w: int, h: int, act_bytes: int,
                              drop_mask: int = 0, single: bool = False) -> int:
    """Bytes Longformer's chunked local attention keeps for backward per sequence and head
    (HF ``LongformerSelfAttention`` with no global token; reference/model.py
    ``SlidingChunkCore``), s a multiple of 2w, head width h, a = act_bytes:

        op     | tensor                                         | bytes
        -------|------------------------------------------------|------------------------
        scores | Q and K chunk copies: s/w - 1 chunks of 2w x h | 2 x 2 (s - w) h a
               | the two where() conditions masking the band's  | 2 w (w + 1)  (bool)
               |   ends (first and last w rows), expanded       |
               | softmax output over 2w + 1 keys, fp32 always   | 4 s (2w + 1)
               | the probabilities padded and shifted to        | s (3w + 2) a
               |   diagonals, P V's operand (w x (3w + 2) a     |
               |   chunk, s/w chunks)                           |
               | with dropout: its mask (``drop_mask`` bytes)   | s (2w + 1) drop_mask
        keys   | value chunk copies: s/w chunks of 3w x h       | 3 s h a

    ``single``: one sequence of one head (B x H = 1). The chunk reshapes are then views, not
    copies (torch merges the size-1 batch dimension into the chunk stride): the matmuls keep
    q and k themselves (s h a each) and the padded values ((s + 2w) h a).

    Once per forward (not here): the (B, S) bool padding mask that every block's
    masked_fill reads, kept by the first block (``attention._core``'s pad_mask op)."""
    if kind == "attn_keys":
        return ((s + 2 * w) if single else 3 * s) * h * act_bytes
    qk = 2 * s if single else 4 * (s - w)
    return (qk * h * act_bytes + 2 * w * (w + 1) + 4 * s * (2 * w + 1)
            + s * (3 * w + 2) * act_bytes + s * (2 * w + 1) * drop_mask)


def global_key_saved_bytes(kind: str, s: int, g: int, h: int, act_bytes: int,
                           drop_mask: int = 0, single: bool = False) -> int:
    """Bytes Longformer's local queries against the g global keys keep for backward per
    sequence and head (HF ``_concat_with_global_key_attn_probs`` and
    ``_compute_attn_output_with_global_indices``; reference/model.py ``SlidingChunkCore``),
    s the padded length, head width h, a = act_bytes:

        op      | tensor                                           | bytes
        --------|--------------------------------------------------|--------------------
        scores  | q, the einsum's operand (a copy, or a view of q: | s h a (0 if single)
                |   ``single`` when the band's chunks already keep |
                |   q itself: B x H = 1, or one chunk, s = 2w)     |
                | the g global keys gathered into a zeroed tensor  | g h a
                | the softmax's fp32 output widens by g columns    | 4 s g
                | with dropout: its mask widens too                | s g drop_mask
        context | the probabilities of the g columns, cloned       | s g a
                | the g global values gathered, cloned             | g h a

    The softmax output's own 2w + 1 columns and the band's P V are
    ``sliding_chunk_saved_bytes``'s, unchanged."""
    if not g:
        return 0
    if kind == "attn_context":
        return (s * g + g * h) * act_bytes
    return (0 if single else s * h * act_bytes) + g * h * act_bytes + 4 * s * g + s * g * drop_mask


def bidirectional_pairs(s: int, half: int) -> int:
    """Attended pairs of a bidirectional local window over s tokens, |i - j| <= half (an
    encoder's local layer; ModernBERT: half = local_attention // 2): s^2 when half >= s - 1,
    else s(2 half + 1) - half(half + 1) (each edge row loses the keys past the sequence)."""
    if half >= s - 1:
        return s * s
    return s * (2 * half + 1) - half * (half + 1)


def causal_pairs(s: int, window: int = 0, chunk: int = 0) -> int:
    """Attended pairs of a causal mask over s tokens: s(s+1)/2, or with a window w < s:
    w(w+1)/2 for the first w rows plus (s - w) * w for the rest; chunked attention (chunk
    c): each full chunk c(c+1)/2, the last partial chunk of r = s mod c tokens r(r+1)/2."""
    if chunk:
        full, rest = divmod(s, chunk)
        return full * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2
    if not window or window >= s:
        return s * (s + 1) // 2
    return window * (window + 1) // 2 + (s - window) * window


#: op kind -> the fused kernel (``Workload.fused``) that swaps its ``saved`` for ``saved_fused``
FUSED_KIND = {"norm": "norm", "activation": "act", "loss": "loss"}
#: the kernels a block compiled whole runs fused (``Workload.fused`` "layers"): what Inductor
#: keeps for a whole compiled block equals these two fused inside it, byte for byte
#: (tests/conformance/test_stacks_recompute.py, the reference's blocks under torch.compile)
LAYER_FUSED = ("norm", "act")


def op_level_kept(ops, w: Workload) -> set[str]:
    """Paths of the block ops whose outputs op-level selective checkpointing keeps, torchtitan's
    policy (pytorch/torchtitan, torchtitan/models/llama3/infra/parallelize.py, ``_save_list``
    and ``_custom_policy``, 2024-2025): inside each checkpointed block, the outputs of
    ``aten.mm`` (every Linear), of the fused attention kernels
    (``_scaled_dot_product_flash_attention`` / ``_efficient_attention``) and of TP's
    reduce-scatter (under SP; not modelled) are saved, "except every second mm": the 1st, 3rd,
    5th ... Linear of the block in forward order is kept, the 2nd, 4th ... recomputed. Under
    TP a kept colwise output is split over the ranks, a rowwise one is the residual stream
    (``saved.saved_rows``). Routed experts run grouped
    GEMMs (not ``aten.mm``): neither counted nor kept. Eager attention (bmm) is recomputed.
    Everything else in the block is recomputed; the block keeps its input (a checkpoint)."""
    kept: set[str] = set()
    count: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.layer < 0 or op.recompute == "none":
            continue
        if op.kind == "linear" and op.instances == 1:
            key = (op.stack, op.layer)
            count[key] = count.get(key, 0) + 1
            if count[key] % 2 == 1:
                kept.add(op.path)
        elif op.kind == "attn_scores" and op.fused_attn(w):
            kept.add(op.path)
    return kept


def rerun_ops(ops, w: Workload) -> list[Op]:
    """The ops whose forward backward runs again under the workload's recompute: each
    block's own mode (``Workload.block_mode``), op-level's kept outputs excluded."""
    ops = tuple(ops)
    kept = op_level_kept(ops, w) if w.recompute == "op" else set()
    return [op for op in ops if op.reruns(w.block_mode(op.layer), op.path in kept)]


#: op kinds with matmul-like FLOPs (FlopCounterMode counts them: mm, bmm, convolution)
FLOP_KINDS = ("linear", "attn_scores", "attn_context", "conv1d", "ssm_scan", "ssd_scan",
              "gdn_scan", "rel_scores", "weight_product")

#: op kinds whose saved tensors live inside a TP region (split over t in any case)
TP_REGION_KINDS = ("attn_scores", "attn_keys", "attn_context", "activation", "loss")


def _roles(kind: str, layer: int, tp: str = "replicate") -> dict:
    """Default roles of an op of ``kind``: how its saved tensors split under TP (inside a TP
    region, or the input of a rowwise Linear: over t; position tables and lookups: whole; the
    residual stream: over t only with SP, Korthikanti et al. arXiv:2205.05198 section 4.2.2)
    and its recompute class (block ops re-run under full recompute, the attention core also
    under selective). components.py overrides them where an op differs."""
    split = "tp" if kind in TP_REGION_KINDS or tp == "rowwise" else \
        "whole" if kind in ("rotary", "embedding") else "residual"
    rc = "none" if layer < 0 else \
        "selective" if kind in ("attn_scores", "attn_keys", "attn_context") else "full"
    return dict(tp=tp, act_split=split, recompute=rc,
                placement="block" if layer >= 0 else "pre")


def linear(path: str, where: tuple[str, int], component: str, d_in: int, d_out: int,
           bias: bool, *, tied: bool = False, instances: int = 1, active: int = 1,
           stream: str = "seq", shares_input: bool = False, tp: str = "replicate") -> Op:
    """y = x W^T + b. ``tied``: W belongs to another op (the tied output head); a bias is own.
    ``tp``: colwise (W split by output rows), rowwise (by input columns) or replicate.

    Saves its input for the weight gradient, unless an earlier op already saved the same
    tensor (k and v read q's input; up reads gate's input): ``shares_input``.
    """
    params = (0 if tied else d_in * d_out) + (d_out if bias else 0)
    saved = () if shares_input else ((d_in * active, "a"),)
    return Op(path, "linear", where[0], where[1], component, params, instances, active,
              d_in, d_out, stream, saved=saved, tied=tied, bias=bias,
              **_roles("linear", where[1], tp))


def elementwise(path: str, where: tuple[str, int], component: str, kind: str,
                saved: tuple[tuple[int, str], ...], stream: str = "seq") -> Op:
    """An op with no parameters and no matmul FLOPs that still saves tensors (activation
    function, rotary embedding, loss)."""
    return Op(path, kind, where[0], where[1], component, stream=stream, saved=saved,
              **_roles(kind, where[1]))


def checkpoint(path: str, where: tuple[str, int], component: str, kept: tuple[str, ...],
               saved: tuple[tuple[int, str], ...] = (), heads: int = 0, stream: str = "seq",
               kv_stream: str = "", act_split: str = "residual") -> Op:
    """A tensor that a recompute checkpoint keeps alive until backward, under the modes in
    ``kept``: a block's input (full), the encoder output read by every decoder block (full),
    T5's position bias, H x S_q x S_k, which needs a gradient (selective and full). No
    parameters, no FLOPs; ``saved`` per row, ``heads`` per (query, key) pair."""
    return Op(path, "checkpoint", where[0], where[1], component, d_in=0, stream=stream,
              kv_stream=kv_stream, saved=saved, kept=kept, ckpt_heads=heads,
              act_split=act_split, recompute="none",
              placement="block" if where[1] >= 0 else "pre")


def attention_core(path: str, where: tuple[str, int], component: str, *, heads: int,
                   kv_heads: int, qk_dim: int, v_dim: int, stream: str, kv_stream: str,
                   causal: bool, window: int, dropout: float = 0.0, chunk: int = 0,
                   sinks: bool = False, kv_elements: int = 0) -> list[Op]:
    """softmax(Q K^T / sqrt(h)) V as two matmul ops: ``.scores`` and ``.context``.
    ``sinks``: one more logit per head and query row in the softmax (no matmul).
    ``kv_elements``: what one cached token adds to this layer's KV cache, declared on the
    ``.keys`` row (``Op.kv_elements``; 0: no cache of its own)."""
    common = dict(d_in=qk_dim, d_out=v_dim, stream=stream, kv_stream=kv_stream, heads=heads,
                  kv_heads=kv_heads, causal=causal, window=window, attn_chunk=chunk,
                  **_roles("attn_scores", where[1]))
    # Saved: q and k for the scores (k repeated to all H heads under GQA), the S x S softmax
    # output (see Op.saved_bytes), and v for the context. Keys and values are stored per key
    # token, queries per query token.
    return [Op(f"{path}.scores", "attn_scores", where[0], where[1], f"{component}.scores",
               saved=((heads * qk_dim, "a"),), dropout=dropout, sinks=sinks, **common),
            Op(f"{path}.keys", "attn_keys", where[0], where[1], f"{component}.keys",
               **(common | {"stream": kv_stream}),
               saved=((heads * qk_dim, "a"), (heads * v_dim, "a")), kv_elements=kv_elements),
            Op(f"{path}.context", "attn_context", where[0], where[1], f"{component}.context",
               **common)]


def dropout(path: str, where: tuple[str, int], component: str, width: int,
            stream: str = "seq", extra: tuple[tuple[int, str], ...] = ()) -> Op:
    """Dropout on a ``width``-wide tensor: saves its mask (``Op.saved_bytes``: only when the
    workload trains with dropout). ``extra``: tensors that stay alive only because the
    dropout separates them from their consumer (a ReLU's output, no longer the next input)."""
    return Op(path, "dropout", where[0], where[1], component, stream=stream,
              saved=((width, "mask"),) + extra, **_roles("dropout", where[1]))


def embedding(path: str, where: tuple[str, int], component: str, rows: int, width: int,
              stream: str = "seq", tp: str = "replicate") -> Op:
    """A lookup table: rows x width parameters, no matmul; saves the int64 indices.
    ``tp="vocab"``: rows split over the TP ranks (Megatron's vocab-parallel embedding)."""
    return Op(path, "embedding", where[0], where[1], component, rows * width, 1, 1, rows, width,
              stream, saved=((1, "i64"),), **_roles("embedding", where[1], tp))


def norm(path: str, where: tuple[str, int], component: str, width: int, norm_type: str,
         bias: bool, affine: bool, stream: str = "seq") -> Op:
    """LayerNorm (scale and optional shift) or RMSNorm (scale only); none without affine."""
    per_feature = 0
    if affine:
        per_feature = 2 if (norm_type == "layernorm" and bias) else 1
    if norm_type == "rmsnorm":  # HF RMSNorm: fp32 copy of the input, 1/rms, normalised input
        # (the normalised input is saved by the scale's multiply; without a scale, the next
        # op saves it as its own input)
        saved = ((width, "f32"), (1, "f32")) + (((width, "a"),) if affine else ())
        # fused (Apex FusedRMSNorm, TransformerEngine's RMSNorm, torch.compile's kernel): the
        # input in the activation dtype and the fp32 1/rms; the scale is applied inside
        fused = ((width, "a"), (1, "f32"))
    else:  # native layer_norm (already one fused kernel): input, mean, 1/std
        saved, fused = ((width, "a"), (1, "f32"), (1, "f32")), None
    return Op(path, "norm", where[0], where[1], component, per_feature * width, 1, 1, width, width,
              stream, saved=saved, bias=per_feature == 2, saved_fused=fused,
              **_roles("norm", where[1]))
