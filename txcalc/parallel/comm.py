"""Collectives: bytes each GPU sends and the time over the link the group spans.

Ring algorithms (NCCL's defaults for large messages); ``size`` is the full buffer in bytes:

    collective      | bytes sent per GPU     | used for
    ----------------|------------------------|--------------------------------------------
    all-reduce      | 2 (n-1)/n * size       | DP gradients (zero 0), TP activations (no SP)
    reduce-scatter  | (n-1)/n * size         | ZeRO-2/3 gradients, TP with SP
    all-gather      | (n-1)/n * size         | ZeRO-3 weights, ZeRO-1/2 updated weights, SP
    all-to-all      | (n-1)/n * size         | EP token dispatch and combine
    point-to-point  | size                   | PP activations, CP ring of keys/values

time = latency + bytes / bandwidth, bandwidth = the intra-node link when the whole group sits
in one node (group size x rank stride <= GPUs per node), else the inter-node one: each GPU has
its own NIC, and a ring collective (all-reduce, reduce-scatter, all-gather) of a group with r
ranks in each node runs one NCCL channel per NIC, so it moves r NICs' worth (capped by the
intra-node link). NVIDIA, on two 8-GPU HGX nodes: "You should achieve around 48GB/s from each
CX7 NIC at 400Gbps. Then with NVLink based nodes that can be aggregated to achieve up to
~396GB/s with the RING protocol" (NVIDIA/nccl-tests#319); two HGX A100 nodes with four 200 Gb/s
NICs measure 91 GB/s all-reduce bus bandwidth (NVIDIA/nccl-tests#100: 4 x 25 = 100). "Alltoall
cannot aggregate the bandwidth of multiple NICs" (NCCL's maintainer, NVIDIA/nccl-tests#267):
all-to-all and point-to-point run at one NIC's speed. Latency: 10 us a collective inside a
node, 20 us across nodes (order of NCCL's measured small-message latency).

Overlap assumptions (used by ``train.evaluate``): the CP ring overlaps the attention
compute of its layer; ZeRO-3 gathers overlap the compute of the micro-batch they serve; EP
all-to-alls sit on the critical path. TP/SP traffic, ZeRO-1/2's parameter all-gather, DP
gradient reduction and PP sends overlap only as ``TrainSetting.overlap`` says (the switches of
txcalc.engine.stacks: by default gradient reduction behind the last micro-batch's backward only).
Offloaded recompute checkpoints cross the host link (``PCIE_BYTES_PER_S``) out in forward and
back in backward, behind the stage's compute.

All functions take numbers or numpy arrays.
"""

from __future__ import annotations

#: host link: PCIe 4.0 x16, 31.5 GB/s per direction (PCI-SIG), used for offload traffic
PCIE_BYTES_PER_S = 31.5e9
LATENCY_INTRA_S = 10e-6
LATENCY_INTER_S = 20e-6
FACTOR = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0, "all_to_all": 1.0}


def bytes_sent(kind: str, size, n):
    """Bytes one GPU sends for a collective over ``n`` GPUs on a ``size``-byte buffer."""
    if kind == "p2p":
        return size
    return FACTOR[kind] * (n - 1) / n * size


#: the collectives whose rings run one channel per NIC, so that a group with r ranks in each
#: node moves its inter-node traffic over r NICs at once (NCCL; all-to-all does not:
#: "Alltoall cannot aggregate the bandwidth of multiple NICs", NVIDIA/nccl-tests#267)
RING_KINDS = ("all_reduce", "reduce_scatter", "all_gather")


def nics_per_group(n, stride, gpu):
    """The NICs of one node that a group of ``n`` ranks ``stride`` apart has to itself: its
    ranks in the node (the node's other GPUs belong to the groups running beside it)."""
    import numpy as np
    return np.clip(gpu.gpus_per_node // np.maximum(np.asarray(stride), 1), 1, np.asarray(n))


def link(n, stride, gpu):
    """(bandwidth bytes/s, latency s) of a group of ``n`` ranks ``stride`` apart."""
    import numpy as np
    inside = np.asarray(n) * np.asarray(stride) <= gpu.gpus_per_node
    bw = np.where(inside, gpu.intra_node_bytes_per_s, gpu.inter_node_bytes_per_s)
    lat = np.where(inside, LATENCY_INTRA_S, LATENCY_INTER_S)
    return bw, lat


def collective_s(kind: str, size, n, stride, gpu, count=1):
    """Seconds for ``count`` collectives of ``size`` bytes over a group (0 when n == 1)."""
    import numpy as np
    bw, lat = link(n, stride, gpu)
    if kind in RING_KINDS:
        bw = np.where(np.asarray(n) * np.asarray(stride) <= gpu.gpus_per_node, bw,
                      np.minimum(bw * nics_per_group(n, stride, gpu), gpu.intra_node_bytes_per_s))
    t = lat + bytes_sent(kind, size, n) / np.maximum(bw, 1.0)  # 0 bytes when n == 1
    return count * np.where(np.asarray(n) > 1, t, 0.0)
