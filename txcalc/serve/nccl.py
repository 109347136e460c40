"""NCCL's device memory per communicator and the vLLM releases' communicator bytes
(``vllm_nccl_bytes``), read from NCCL's and vLLM's code at the versions named below; the
serving KV capacity (``serve.kv``) counts them as non-torch memory."""

from ..units import cdiv


# --- NCCL's device memory per communicator (engines vllm-0.2 and vllm-0.6.5) ---------------------
# Read from NCCL's code at the versions those vLLM releases ran: PyTorch 2.1's NCCL 2.18.1 for
# v0.2.x and PyTorch 2.5.1's NCCL 2.21.5 for v0.6.5 (PyPI metadata: vllm 0.6.5 requires
# torch==2.5.1, torch 2.5.1 requires nvidia-nccl-cu12==2.21.5). The constants below are the same
# in both (src/init.cc, src/include/device.h, src/include/comm.h, src/transport/{p2p,net}.cc).
#: NCCL_STEPS (src/include/device.h): slots of every connection FIFO
NCCL_STEPS = 8
#: DEFAULT_LL_BUFFSIZE = NCCL_LL_LINES_PER_THREAD (8) x NCCL_LL_MAX_NTHREADS (512) x NCCL_STEPS x
#: sizeof(union ncclLLFifoLine) (16 B): 512 KiB
NCCL_LL_BUFF_BYTES = 8 * 512 * NCCL_STEPS * 16
#: DEFAULT_LL128_BUFFSIZE = NCCL_LL128_ELEMS_PER_THREAD (120) x NCCL_LL128_MAX_NTHREADS (640) x
#: NCCL_STEPS x sizeof(uint64_t): 4,915,200 B
NCCL_LL128_BUFF_BYTES = 120 * 640 * NCCL_STEPS * 8
#: DEFAULT_BUFFSIZE (1 << 22, "4MiB"): the SIMPLE protocol's FIFO (NCCL_BUFFSIZE)
NCCL_SIMPLE_BUFF_BYTES = 1 << 22
#: sizeof(struct ncclSendMem) = sizeof(struct ncclRecvMem) = MEM_ALIGN (4096; src/include/comm.h)
NCCL_CONN_MEM_BYTES = 4096
#: CUDA_IPC_MIN (2 MiB): p2pSendSetup / p2pRecvSetup round every connection's buffer up to it
NCCL_IPC_ALIGN = 2 * 2**20
#: src/transport/net.cc: the NET transport's shared P2P buffer is p2pnChannels x NCCL_SHARED_STEPS
#: x p2pChunkSize, allocated on the GPU at every communicator's init ("Connect to local net
#: proxy": ncclProxyMsgSharedInit -> sharedNetBuffersInit, single node included: NVIDIA/nccl
#: issue #2363 logs it failing as "Failed to CUDA calloc 536870912 bytes" for a single-rank
#: communicator, 64 channels x 16 x 512 KiB in NCCL 2.28)
NCCL_SHARED_STEPS = 16
#: NCCL_P2P_NVL_CHUNKSIZE default (1 << 19) when every path is NVLink (src/init.cc)
NCCL_P2P_NVL_CHUNK_BYTES = 1 << 19
#: GPUs whose NCCL topology is derived here (SXM parts on an NVSwitch baseboard): (compute
#: capability, coll channels, p2p channels per peer). Coll channels: NCCL's ring search
#: (src/graph/search.cc) over one NVLink bundle to the NVSwitch of links x SM80/SM90_NVLINK_BW
#: (12 x 20 = 240 GB/s; 18 x 20.6 = 370.8 GB/s) keeps 6 channels (at 40 GB/s for sm80, 60 for
#: sm90), ncclTopoCompute doubles them to 12 and ncclTopoPostset (src/graph/connect.cc) to 24.
#: P2P channels per peer (src/graph/paths.cc ncclTopoComputeP2pChannels): nextPow2(min(24,
#: 2 x links)) = 32. Published logs agree: 2 x H20 (sm90, 18 links) "24 coll channels ... 32 p2p
#: channels, 32 p2p channels per peer" (NVIDIA/nccl issue #1781), 8 x H100 p2p "Channel 00/1 ...
#: 31/1" per pair of GPUs (NVIDIA/nccl issue #1685), and nccl_communicator_bytes reproduces
#: NVIDIA/nccl issue #964's measured 544 and 688 MB per communicator on 4 x A100
#: (tests/published/test_vllm_logs.py)
NCCL_NVSWITCH_GPUS = {"a100-40gb": (80, 24, 32), "a100-80gb": (80, 24, 32),
                      "h100-sxm": (90, 24, 32), "h200": (90, 24, 32), "h20": (90, 24, 32)}
#: vLLM v0.6.5's custom all-reduce (custom_all_reduce.py): two cudaMalloc'd IPC buffers of
#: max_size (8 MiB; the first also holds ops.meta_size(), a few KiB, left out) and an 8 MiB torch
#: ``rank_data``, on tensor-parallel groups of _SUPPORTED_WORLD_SIZES ranks (2, 4, 6, 8)
V065_CUSTOM_ALLREDUCE_BYTES = 3 * 8 * 2**20
V065_CUSTOM_ALLREDUCE_SIZES = (2, 4, 6, 8)


def nccl_connection_bytes(read: bool) -> tuple[int, int]:
    """GPU bytes of one P2P connection (NCCL 2.18-2.21, src/transport/p2p.cc): (the receiver's
    buffer, the sender's). The receiver holds ncclRecvMem and the LL, LL128 and SIMPLE FIFOs,
    except SIMPLE under P2P read, which sits after the sender's ncclSendMem; each rounded up to
    CUDA_IPC_MIN. P2P read is on for NVLink between two sm80 GPUs only (src/graph/paths.cc
    ncclTopoCheckP2p). sm90: 10 MiB + 2 MiB (NVIDIA/nccl issue #1685's H100 allocations of
    10,485,760 and 2,097,152 bytes); sm80: 6 + 6 MiB."""
    recv = NCCL_CONN_MEM_BYTES + NCCL_LL_BUFF_BYTES + NCCL_LL128_BUFF_BYTES \
        + (0 if read else NCCL_SIMPLE_BUFF_BYTES)
    send = NCCL_CONN_MEM_BYTES + (NCCL_SIMPLE_BUFF_BYTES if read else 0)
    return tuple(cdiv(b, NCCL_IPC_ALIGN) * NCCL_IPC_ALIGN for b in (recv, send))


def nccl_communicator_bytes(gpu_name: str, ranks: int, rank: int) -> int | None:
    """GPU bytes one NCCL communicator of ``ranks`` GPUs in one NVSwitch node holds on ``rank``
    after init (collectives only; None for a GPU outside NCCL_NVSWITCH_GPUS).

    NCCL 2.18/2.21 connect rings and trees at init (src/init.cc, ``ncclTransportP2pSetup`` on
    both graphs): on every coll channel a rank receives from its ring prev and sends to its ring
    next; the intra-node tree is a chain (src/graph/connect.cc: ``tree.up = treeIntra[i-1]``,
    ``tree.down[0] = treeIntra[i+1]``) that needs both directions to each neighbour, and a
    connection already made is reused (src/transport.cc). With the ring and the chain in the
    same GPU order (both searches walk the NVSwitch's GPUs by index), the chain adds one receive
    on the first rank, one receive and one send on the middle ranks, one send on the last; two
    ranks add nothing. Plus the NET shared P2P buffer (NCCL_SHARED_STEPS)."""
    if gpu_name not in NCCL_NVSWITCH_GPUS or ranks < 2:
        return None
    cc, channels, p2p_per_peer = NCCL_NVSWITCH_GPUS[gpu_name]
    recv, send = nccl_connection_bytes(read=cc == 80)
    n_recv, n_send = 1, 1
    if ranks > 2:
        n_recv += rank < ranks - 1
        n_send += rank > 0
    p2p_channels = 1 << (channels - 1).bit_length()  # nextPow2(min(nChannels, MAXCHANNELS))
    shared = p2p_channels * NCCL_SHARED_STEPS * NCCL_P2P_NVL_CHUNK_BYTES
    return channels * (n_recv * recv + n_send * send) + shared


def vllm_nccl_bytes(engine: str, gpu_name: str, tp: int, pp: int) -> int | None:
    """The communicators' GPU bytes a vLLM release counts on its fullest rank (the engine sizes
    the cache from the smallest of its workers' blocks), or None where this is not derived (PP,
    a GPU outside NCCL_NVSWITCH_GPUS, other engines, NVLS: sm90 at more than 2 GPUs).

    vllm-0.2 (v0.2.x worker.py ``_init_distributed_environment``): the world group's warm-up
    all-reduce and the TP group's collectives make two communicators of tp ranks (the later
    releases this rule also covers, v0.3-v0.6.3 with CuPy/PyNccl communicators and custom
    all-reduce, are not re-derived).
    vllm-0.6.5 (vllm/distributed/parallel_state.py of v0.6.5; every one made after
    ``init_gpu_memory``, so counted): the TP group's PyNccl communicator (created with a warm-up
    all-reduce) and torch's NCCL communicator of the TP device group, which the profile's logits
    gather creates (logits_processor.py -> ``GroupCoordinator.gather`` ->
    ``torch.distributed.gather``: ncclRecv from every rank on the root, torch/csrc/cuda/nccl.cpp),
    connecting 32 P2P channels per peer (src/enqueue.cc: a send or receive connects every
    ``p2pnChannelsPerPeer`` channel); the world group and the single-rank PP groups issue no
    device collective; plus the custom all-reduce buffers. NVLS: NCCL 2.21.5 skips it at <= 2
    GPUs (src/transport/nvls.cc ``gpuCount <= 2``); above that on sm90 it is not derived."""
    if pp != 1 or gpu_name not in NCCL_NVSWITCH_GPUS or tp < 2:
        return None
    cc, _, p2p_per_peer = NCCL_NVSWITCH_GPUS[gpu_name]
    if engine == "vllm-0.2":
        return max(2 * nccl_communicator_bytes(gpu_name, tp, r) for r in range(tp))
    if engine != "vllm-0.6.5" or (cc >= 90 and tp > 2):
        return None
    recv, send = nccl_connection_bytes(read=cc == 80)
    custom = V065_CUSTOM_ALLREDUCE_BYTES if tp in V065_CUSTOM_ALLREDUCE_SIZES else 0
    gather = [(tp - 1) * p2p_per_peer * recv] + [p2p_per_peer * send] * (tp - 1)
    return max(2 * nccl_communicator_bytes(gpu_name, tp, r) + gather[r] + custom
               for r in range(tp))
