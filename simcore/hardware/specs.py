"""The hardware declarations: :class:`Hardware` (the six swept knobs of one PE),
:class:`Topology` (tier sizes, link latencies, per-dtype rates, host link),
:class:`Efficiency` (achievable fractions of peak) and :class:`HardwareFamily` (a named
hardware point with its topology). The named families themselves are data files read by
:mod:`simcore.hardware.families`.

Every spec is a frozen dataclass validated once at construction against its declared
ranges (:mod:`simcore.model.checks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SpecError
from ..model.checks import Range, flag, validate_table

__all__ = ["COST_UNITS", "HW_KNOBS", "HW_UNITS", "MAX_DEVICES", "RATE_FIELDS", "TOPOLOGY_UNITS",
           "Efficiency", "Hardware", "HardwareFamily", "Topology"]

#: The six swept hardware knobs, in canonical order.
HW_KNOBS: tuple[str, ...] = (
    "pe_hbm_gb",
    "bw_hbm_gbs",
    "peak_tflops_f16",
    "bw_intra_gbs",
    "bw_inter_gbs",
    "bw_intersip_gbs",
)

#: Units of the six knobs; each must lie in [1e-3, 1e7] of its unit.
HW_UNITS: dict[str, str] = {
    "pe_hbm_gb": "GB", "bw_hbm_gbs": "GB/s", "peak_tflops_f16": "TFLOP/s",
    "bw_intra_gbs": "GB/s", "bw_inter_gbs": "GB/s", "bw_intersip_gbs": "GB/s",
}
_HW_RANGES: dict[str, Range] = {
    k: Range(1e-3, 1e7, HW_UNITS[k], integer=False) for k in HW_KNOBS
}


@dataclass(frozen=True)
class Hardware:
    """One point of the six hardware knobs (a PE = one accelerator die with its HBM).

    Each knob must lie in [0.001, 10⁷] of its unit (GB, GB/s, TFLOP/s).

    Examples
    --------
    >>> Hardware(bw_hbm_gbs=-1)
    Traceback (most recent call last):
    ...
    simcore.errors.SpecError: Hardware.bw_hbm_gbs must be a number in [0.001, 10000000] GB/s, got -1
    """

    pe_hbm_gb: float = 96.0
    bw_hbm_gbs: float = 4000.0
    peak_tflops_f16: float = 1000.0
    bw_intra_gbs: float = 900.0
    bw_inter_gbs: float = 400.0
    bw_intersip_gbs: float = 100.0

    def __post_init__(self) -> None:
        validate_table(self, _HW_RANGES)

    def as_dict(self) -> dict[str, float]:
        return {f: float(getattr(self, f)) for f in HW_KNOBS}

    def scaled(self, **factors: float) -> Hardware:
        """A copy with some knobs multiplied by factors."""
        unknown = set(factors) - set(HW_KNOBS)
        if unknown:
            raise SpecError(f"unknown hardware knobs {sorted(unknown)}; known: {list(HW_KNOBS)}")
        return Hardware(**{k: v * factors.get(k, 1.0) for k, v in self.as_dict().items()})


_TOPOLOGY_RANGES: dict[str, Range] = {
    "pes_per_cube": Range(1, 1e6, "(PEs per cube)"),
    "cubes_per_sip": Range(1, 1e6, "(cubes per SiP)"),
    "n_sips": Range(1, 1e6, "(SiPs in the system)"),
    "alpha_intra_ns": Range(0, 1e9, "ns", integer=False),
    "alpha_inter_ns": Range(0, 1e9, "ns", integer=False),
    "alpha_intersip_ns": Range(0, 1e9, "ns", integer=False),
    "coll_base_scaleout_ns": Range(0, 1e9, "ns", integer=False),
    "alpha_intra_scaleout_ns": Range(0, 1e9, "ns", integer=False),
    "nics_per_cube": Range(0, 1e6, "(scale-out NICs per cube; 0 = one per PE)"),
    "fp8_ratio": Range(0, 1e3, "(FP8 peak / 16-bit peak; 0 = no FP8)", integer=False),
    "int8_ratio": Range(0, 1e3, "(INT8 peak / 16-bit peak; 0 = no INT8)", integer=False),
    "fp4_ratio": Range(0, 1e3, "(FP4 peak / 16-bit peak; 0 = no FP4)", integer=False),
    "fa2_ratio": Range(0.01, 1, "(FlashAttention-2-class / native attention rate)",
                        integer=False),
    "mm_ratio": Range(0.1, 10, "(achievable matmul fraction of peak / Hopper's)",
                       integer=False),
    "hbm_ratio": Range(0.1, 10, "(achievable HBM streaming fraction of peak / Hopper's)",
                        integer=False),
    "pcie_gbs": Range(0, 1e7, "GB/s (host link per device; 0 = none)", integer=False),
    "host_mem_gb": Range(0, 1e9, "GB (host memory per device; 0 = none)", integer=False),
    **{f: Range(0.01, 1, what, integer=False) for f, what in (
        ("wo_int4_bw_ratio", "(weight-only INT4 GEMM weight-streaming rate / 16-bit GEMM's)"),
        ("wo_int8_bw_ratio", "(weight-only INT8 GEMM weight-streaming rate / 16-bit GEMM's)"),
        ("wo_mm_ratio", "(weight-only GEMM matmul rate / 16-bit GEMM's)"))},
}
#: Unit of each :class:`Topology` field, as a family data file declares it (a count names
#: what it counts; ``ratio`` is dimensionless; ``bool`` a switch).
TOPOLOGY_UNITS: dict[str, str] = {
    "pes_per_cube": "PEs", "cubes_per_sip": "cubes", "n_sips": "SiPs",
    "alpha_intra_ns": "ns", "alpha_inter_ns": "ns", "alpha_intersip_ns": "ns",
    "coll_base_scaleout_ns": "ns", "alpha_intra_scaleout_ns": "ns",
    "nics_per_cube": "NICs", "fp8_ratio": "ratio", "int8_ratio": "ratio", "fp4_ratio": "ratio",
    "fa2_ratio": "ratio",
    "mm_ratio": "ratio", "hbm_ratio": "ratio", "pcie_gbs": "GB/s", "host_mem_gb": "GB",
    "nvls": "bool",
    "wo_int4_bw_ratio": "ratio", "wo_int8_bw_ratio": "ratio", "wo_mm_ratio": "ratio",
}
#: At most this many devices in one system.
MAX_DEVICES = 10**9
#: The :class:`Topology` field holding the matmul rate of each low-precision activation
#: dtype (``Workload.act_dtype``); 16-bit inputs run at the 16-bit peak. NVFP4 (``fp4``)
#: and MXFP4 (``mxfp4``) share the FP4 tensor-core rate.
RATE_FIELDS: dict[str, str] = {"fp8": "fp8_ratio", "int8": "int8_ratio", "fp4": "fp4_ratio",
                               "mxfp4": "fp4_ratio"}


@dataclass(frozen=True)
class Topology:
    """Tier sizes and link latencies of a hardware family (not swept).

    PEs form a cube (``pes_per_cube``, linked by ``bw_intra_gbs``), cubes form a SiP
    (``cubes_per_sip``, ``bw_inter_gbs``), SiPs form the system (``n_sips``,
    ``bw_intersip_gbs``). For a GPU cluster: cube = NVLink node, SiP = rack/leaf, system =
    the scale-out network. Link latencies lie in [0, 10⁹] ns; at most 10⁹ devices.
    """

    pes_per_cube: int = 8
    cubes_per_sip: int = 4
    n_sips: int = 8
    alpha_intra_ns: float = 500.0
    alpha_inter_ns: float = 1000.0
    alpha_intersip_ns: float = 2500.0
    #: a collective or send whose group crosses the cube pays, as NCCL's tuning model
    #: prices one, a base latency once (``coll_base_scaleout_ns``; NCCL's Tree/LL base,
    #: 6.8 us, in the GPU families), each of its steps inside a cube at
    #: ``alpha_intra_scaleout_ns`` (NCCL's NVLink latency, 0.6 us) and each network step at
    #: ``alpha_inter_ns`` / ``alpha_intersip_ns`` (NCCL's network latency, 5.0 us); here 0
    #: and the cube's own step (no collective library assumed). A collective inside one
    #: cube pays ``alpha_intra_ns`` per step and no base.
    coll_base_scaleout_ns: float = 0.0
    alpha_intra_scaleout_ns: float = 500.0
    #: scale-out NICs per cube (node); 0 = one per PE
    nics_per_cube: int = 0
    #: FP8 / INT8 / FP4 (NVFP4, MXFP4) dense matmul peak relative to the dense 16-bit peak
    #: (0 = the family has none; :data:`RATE_FIELDS` maps an activation dtype to its field)
    fp8_ratio: float = 0.0
    int8_ratio: float = 0.0
    fp4_ratio: float = 0.0
    #: rate of a FlashAttention-2-class attention kernel (``Workload.attention="flash2"``)
    #: relative to the family's native fused kernel (1 = the same)
    fa2_ratio: float = 1.0
    #: the family's measured maximum achievable matmul fraction of its data-sheet peak,
    #: relative to Hopper's (the efficiency factors are fitted in Hopper's terms; 1 = the
    #: same): scales the matmul rate (projections, FFN, LM head), not attention
    mm_ratio: float = 1.0
    #: the family's measured HBM streaming fraction of its data-sheet bandwidth, relative
    #: to Hopper's (1 = the same): scales ``Efficiency.memory`` / ``train_memory``, as
    #: ``mm_ratio`` scales the matmul rate
    hbm_ratio: float = 1.0
    #: host link (PCIe) bandwidth per device in GB/s and host memory per device in GB,
    #: for offloading (0 = no offload possible)
    pcie_gbs: float = 0.0
    host_mem_gb: float = 0.0
    #: the cube's switch reduces in the network (NVLink SHARP on NVSwitch-3 systems,
    #: used by NCCL's NVLS algorithm): an all-reduce of 2 MB or more inside one cube runs
    #: at NVLS's measured bus bandwidth, a wire factor of at most
    #: ``kernels.collectives.NVLS_FACTOR`` (1.35) instead of a ring's 2(g-1)/g
    nvls: bool = False
    #: weight-only INT4 / INT8 GEMMs (W4A16 / W8A16: Marlin, AWQ / GPTQ kernels,
    #: ``Workload.weight_dtype`` int4 / int8 with 16-bit activations), measured against a
    #: 16-bit GEMM of the same shape on the family: the rate at which a memory-bound
    #: (small-batch) one streams its weight bytes, group scales included, relative to the
    #: 16-bit GEMM's (``wo_int4_bw_ratio``, ``wo_int8_bw_ratio``), and the rate a
    #: compute-bound (large-batch) one reaches relative to the 16-bit matmul rate, the
    #: dequantisation in its main loop (``wo_mm_ratio``); 1 = as fast as 16-bit weights
    wo_int4_bw_ratio: float = 1.0
    wo_int8_bw_ratio: float = 1.0
    wo_mm_ratio: float = 1.0

    def __post_init__(self) -> None:
        validate_table(self, _TOPOLOGY_RANGES)
        object.__setattr__(self, "nvls", flag("Topology", "nvls", self.nvls))
        if self.n_devices > MAX_DEVICES:
            raise SpecError(
                f"Topology has {self.n_devices} devices (pes_per_cube · cubes_per_sip · "
                f"n_sips); at most {MAX_DEVICES} are supported, pass smaller tiers"
            )

    @property
    def n_devices(self) -> int:
        return self.pes_per_cube * self.cubes_per_sip * self.n_sips

    def matmul_ratio(self, act_dtype: str) -> float:
        """The matmul peak of inputs in ``act_dtype`` relative to the 16-bit peak: the
        field :data:`RATE_FIELDS` names (0 = none on this family), 1 for 16-bit inputs.

        Examples
        --------
        >>> t = Topology(fp8_ratio=2.0, fp4_ratio=4.0)
        >>> t.matmul_ratio("fp8"), t.matmul_ratio("mxfp4"), t.matmul_ratio(""), t.matmul_ratio("int8")
        (2.0, 4.0, 1.0, 0.0)
        """
        field_name = RATE_FIELDS.get(act_dtype)
        return 1.0 if field_name is None else float(getattr(self, field_name))

    @property
    def pes_per_sip(self) -> int:
        return self.pes_per_cube * self.cubes_per_sip


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak, fitted once against public measurements.

    ``compute`` scales ``peak_tflops_f16`` for inference matmuls, ``train_compute`` for
    training matmuls (forward, backward, recomputation), ``attention`` /
    ``train_attention`` the attention core, ``memory`` scales ``bw_hbm_gbs`` (inference;
    training steps use ``train_memory`` where set, else ``memory``; both times the
    family's ``Topology.hbm_ratio``), ``network``
    the scale-up links and ``network_inter`` / ``network_sip`` the scale-out ones;
    ``hbm_usable`` is the part of HBM available to weights, KV and activations (the
    rest: runtime, fragmentation). Fractions lie in [0.001, 1].
    ``op_latency_ns`` is the fixed cost of one kernel launch, ``step_overhead_ns`` the
    framework's floor per inference step (a quarter with CUDA graphs).
    ``lowp_compute`` scales the FP8 / INT8 / FP4 matmul peak (``Topology.fp8_ratio`` /
    ``int8_ratio`` / ``fp4_ratio`` x ``peak_tflops_f16``) of inference matmuls in those
    dtypes. It was fitted on FP8 and INT8 points only: FP4 GEMMs are assumed to reach the
    same fraction of their (4x) peak as FP8 GEMMs of theirs (an assumption: no FP4 point
    is fitted; the Blackwell held-out set, ``simcore validate``, checks it).
    ``roofline_overlap`` is how much of an op's shorter side (compute or HBM traffic)
    hides under the longer (1: ``max``, 0: sum), ``seq_overhead_ns`` the framework's
    host cost per sequence of an inference step, run one step ahead under the device's
    step (overlap scheduling), so a step takes the longer of the two.
    ``comm_contention`` is the share of compute throughput a collective takes while it
    runs under compute (Calculon's "processor usage" of the network: NCCL kernels occupy
    SMs and HBM bandwidth): a collective of
    ``X`` ns hidden under ``W`` ns of compute costs ``max(X - W, comm_contention * X)``
    beyond ``W`` instead of ``max(X - W, 0)``. It applies to every overlapped collective:
    the CP ring under attention (prefill and training) and, in training, prefetched
    ZeRO-3 / FSDP all-gathers, overlapped TP and MoE all-to-all and the bucketed gradient
    reduction under the backward pass (inference's other collectives block). Not fitted:
    held at 0.15, Calculon's ``processor_usage`` of NVLink (0 = free overlap).
    The defaults are the single fit over all of ``simcore.validation.MEASUREMENTS``
    (176 published training and inference results from 23 sources); see
    ``simcore/validation/fitted.py`` for how and the errors, and ``simcore validate``.
    """

    compute: float = 0.719
    memory: float = 0.8416
    network: float = 0.65
    hbm_usable: float = 0.90
    train_compute: float = 0.75
    #: scale-out (inter-cube) and inter-SiP link factors; None = ``network`` for the
    #: first and ``network_inter`` for the second
    network_inter: float | None = 0.95
    network_sip: float | None = None
    #: attention-core matmul factors (inference, training); None = ``compute`` /
    #: ``train_compute``
    attention: float | None = 0.326
    train_attention: float | None = 0.346
    #: fixed device-side cost of one kernel (launched from the host, each also pays the
    #: host's launch time, kernels.inference.LAUNCH_NS, unless replayed from a CUDA graph),
    #: and the framework's floor per inference step (ns)
    op_latency_ns: float = 3923.0
    step_overhead_ns: float = 0.0
    #: achievable fraction of the low-precision (FP8 / INT8 / FP4) matmul peak in inference;
    #: None = ``compute``. (Training FP8 GEMMs use ``train_compute``.)
    lowp_compute: float | None = 0.612
    #: share of the shorter of an op's compute time and HBM time that hides under the
    #: longer one: 1 is the classic roofline ``max(compute, memory)``, 0 their sum
    roofline_overlap: float = 0.288
    #: the framework's host cost per sequence it schedules in an inference step (ns):
    #: batch bookkeeping, sampling, KV block tables, overlapped with the device's step
    #: (the step takes the longer); not paid by training steps
    seq_overhead_ns: float = 39512.0
    #: share of compute throughput an overlapped collective takes while it runs (0 = free);
    #: held at Calculon's value for NVLink (see simcore/validation/fitted.py)
    comm_contention: float = 0.15
    #: HBM factor of training steps (element-wise, optimizer and operand traffic);
    #: None = ``memory``
    train_memory: float | None = 0.559

    def __post_init__(self) -> None:
        fraction = Range(1e-3, 1, "(fraction of peak)", integer=False)
        optional = ("network_inter", "network_sip", "attention", "train_attention",
                    "lowp_compute", "train_memory")
        validate_table(self, {
            **{f: fraction for f in ("compute", "memory", "network", "hbm_usable",
                                     "train_compute")},
            **{f: fraction for f in optional if getattr(self, f) is not None},
            "roofline_overlap": Range(0, 1, "(share of the shorter side hidden)", integer=False),
            "comm_contention": Range(0, 0.99, "(share of compute a running collective takes)",
                                      integer=False),
            **{f: Range(0, 1e9, "ns", integer=False)
               for f in ("op_latency_ns", "step_overhead_ns", "seq_overhead_ns")},
        })


#: Unit of each optional cost value of a family (``[cost]`` of a family data file).
COST_UNITS: dict[str, str] = {"price_usd": "USD", "power_w": "W"}


@dataclass(frozen=True)
class HardwareFamily:
    """A named preset: a hardware point plus its topology, and where a source gives them,
    a price per device (USD, an indication) and its power (W, the data sheet's maximum);
    None where none was found."""

    name: str
    hardware: Hardware = field(default_factory=Hardware)
    topology: Topology = field(default_factory=Topology)
    description: str = ""
    price_usd: float | None = None
    power_w: float | None = None

    def __post_init__(self) -> None:
        validate_table(self, {k: Range(1e-3, 1e9, u, integer=False) for k, u in COST_UNITS.items()
                              if getattr(self, k) is not None})
