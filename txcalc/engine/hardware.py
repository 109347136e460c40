"""GPU catalog: memory, bandwidths and dense peak FLOP/s, one row per GPU with its datasheet.

The catalog is ``txcalc/data/gpus.csv``; users add or override rows with their own file of the
same columns (``--gpu-file my.csv``, ``load_catalog(extra=...)``). The user's rows win: a name
or alias in their file (``h100``) names their row, and no longer the catalog row whose alias
it was; a name or alias given twice within one file is an error. The file is read by
``safeio`` (regular file, size cap); names and aliases are at most 64 printable characters,
numbers finite and at most 10^6 in the column's unit (``MAX_CELL``).

    column              | unit                     | meaning
    --------------------|--------------------------|-------------------------------------------
    name                |                          | lower-case key (``h100-sxm``)
    aliases             | ``;``-separated          | other names for the same row (``h100``)
    memory, memory_unit | GiB (2^30) or GB (1e9)   | device memory as the datasheet states it;
                        |                          |   HBM/GDDR capacities ("80GB") are binary
    hbm_gb_per_s        | GB/s (1e9 bytes/s)       | device memory bandwidth
    fp32..int8          | TFLOP/s (TOPS), 1e12     | DENSE tensor peak per dtype (the sparsity
                        |                          |   figures of the datasheets are halved);
                        |                          |   0 = the dtype has no tensor-core path
    intra_node_gb_per_s | GB/s per GPU, one way    | NVLink / xGMI / PCIe to the other GPUs of
                        |                          |   the node (NVLink 900 GB/s "bidirectional"
                        |                          |   on H100 = 450 one way)
    inter_node_gb_per_s | GB/s per GPU, one way    | network to other nodes (400 Gb/s NDR = 50)
    gpus_per_node       |                          | GPUs that share the intra-node link
    source              | URL                      | the datasheet the numbers came from
    cuda_total_gib      | GiB (2^30), optional     | CUDA's total where a log shows it differs
                        |                          |   from 0.99 x the datasheet (ECC on, a
                        |                          |   GeForce card); empty = derived
    cuda_total_source   | URL, optional            | the log that shows that total

A GPU's memory, one rule for every command (``memory``, ``fit``, ``plan``, ``serve``, ``report``):
every fit check compares against ``Gpu.usable_bytes``, what CUDA reports as the device's total
(``torch.cuda.get_device_properties(0).total_memory``, nvidia-smi's total less a little), not
the datasheet capacity ``Gpu.memory_bytes`` (exact bytes: the sheets' "80GB" of HBM is
80 GiB). It is the datasheet x ``CUDA_VISIBLE_FRACTION`` (an 80 GiB H100: 79.20 GiB), or the
row's ``cuda_total_gib`` where a cited log shows CUDA reporting less (an L40S ships with ECC on,
which takes 3.1 GiB of its 48: 44.42 GiB). The
planner's framework terms (CUDA context, communication buffers, fragmentation) are charged
against it, as the CUDA context comes out of CUDA's total; serving sizes vLLM's KV cache from
it. ``--gpu-gb N`` is the user's usable figure, N x 1e9 bytes taken as CUDA's total as it is
(``with_usable_gb``; nothing is taken off it); ``gpu_memory`` gives a command its figure and
``memory_words`` the words that name it (GiB for a catalog row, GB for ``--gpu-gb``). The H200:
the datasheet's 141 GB is 141 GiB (151.40 GB); nvidia-smi on an H200 SXM shows 143,771 MiB
(140.40 GiB, 150.75 GB: the device of issue 18); CUDA's total is ~0.4 GiB below nvidia-smi's
(vLLM logs 79.22 GiB on an 80 GiB H100, whose nvidia-smi shows 81,559 MiB = 79.65 GiB), so
``usable_bytes`` = 0.99 x 141 GiB = 139.59 GiB (149.88 GB) is the figure to expect there.

Notes on rows: A10G is AWS's variant of the A10 and has no NVIDIA sheet of its own: its row
repeats the A10 datasheet. RTX 4090 bf16/fp16 figures are with fp32 accumulation (Ada
whitepaper, Appendix A). B200 is the HGX B200 part (180 GB, 1000 W). Inter-node bandwidths are
the usual one-NIC-per-GPU fabric of the vendor's reference system, not a property of the chip.
T4 and V100 have no bf16/tf32 tensor path (0), V100 no int8 one. RTX 3090 and RTX A6000 come
from the GA102 whitepaper (Appendix A: GeForce fp16/bf16 with fp32 accumulation at half the
professional card's rate). L40 is the L40 datasheet (not the L40S). H20 has no public NVIDIA
datasheet: its figures are those reported at launch (SemiAnalysis, Nov 2023: 96 GB HBM3,
4.0 TB/s, 148 dense bf16 TFLOP/s, NVLink 900 GB/s). GB200 is one Blackwell GPU of a GB200
NVL72 (13.4 TB HBM3e / 72 = 186 GB; dense = half the sheet's sparse figures; fp32 is not on
the sheet: 2 x its fp64, 45 TFLOP/s, as on HGX B200); gpus_per_node 72 is the NVLink domain.
MI250X is the OAM module (two dies); ROCm shows each die as its own 64 GiB device, the
``mi250x-gcd`` row, which is what a rank of a training job gets. Gaudi 3: Intel states only the
bf16 and fp8 matrix peaks (1,835 TFLOP/s; Hot Chips 2024), so fp32/tf32/fp16 are 0 (unknown);
21 of its 24 200GbE ports link the node's eight (525 GB/s one way), 3 leave it (75 GB/s).
TPU v5e/v5p: Google's Cloud TPU pages (16 / 95 GiB HBM, 197 / 459 bf16 TFLOP/s, ICI 400 /
1,200 GB/s bidirectional per chip, so 200 / 600 one way); "per node" is the ICI domain the
planner may keep TP in (a v5e pod of 256 chips, a v5p cube of 64), the inter-node figure the
data-centre network (v5e: 2 x 100 Gb/s per 8-chip host; v5p: 50 Gb/s per chip).
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import io
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path

from ..errors import TxcalcError
from ..inputs import GPU_GB_RANGE

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
COLUMNS = ("name", "aliases", "memory", "memory_unit", "hbm_gb_per_s", "fp32_tflops",
           "tf32_tflops", "bf16_tflops", "fp16_tflops", "fp8_tflops", "int8_tops",
           "intra_node_gb_per_s", "inter_node_gb_per_s", "gpus_per_node", "source")
#: columns a GPU file may leave out (a row may leave them empty): CUDA's measured total, its log
OPTIONAL_COLUMNS = ("cuda_total_gib", "cuda_total_source")
UNITS = {"GiB": 2**30, "GB": 10**9}
#: CUDA reports 1% less than the datasheet capacity: vLLM logs "total_gpu_memory (79.22GiB)"
#: on an 80 GiB H100 (vllm-project/vllm PR #12126, PR #10511); an H200 shows about 139.7 GiB
#: of its 141 (nvidia-smi 143,771 MiB, a little above CUDA's figure)
CUDA_VISIBLE_FRACTION = 0.99


class GpuError(TxcalcError):
    """An unknown GPU name or a GPU file that cannot be read."""


@dataclass(frozen=True)
class Gpu:
    """One accelerator. Bandwidths in bytes/s and peaks in FLOP/s (floats: rates, not counts);
    memory in exact bytes."""

    name: str
    memory_bytes: int
    hbm_bytes_per_s: float
    peak_flops: dict[str, float] = field(hash=False)  #: dense peak per dtype, FLOP/s
    intra_node_bytes_per_s: float = 0.0
    inter_node_bytes_per_s: float = 0.0
    gpus_per_node: int = 8
    source: str = ""
    aliases: tuple[str, ...] = ()
    #: CUDA's total as the user gave it (``--gpu-gb``, ``with_usable_gb``); 0: derived
    usable_given: int = 0
    #: CUDA's total as a cited log shows it (the catalog's ``cuda_total_gib``); 0: derived
    cuda_total_bytes: int = 0
    cuda_total_source: str = ""

    @property
    def usable_bytes(self) -> int:
        """What CUDA reports as the device's total memory, the capacity of every fit check:
        the user's ``--gpu-gb``, else the row's measured ``cuda_total_gib``, else the
        datasheet x 0.99."""
        return (self.usable_given or self.cuda_total_bytes
                or int(self.memory_bytes * CUDA_VISIBLE_FRACTION))

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; GpuError when the GPU has no such tensor path."""
        p = self.peak_flops.get(dtype, 0.0)
        if p <= 0:
            raise GpuError(f"GPU {self.name} has no dense {dtype} peak in the catalog")
        return p

    @property
    def half_dtype(self) -> str:
        """The 16-bit dtype frameworks run on this GPU: bf16 where it has a bf16 tensor path,
        else fp16 where it has that (T4, V100: compute capability < 8.0, where vLLM's
        ``dtype="auto"`` casts a bf16 checkpoint to fp16 and the HF Trainer takes ``--fp16``,
        not ``--bf16``), else bf16 (the catalog gives the GPU neither)."""
        has = self.peak_flops.get
        return "fp16" if has("bf16", 0) <= 0 < has("fp16", 0) else "bf16"


#: Bounds on GPU-file cells: 100x today's parts (B200: 180 GB, 8 TB/s, 4.5 PFLOP/s fp8 dense)
MAX_CELL = {"memory": 10**6,  # GB or GiB: a petabyte per GPU
            "hbm_gb_per_s": 10**6, "tflops": 10**6, "link_gb_per_s": 10**6,
            "gpus_per_node": 2**16}
#: the least device memory a row may give: --gpu-gb's lower bound (inputs.GPU_GB_RANGE)
MIN_MEMORY_BYTES = int(GPU_GB_RANGE[0] * 1e9)
MAX_NAME = 64  #: characters of a GPU name or alias
MAX_TEXT = 1000  #: characters of any other cell (the source URL)


def _number(text: str, column: str, where: str) -> Decimal:
    text = str(text).strip()
    shown = text if len(text) <= 40 else text[:40] + "..."
    if len(text) > 40:  # Decimal would parse 1e999999 exactly; no datasheet needs 40 digits
        raise GpuError(f"{where}: column {column} ({shown!r}) is too long for a number")
    try:
        v = Decimal(text)
    except InvalidOperation:
        raise GpuError(f"{where}: column {column} ({shown!r}) is not a number") from None
    kind = ("memory" if column == "memory" else "tflops" if column.endswith(("_tflops", "_tops"))
            else "link_gb_per_s" if column.endswith("node_gb_per_s") else column)
    bound = MAX_CELL.get(kind, 10**6)
    if not v.is_finite() or v < 0 or v > bound:
        raise GpuError(f"{where}: column {column} ({shown!r}) must be a number in "
                       f"[0, {bound:,}]")
    return v


def _name(text: str, column: str, where: str) -> str:
    if len(text) > MAX_NAME or not text.isprintable():
        raise GpuError(f"{where}: {column} ({text[:40]!r}{'...' if len(text) > 40 else ''}) "
                       f"must be at most {MAX_NAME} printable characters")
    return text


def _parse_row(row: dict, where: str) -> Gpu:
    missing = [c for c in COLUMNS if c not in row or row[c] is None]
    if missing:
        raise GpuError(f"{where}: missing column(s) {', '.join(missing)}")
    name = _name(row["name"].strip().lower(), "name", where)
    if not name:
        raise GpuError(f"{where}: empty GPU name")
    aliases = tuple(_name(a.strip().lower(), "alias", where)
                    for a in row["aliases"].split(";") if a.strip())
    if len(row["source"]) > MAX_TEXT:
        raise GpuError(f"{where}: source ({len(row['source'])} characters) must be at most "
                       f"{MAX_TEXT}")
    unit = row["memory_unit"].strip()
    if unit not in UNITS:
        raise GpuError(f"{where}: memory_unit ({unit!r}) must be GiB or GB")
    memory = _number(row["memory"], "memory", where)
    hbm = _number(row["hbm_gb_per_s"], "hbm_gb_per_s", where)
    if memory <= 0 or hbm <= 0:
        raise GpuError(f"{where}: memory ({row['memory']}) and hbm_gb_per_s "
                       f"({row['hbm_gb_per_s']}) must be positive")
    if memory * UNITS[unit] < MIN_MEMORY_BYTES:  # 1e-12 GiB is 0 bytes: every share divides by it
        raise GpuError(f"{where}: memory ({row['memory']} {unit}) must be at least "
                       f"{MIN_MEMORY_BYTES / 1e9:g} GB, the least --gpu-gb takes")
    peaks = {d: float(_number(row[col], col, where)) * 1e12
             for d, col in ((d, f"{d}_tops" if d == "int8" else f"{d}_tflops") for d in DTYPES)}
    total_text = (row.get("cuda_total_gib") or "").strip()
    cuda_total = int(_number(total_text, "cuda_total_gib", where) * 2**30) if total_text else 0
    if total_text and not 0 < cuda_total <= int(memory * UNITS[unit]):
        raise GpuError(f"{where}: cuda_total_gib ({total_text}) must be positive and at most "
                       f"the memory ({row['memory']} {unit})")
    total_source = (row.get("cuda_total_source") or "").strip()
    if len(total_source) > MAX_TEXT:
        raise GpuError(f"{where}: cuda_total_source ({len(total_source)} characters) must be at "
                       f"most {MAX_TEXT}")
    per_node = _number(row["gpus_per_node"], "gpus_per_node", where)
    if per_node != per_node.to_integral_value() or per_node < 1:
        raise GpuError(f"{where}: gpus_per_node ({row['gpus_per_node']}) must be a positive "
                       "integer")
    return Gpu(name=name, memory_bytes=int(memory * UNITS[unit]), hbm_bytes_per_s=float(hbm) * 1e9,
               peak_flops=peaks,
               intra_node_bytes_per_s=float(_number(row["intra_node_gb_per_s"],
                                                    "intra_node_gb_per_s", where)) * 1e9,
               inter_node_bytes_per_s=float(_number(row["inter_node_gb_per_s"],
                                                    "inter_node_gb_per_s", where)) * 1e9,
               gpus_per_node=int(per_node), source=row["source"].strip(), aliases=aliases,
               cuda_total_bytes=cuda_total, cuda_total_source=total_source)


def parse_catalog(text: str, origin: str) -> dict[str, Gpu]:
    """GPU rows of a CSV text; ``origin`` names the file in errors."""
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None:
        raise GpuError(f"{origin}: empty GPU file (expected columns {', '.join(COLUMNS)})")
    missing = [c for c in COLUMNS if c not in reader.fieldnames]
    if missing:
        raise GpuError(f"{origin}: missing column(s) {', '.join(missing)}")
    gpus: dict[str, Gpu] = {}
    claimed: dict[str, int] = {}  # name or alias -> line that gave it
    rows, i = enumerate(reader, start=2), 1
    while True:
        try:
            i, row = next(rows)
        except StopIteration:
            break
        except csv.Error as e:  # a cell over the csv module's 128 KB field limit, a NUL
            raise GpuError(f"{origin} line {i + 1}: {e}") from None
        gpu = _parse_row(row, f"{origin} line {i}")
        for key in (gpu.name, *gpu.aliases):
            if key in claimed:
                raise GpuError(f"{origin} line {i}: GPU name {key!r} is already given on line "
                               f"{claimed[key]}")
            claimed[key] = i
        gpus[gpu.name] = gpu
    if not gpus:
        raise GpuError(f"{origin}: no GPU rows")
    return gpus


def load_catalog(extra: str | Path | None = None) -> dict[str, Gpu]:
    """The built-in catalog, with the rows of ``extra`` (a CSV path) added or overriding."""
    text = resources.files("txcalc").joinpath("data/gpus.csv").read_text(encoding="utf-8")
    gpus = parse_catalog(text, "gpus.csv")
    if extra is not None:
        from ..safeio import read_text, shown
        mine = parse_catalog(read_text(extra, GpuError), f"GPU file {shown(extra)}")
        # the user's rows win: a name or alias they give stops naming a catalog row
        claimed = {key for g in mine.values() for key in (g.name, *g.aliases)}
        gpus = {name: dataclasses.replace(g, aliases=tuple(a for a in g.aliases
                                                           if a not in claimed))
                for name, g in gpus.items() if name not in claimed}
        gpus.update(mine)
    return gpus


def get_gpu(name: str | Gpu, extra: str | Path | None = None) -> Gpu:
    """The GPU called ``name`` (or one of its aliases), else GpuError with close matches."""
    if isinstance(name, Gpu):
        return name
    gpus = load_catalog(extra)
    key = str(name).strip().lower()
    if key in gpus:
        return gpus[key]
    for gpu in gpus.values():
        if key in gpu.aliases:
            return gpu
    names = list(gpus) + [a for g in gpus.values() for a in g.aliases]
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(gpus)}"
    raise GpuError(f"unknown GPU {name!r}{hint}")


def gpu_memory(gpu: str | None = None, gpu_gb: float | None = None,
               gpu_file: str | Path | None = None, default: str | None = "h100-sxm"
               ) -> tuple[int, str, str]:
    """(bytes, label, source) of the GPU memory a fit is checked against: the one rule of
    every command. ``gpu`` names a catalog row (its usable memory, ``Gpu.usable_bytes``:
    CUDA's total, not the datasheet's); ``gpu_gb`` overrides it, or alone names an unlisted
    GPU: the usable memory in GB (1e9 bytes), as CUDA reports it; neither is ``default`` (the
    planner's default GPU)."""
    if gpu is None and gpu_gb is None:
        gpu = default
    if gpu_gb is not None:
        name = get_gpu(gpu, gpu_file).name if gpu is not None else f"{gpu_gb:g} GB GPU"
        return int(gpu_gb * 10**9), name, "--gpu-gb"
    g = get_gpu(gpu, gpu_file)
    return g.usable_bytes, g.name, g.source or "GPU catalog"


def with_usable_gb(g: Gpu, gpu_gb: float | None) -> Gpu:
    """``g`` with the user's ``--gpu-gb`` as its usable memory (CUDA's total, 1e9 bytes per
    GB, nothing taken off); ``g`` itself without one."""
    return g if gpu_gb is None else dataclasses.replace(g, usable_given=int(gpu_gb * 10**9))


def memory_words(gpu: Gpu | int, unit: str | None = None) -> str:
    """The capacity of a fit check in words: "79.2 GiB usable: CUDA's total, not the
    datasheet's 80 GiB" for a catalog row, in the catalog's unit (GiB, 2^30, for its binary
    capacities; GB, 1e9, for a row given in GB) or in ``unit`` ("GiB": the CLI and reports
    display memory in GiB);
    "80 GB usable, as given by --gpu-gb" for the user's figure (a row with --gpu-gb, or the
    bytes of --gpu-gb alone)."""
    if isinstance(gpu, int) or gpu.usable_given:
        usable = gpu if isinstance(gpu, int) else gpu.usable_bytes
        return f"{usable / 10**9:,.4g} GB usable, as given by --gpu-gb"
    unit = unit or ("GiB" if gpu.memory_bytes % 2**30 == 0 else "GB")
    size = UNITS[unit]
    return (f"{gpu.usable_bytes / size:,.1f} {unit} usable: CUDA's total, not the datasheet's "
            f"{gpu.memory_bytes / size:,.4g} {unit}")
