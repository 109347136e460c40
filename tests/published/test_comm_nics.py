"""Collectives across nodes against NCCL's measured bus bandwidths: a ring collective (all-
reduce, reduce-scatter, all-gather) of a group with r ranks in each node moves r NICs' worth
(one NCCL channel per NIC); all-to-all and point-to-point run at one NIC's speed."""

from __future__ import annotations

import dataclasses

import pytest

from txcalc.engine.hardware import get_gpu
from txcalc.parallel import comm

SIZE = 8 * 2**30  # a large message: latency is negligible


def busbw(kind, n, stride, gpu):
    """nccl-tests' bus bandwidth: the bytes each rank sends over the collective's time."""
    return comm.bytes_sent(kind, SIZE, n) / float(comm.collective_s(kind, SIZE, n, stride, gpu))


def test_two_h100_nodes_ring_reaches_nvidias_figure():
    """NVIDIA/nccl-tests#319 (NVIDIA): "around 48GB/s from each CX7 NIC at 400Gbps. Then with
    NVLink based nodes that can be aggregated to achieve up to ~396GB/s with the RING
    protocol": 16 ranks on two 8-GPU H100 nodes."""
    h100 = get_gpu("h100-sxm")
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        assert busbw(kind, 16, 1, h100) == pytest.approx(396e9, rel=0.02)


def test_two_a100_nodes_with_four_nics_measure_91_gb_per_s():
    """NVIDIA/nccl-tests#100: two HGX A100 nodes with four 200 Gb/s NICs each, all_reduce_perf
    1-8 GB: 91 GB/s bus bandwidth. Four NICs for eight GPUs: 12.5 GB/s per GPU on average."""
    a100_4nic = dataclasses.replace(get_gpu("a100-80gb"), inter_node_bytes_per_s=12.5e9)
    assert busbw("all_reduce", 16, 1, a100_4nic) == pytest.approx(91e9, rel=0.10)


def test_what_does_not_aggregate_nics():
    """One rank per node (stride 8, e.g. data parallelism beside TP 8) has one NIC; all-to-all
    "cannot aggregate the bandwidth of multiple NICs" (NVIDIA/nccl-tests#267), nor can a
    point-to-point send; inside a node the NVLink figure stands."""
    h100 = get_gpu("h100-sxm")
    assert busbw("all_reduce", 64, 8, h100) == pytest.approx(h100.inter_node_bytes_per_s,
                                                              rel=2e-3)
    assert busbw("all_to_all", 16, 1, h100) == pytest.approx(h100.inter_node_bytes_per_s,
                                                              rel=2e-3)
    assert busbw("p2p", 2, 8, h100) == pytest.approx(h100.inter_node_bytes_per_s, rel=2e-3)
    assert busbw("all_reduce", 8, 1, h100) == pytest.approx(h100.intra_node_bytes_per_s,
                                                             rel=2e-3)
    # a group with 2 ranks a node (stride 4) has 2 NICs; the cap is the intra-node link
    assert busbw("all_gather", 32, 4, h100) == pytest.approx(2 * h100.inter_node_bytes_per_s,
                                                             rel=2e-3)
    fat_nics = dataclasses.replace(h100, inter_node_bytes_per_s=100e9)
    assert busbw("all_gather", 16, 1, fat_nics) == pytest.approx(h100.intra_node_bytes_per_s,
                                                                 rel=2e-3)
