"""The LM loss's transients when the logits are not made whole (``Workload.loss``).

T = batch x seq tokens, V the vocabulary, D the head's input width, a the activation bytes.
What each keeps for backward is declared on the ops (``Op.saved_bytes``, ``Op.grad_in_forward``);
here are the tensors that live only for a moment, relative to the saved activations:

    loss          | forward peak (beside what is saved)  | early backward
    --------------|--------------------------------------|--------------------------------------
    full          | the logits (a) and their fp32 copy   | two fp32 T x V buffers (8 T V)
                  |  (4, none in fp32): T V (a + 4)      |
                  |  (HF's kernel; a stack's other       |
                  |  kernels: ``full_loss_extra``)       |
    chunked:N     | every chunk's logits (T V a) and one | per chunk, last first: its two fp32
    (torchtune)   |  chunk's fp32 copy (4 V r_i) while   |  buffers (8 V r_i) while the later
                  |  the chunks after it have saved      |  chunks' log-probabilities are freed
                  |  nothing yet; the peak ends the last |  and their 16-bit gradients wait for
                  |  run of equal chunks                 |  the head: 8 V r_i - (4 - a) V (T - R_i);
                  |                                      |  a trained head then sums its chunks'
                  |                                      |  weight gradients (3 V D at once)
    fused-linear  | one row chunk's logits, overwritten  | nothing of the loss: its gradients
    (Liger)       |  by their gradient (r V a), and the  |  exist already; the first op after
                  |  fp32 per-row loss (4 T)             |  it, the final norm, holds the peak
                  |                                      |  (``fused_norm_backward``; with a
                  |                                      |  LayerNorm the last block does: not
                  |                                      |  modelled)

The full loss's rows are HF's code (``F.cross_entropy(logits.float(), labels)``); a training
stack may run another cross-entropy kernel on the whole T x V logits (``loss_kernel``, the table
``FULL_LOSS_KERNELS`` below): the transients differ, what is saved is declared on the op.

Measured on the CPU against reference/loss.py (tests/conformance/test_finetune_loss.py): chunked exact at
both peaks; fused-linear's forward peak is Liger's kernel's, which PyTorch on the CPU cannot
reproduce (its softmax gradient needs fp32 temporaries), so only bounded there; its backward
peak exact where the final RMSNorm holds it.

Chunks: torchtune splits the sequence with ``tensor_split(N, dim=1)``: the first S mod N chunks
hold ceil(S / N) positions, the rest floor (empty when N > S); r_i = batch x positions, R_i the
rows of chunks 1..i. Liger's row chunk: next_pow2(ceil(T / ceil(V / D))), at most T
(``fused_linear_cross_entropy_forward``: "inc_factor", "chunk_size").

Scalars, as the reference (reference/loss.py) holds them at chunk i's nll_loss: its output and
total weight, the running sum and the previous chunk's loss (0, 4, 8 bytes for i = 1, 2, >= 3);
the N total weights are saved (4 N, ``Op.saved_bytes``). With batch > 1 a chunk of s >= 2
positions is a copy (a (B, s) slice of (B, S) is not contiguous; s = 1 reshapes to a view): the
loss saves the label copies and the head its input's (``chunk_copy_extra``); when no chunk is a
view the caller's labels are alive beside them, 8 T bytes; the same 8 T under fused-linear,
which saves no labels at all (``held_labels``).
"""

from __future__ import annotations

from ..errors import WorkloadError
from .workload import LOSS_KERNELS, Workload, loss_chunks


def check_head(cfg, loss: str) -> None:
    """Refuse a loss other than full on a model whose head is not a bias-free causal LM head
    (the chunked and fused-linear losses replace that head's matmul)."""
    if loss != "full" and (cfg.head != "lm" or cfg.lm_head_bias):
        raise WorkloadError(f"loss {loss!r} applies to a causal LM head without a bias; "
                            f"{cfg.name} has head {cfg.head!r}"
                            + (" with a bias" if cfg.lm_head_bias else ""))


def logits_grad_bytes(loss: str, batch, seq, vocab: int):
    """The fp32 gradient of the logits of one cross-entropy call: 4 V bytes a row, for the
    rows the call sees (full: all T = batch x seq; chunked:N: the largest chunk, batch x
    ceil(seq / N); fused-linear: none, its gradients are made in the forward, one row chunk
    at a time, and saved as the head's grad_input / grad_weight). HF's full loss holds two
    such buffers as backward starts (``full_loss_extra``); the transient the phases hold and
    the planner books is ``memory.loss_transient``. ``batch`` and ``seq`` may be numpy integer
    arrays: only integer arithmetic here."""
    if loss == "fused-linear":
        return 0 * batch
    n = loss_chunks(loss)
    return 4 * vocab * batch * (-(-seq // n))


def chunk_runs(work: Workload) -> list[tuple[int, int]]:
    """torchtune's chunks as runs of equal size: [(last chunk index of the run, its rows)]."""
    n = loss_chunks(work.loss)
    q, rem = divmod(work.seq, n)
    runs = [(rem, work.batch * (q + 1))] if rem else []
    return runs + [(n, work.batch * q)]


def _rows_through(work: Workload, i: int) -> int:
    q, rem = divmod(work.seq, loss_chunks(work.loss))
    return work.batch * (i * q + min(i, rem))


def liger_chunk_rows(tokens: int, vocab: int, d: int) -> int:
    """Rows of one chunk of Liger's fused linear cross-entropy."""
    inc = -(-vocab // d)
    return min(1 << (max(1, -(-tokens // inc)) - 1).bit_length(), tokens)


def forward_peak_extra(work: Workload, vocab: int, d: int, a: int) -> int:
    """Bytes above the saved activations (and the returned loss) at the loss's forward peak."""
    t = work.rows("seq")
    if work.loss == "fused-linear":
        return liger_chunk_rows(t, vocab, d) * vocab * a + 4 * t
    copy = 4 if a != 4 else 0  # logits.float() is the tensor itself in fp32
    if work.loss == "full":
        return full_loss_extra(loss_kernel(work), t, vocab, a)[0]
    if "loss" in work.fused:  # each chunk's cross-entropy compiled (``compiled_chunks``)
        return max(full_loss_extra("compiled", r, vocab, a)[0] for _, r in chunk_runs(work))
    n, best = loss_chunks(work.loss), None
    for i, rows in chunk_runs(work):
        later = t - _rows_through(work, i)  # rows of chunks not yet run: nothing saved
        held = 0 if i == 1 else 4 if i == 2 else 8
        peak = t * vocab * a + copy * vocab * rows - 4 * vocab * later - 4 * (n - i) + held
        best = peak if best is None else max(best, peak)
    return best


def _sizes(work: Workload) -> list[int]:
    """Positions per chunk (tensor_split: the first S mod N chunks one longer)."""
    n = loss_chunks(work.loss)
    q, rem = divmod(work.seq, n)
    return [q + 1] * rem + [q] * (n - rem)


def fused_norm_backward(t: int, d: int, a: int, norm: str, scale: bool, bias: bool,
                        grad: int) -> int:
    """Bytes above the saved activations at the peak of the final norm's backward, the first
    op autograd runs after the fused linear cross-entropy (whose gradients already exist:
    the saved grad_input, a, is the gradient the norm receives). t tokens of width d;
    ``scale``/``bias``: the norm's weight / bias train (their gradients, ``grad`` bytes an
    element, stay); 4: the fp32 seed gradient of backward (1.0).

        norm                  | at the peak                                  | bytes
        ----------------------|----------------------------------------------|----------------
        rmsnorm, eager (HF:   | PowBackward of xf.pow(2): grad * 2 * xf.pow(1)| 20 t d
         xf = x.float(),      |  (three fp32 t x d), beside the mean's       |  - a t d - 4 t
         xf * rsqrt(mean(xf^2)|  expanded gradient and the rsqrt branch's    |  - a t d (scale)
         + eps), .to(a),      |  (two more): 5 x 4 t d; freed by then: the   |  + grad d (scale)
         weight * .)          |  incoming gradient (after the scale's mul),  |
                              |  1/rms (rsqrt and mul done), the saved       |
                              |  normalised input (scale trains)             |
        layernorm (native)    | the kernel's grad_input (a t d) and weight / | a t d + grad d
                              |  bias gradients, the incoming one alive      |  (x each trained)

    Measured with MemTracker on the reference (tests/conformance/test_finetune_loss.py): the whole step's
    backward peak, exact for an RMSNorm (scale frozen, trained or absent; bf16, fp32) before
    the head with LoRA or frozen blocks. Not modelled: the blocks' own backward transients,
    which hold the peak instead when the norm's is small (a LayerNorm: the last block's MLP,
    2.1 T D bytes over with LoRA in bf16) or when full fine-tuning has grown the gradients."""
    if norm == "rmsnorm":
        return 20 * t * d - a * t * d - 4 * t - (a * t * d - grad * d if scale else 0) + 4
    return a * t * d + grad * d * (scale + bias) + 4


def backward_early(work: Workload, vocab: int, d: int, a: int, grad: int = 0) -> int:
    """Bytes above the saved activations (and the loss) while backward runs through the loss
    and the head; ``grad``: the head's gradient bytes per element when it trains (else 0).

    Chunked, in autograd's order (the last chunk first; every chunk's loss before any chunk's
    head, which ran earlier in the forward): the cross-entropy of chunk i holds its two fp32
    gradients (8 V r_i) while each later chunk has freed its log-probabilities, total weight
    and label copy and left a 16-bit logits gradient (a V r_j). Then the head, chunk by chunk:
    a trained head's weight gradients meet in autograd's input buffer, old + new -> sum (three
    V x D at once, from the second chunk on), beside the logits gradients not yet used, the
    input gradients made (D a r_j), less the saved inputs freed (a chunk's copy with its node;
    the whole hidden states with the last node that holds a view of them)."""
    t = work.rows("seq")
    if work.loss == "fused-linear":
        return 0
    if work.loss == "full":  # the kernel's (HF's: two fp32 T x V gradients)
        return full_loss_extra(loss_kernel(work), t, vocab, a)[1]
    if "loss" in work.fused:
        return compiled_chunks_backward(work, vocab, d, a, grad)
    b, sizes = work.batch, _sizes(work)
    n = len(sizes)
    rows = [b * s for s in sizes]
    copy = [n > 1 and b > 1 and s >= 2 for s in sizes]
    views = [i for i, s in enumerate(sizes) if s >= 1 and not (b > 1 and s >= 2)]
    after = [0] * (n + 1)  # bytes the chunks after i have freed by the time i runs
    for i in range(n - 1, -1, -1):
        after[i] = after[i + 1] + (4 - a) * vocab * rows[i] + 4 + (8 * rows[i] if copy[i] else 0)
    # chunk i's own label copy is gone with its nll_loss node; 4 bytes: the sum's gradient
    best = max(8 * vocab * rows[i] - after[i + 1] - (8 * rows[i] if copy[i] else 0)
               + (4 if n > 1 else 0) for i in range(n))
    if grad and n > 1:
        done = -after[0]
        later = copied = 0  # rows of chunks i..N; copied (saved) rows among them
        for i in range(n - 1, -1, -1):  # the accumulation of chunk i (0-based), i < N - 1
            later += rows[i]
            copied += rows[i] if copy[i] else 0
            if i == n - 1:
                continue
            freed = d * a * copied + (d * a * t if views and i <= views[0] else 0)
            best = max(best, done + 3 * vocab * d * grad + 4 + (d * a - a * vocab) * later
                       - freed)
    return best


def compiled_chunks_backward(work: Workload, vocab: int, d: int, a: int, grad: int) -> int:
    """Chunked loss with each chunk's cross-entropy compiled (torchtune's compile_loss:
    ``torch.compile(loss.compute_cross_entropy)``; Workload.fused "loss"): every chunk is the
    compiled kernel of ``full_loss_extra`` on its rows. Its forward makes only per-row
    buffers and saves the chunk's logits (already alive: the output projection made every
    chunk before the loss), so nothing T x V is transient there; in backward each chunk's
    kernel writes its logits' gradient in their dtype (a V r_i) beside its saved logits, which
    its node then frees: the gradients of the chunks done replace their saved logits one for
    one, and the largest chunk's gradient is the transient. A trained head then sums its
    chunks' weight gradients as the eager chunks do (old + new -> sum: three V x D)."""
    best = max(full_loss_extra("compiled", r, vocab, a)[1] for _, r in chunk_runs(work))
    if grad and loss_chunks(work.loss) > 1:
        best = max(best, 3 * vocab * d * grad + 4)
    return best


def loss_kernel(work: Workload) -> str:
    """The kernel that runs ``work``'s full loss (the T x V logits at once): "compiled" when
    the stack compiles the loss (fused "loss": torch.compile of HF's code, torchtitan's), else
    ``work.loss_kernel`` (LOSS_KERNELS, named after the function each stack calls; "hf" by
    default)."""
    return "compiled" if "loss" in work.fused else work.loss_kernel


def full_loss_extra(kernel: str, t, vocab: int, a: int) -> tuple:
    """(forward peak, early backward) bytes above the saved activations of the full loss run
    by ``kernel`` on t rows of ``vocab`` logits made in the activation dtype (a bytes). The one
    rule of the loss's T x V transient: the engine's phases (``memory.loss_temp``) and the
    planner's "logits" category (``memory.loss_transient``, the larger of the two) read it.
    What each kernel saves (4 V a row for the three eager ones, a V + 8 compiled) is declared on
    the loss op (``Op.saved`` / ``Op.saved_fused``) and counted with the activations.

        kernel          | forward peak, beside the saved     | early backward, beside the saved
        ----------------|------------------------------------|-----------------------------------
        hf              | the logits (a) and their fp32 copy | nll_loss's fp32 gradient and
         F.cross_entropy|  (4; none in fp32) beside the     |  log_softmax's beside the saved
         (logits.float()|  saved fp32 log-probabilities:     |  log-probabilities: 8 T V
         , labels)      |  T V (a + 4)                       |
        vocab_parallel  | the caller's logits (a) beside     | the fp32 gradient is the saved
         (Megatron-Core |  their fp32 copy, which becomes    |  softmax, written in place;
         tensor_parallel|  the saved softmax in place: a T V |  autograd casts it to the logits'
         .cross_entropy)|  (fp32 logits: the copy is the     |  dtype (engine.cpp validate_
                        |  logits themselves: 0)             |  outputs): a T V (fp32: 0)
        sharded         | the fp32 logits (the model's       | as vocab_parallel: the softmax
         (nanotron      |  cast_to_fp32 output, held by the |  becomes the gradient in place;
         _ShardedCross  |  caller) beside their shifted      |  the cast's backward (ToCopy-
         Entropy)       |  copy, which becomes the saved     |  Backward) makes it a: a T V
                        |  softmax: 4 T V                    |  (fp32: no cast, 0)
        compiled        | nothing: one kernel reads the      | one kernel writes the logits'
         (torch.compile |  logits (saved) and keeps two fp32 |  gradient in their dtype from the
         of hf's code:  |  row statistics (saved)            |  saved logits and statistics: a T V
         torchtitan)    |                                    |

    Not modelled: the per-row tensors (a few int64 / fp32 vectors of T: Megatron's and
    nanotron's masked targets, aranges and 1 - mask, made in the backward or saved and freed
    before its peak; the compiled backward's fp32 row buffer), within 32 bytes a row either
    way, measured in tests/conformance/test_loss_kernels.py.

    Sources (the T x V lines), Megatron-LM d98e8a64
    megatron/core/tensor_parallel/cross_entropy.py: forward ``vocab_parallel_logits =
    vocab_parallel_logits.float()``, "In-place subtraction reduces memory pressure."
    ``vocab_parallel_logits -= logits_max.unsqueeze(dim=-1)``, ``exp_logits =
    vocab_parallel_logits; torch.exp(vocab_parallel_logits, out=exp_logits)``,
    ``exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))``, ``ctx.save_for_backward(exp_logits,
    target_mask, masked_target_1d)``; backward "All the inputs have softmax as thier gradient."
    ``grad_input = softmax``, ``grad_2d[arange_1d, masked_target_1d] -= softmax_update``,
    ``grad_input.mul_(grad_output.unsqueeze(dim=-1))``, ``return grad_input, None, None, None``;
    its caller (language_module.py compute_language_model_loss) passes the logits as the output
    layer made them. nanotron 9b0de5be src/nanotron/parallel/tensor_parallel/functional.py
    _ShardedCrossEntropy: ``sharded_logits = sharded_logits - logits_max.unsqueeze(dim=-1)`` (not
    in place), then ``torch.exp(sharded_logits, out=exp_logits)``, ``exp_logits.div_(...)``,
    ``ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)``; backward ``grad_input =
    softmax`` ... ``grad_input.mul_(...)``; its input is models/llama.py's ``fp32_sharded_logits =
    self.cast_to_fp32(x=sharded_logits)["output"]`` (``lambda x: x.float()``), returned to
    LlamaForTraining.forward, which holds it through the loss. Compiled: the code inductor
    generates on the CPU for reference/model.py's ``_cross_entropy`` (torch 2.13): the forward
    allocates only (T, 1) fp32 buffers and scalars and returns the logits, amax and log-sum-exp
    as saved; the backward allocates a (T, 1) fp32 buffer and the (B, S, V) gradient in the
    logits' dtype. Each measured on the CPU (tests/conformance/test_loss_kernels.py): the two in-place
    kernels' single-rank arithmetic with MemTracker, the compiled kernel's buffers from its
    generated code."""
    tv = t * vocab
    cast = a if a != 4 else 0  # a dtype cast that fp32 logits do not need
    if kernel == "hf":
        return tv * (a + (4 if a != 4 else 0)), 2 * logits_grad_bytes("full", 1, t, vocab)
    if kernel == "vocab_parallel":
        return cast * tv, cast * tv
    if kernel == "sharded":
        return 4 * tv, cast * tv
    if kernel == "compiled":
        return 0 * tv, a * tv
    raise WorkloadError(f"loss kernel ({kernel!r}) must be compiled or one of "
                        f"{', '.join(LOSS_KERNELS)}")


def _chunk_views(work: Workload) -> tuple[bool, int]:
    """(whether some chunk is a view, rows of the chunks that are copies) of a (B, S, ...)
    tensor split along S: a (B, s) slice reshapes to a view when B = 1 or s = 1 (s = 0:
    empty), else it is copied (the label chunks; the lm_head's folded input)."""
    n = loss_chunks(work.loss)
    if n == 1 or work.batch == 1:
        return True, 0
    q, rem = divmod(work.seq, n)
    sizes = [(q + 1, rem), (q, n - rem)]
    copied = sum(work.batch * s * k for s, k in sizes if s >= 2)
    return any(s == 1 and k for s, k in sizes), copied


def chunk_copy_extra(work: Workload, row_bytes: int) -> int:
    """Bytes saved beyond one row of ``row_bytes`` per token by a tensor the chunked loss
    splits: when every chunk is a copy the copies replace the tensor (0); when some chunk is
    a view the whole tensor stays saved beside the copies."""
    if loss_chunks(work.loss) == 1:
        return 0
    view, copied = _chunk_views(work)
    return row_bytes * (copied - (0 if view else work.rows("seq")))


def held_labels(work: Workload) -> int:
    """Label bytes alive beside the saved tensors (see above)."""
    if work.loss == "fused-linear":
        return 8 * work.rows("seq")
    return 0 if _chunk_views(work)[0] else 8 * work.rows("seq")
