"""Named hardware families: GPU systems (A100, H100, H200) and the default SiP.

GPU figures are vendor data sheets (dense fp16/bf16 tensor TFLOP/s, HBM GB/s, NVLink
per-direction GB/s, one 200/400 Gb/s NIC per GPU). ``pe_hbm_gb`` is in GB (1e9 bytes):
the "80 GB" parts hold 80 GiB = 85.9 GB (nvidia-smi: 81920 MiB), the 40 GB part 42.9 GB,
the H200's "141 GB" 143771 MiB = 150.8 GB.

Examples
--------
>>> HARDWARE_FAMILIES["H100-SXM"].hardware.bw_hbm_gbs
3350.0
>>> get_family("h200").topology.nvls
True
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import SpecError
from .specs import Hardware, HardwareFamily, Topology

__all__ = ["DEFAULT_FAMILY", "HARDWARE_FAMILIES", "get_family"]

_GPU_CLUSTER = Topology(pes_per_cube=8, cubes_per_sip=16, n_sips=32,
                        alpha_intra_ns=700.0, alpha_inter_ns=3000.0, alpha_intersip_ns=5000.0)

#: DGX A100: one HDR NIC per GPU, INT8 at 2x the FP16 dense peak (624 vs 312 TFLOP/s), no
#: FP8, PCIe Gen4 x16 (~32 GB/s per direction) to the host, 1 TB host memory / 8 GPUs
#: (NVIDIA DGX A100 and A100 Tensor Core GPU data sheets).
#: ``mm_ratio``: the maximum achievable BF16 matmul rate measured on an A100 SXM is 271.2 of
#: 312 TFLOP/s (86.9%), on an H100 SXM 794.5 of 989 (80.3%; "H200 is the same"): S.
#: Bekman, ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS
#: comparison table" (stas00/ml-engineering @ 744d01e18b79512572f64a6bbd8b5f4a725203a7).
#: The efficiency factors are fitted in Hopper's terms, so the A100 runs its matmuls at
#: 0.869 / 0.803 of that.
_A100_CLUSTER = replace(_GPU_CLUSTER, nics_per_cube=8, int8_ratio=2.0, pcie_gbs=32.0,
                        host_mem_gb=128.0, mm_ratio=(271.2 / 312.0) / (794.5 / 989.0))
#: DGX H100 / HGX H200: one NDR NIC per GPU, FP8 and INT8 at 2x the BF16 dense peak
#: (1979 vs 989 TFLOP/s), PCIe Gen5 x16 (~64 GB/s), 2 TB host memory / 8 GPUs (NVIDIA
#: DGX H100 and H100/H200 Tensor Core GPU data sheets).
#: ``fa2_ratio``: FlashAttention-2 kernels use no Hopper warpgroup MMA / TMA; on an H100,
#: PyTorch SDPA's flash (FA2) backend ran the forward at 329.483 TFLOP/s against cuDNN's
#: 631.338 (batch 1, 24 heads, sequence 4,608, head dim 128; tritonbench, PyTorch
#: 2.6.0.dev20241204, pytorch/pytorch issue #142132): 0.522. (FlashAttention-3, Shah et
#: al. 2024, arXiv:2407.08608, abstract: FA2 reaches 35% of the H100 peak, FA3 75%.)
#: ``nvls``: the third-generation NVSwitch of HGX H100 / H200 reduces in the switch
#: (NVLink SHARP); NCCL runs intra-node all-reduces on it as its NVLS algorithm since
#: 2.17 ("NVLink SHARP is an AllReduce offload system over NVLink only", within one node:
#: NVIDIA/nccl issue #1031; inter-node variants NVLS / NVLSTree in the NCCL 2.18.1
#: release notes), and NCCL enables it by default where the switch supports it.
_HOPPER_CLUSTER = replace(_GPU_CLUSTER, nics_per_cube=8, fp8_ratio=2.0, int8_ratio=2.0,
                          pcie_gbs=64.0, host_mem_gb=256.0, fa2_ratio=329.483 / 631.338,
                          nvls=True)

HARDWARE_FAMILIES: dict[str, HardwareFamily] = {
    "SiP": HardwareFamily(
        "SiP", Hardware(), Topology(),
        "default system-in-package family: 8 PEs per cube, 4 cubes per SiP, 8 SiPs"),
    "A100-80G": HardwareFamily(
        "A100-80G",
        Hardware(pe_hbm_gb=85.9, bw_hbm_gbs=2039.0, peak_tflops_f16=312.0,
                 bw_intra_gbs=300.0, bw_inter_gbs=25.0, bw_intersip_gbs=25.0),
        _A100_CLUSTER,
        "DGX A100 nodes: NVLink3 300 GB/s per direction, 8x HDR 200 Gb/s per node"),
    "A100-40G": HardwareFamily(
        "A100-40G",
        Hardware(pe_hbm_gb=42.9, bw_hbm_gbs=1555.0, peak_tflops_f16=312.0,
                 bw_intra_gbs=300.0, bw_inter_gbs=25.0, bw_intersip_gbs=25.0),
        _A100_CLUSTER,
        "DGX A100 40GB nodes: HBM2 1555 GB/s, NVLink3 300 GB/s per direction, 8x HDR 200 Gb/s"),
    "H100-SXM": HardwareFamily(
        "H100-SXM",
        Hardware(pe_hbm_gb=85.9, bw_hbm_gbs=3350.0, peak_tflops_f16=989.0,
                 bw_intra_gbs=450.0, bw_inter_gbs=50.0, bw_intersip_gbs=50.0),
        _HOPPER_CLUSTER,
        "DGX H100 nodes: NVLink4 450 GB/s per direction, 8x NDR 400 Gb/s per node"),
    "H200": HardwareFamily(
        "H200",
        Hardware(pe_hbm_gb=150.8, bw_hbm_gbs=4800.0, peak_tflops_f16=989.0,
                 bw_intra_gbs=450.0, bw_inter_gbs=50.0, bw_intersip_gbs=50.0),
        _HOPPER_CLUSTER,
        "HGX H200 nodes: 141 GB HBM3e at 4.8 TB/s, NVLink4, 8x NDR 400 Gb/s per node"),
}

DEFAULT_FAMILY = "SiP"


def get_family(family: str | HardwareFamily | None) -> HardwareFamily:
    """A hardware family by name (case-insensitive), default ``"SiP"``."""
    if family is None:
        return HARDWARE_FAMILIES[DEFAULT_FAMILY]
    if isinstance(family, HardwareFamily):
        return family
    for name, fam in HARDWARE_FAMILIES.items():
        if name.lower() == str(family).lower():
            return fam
    raise SpecError(
        f"unknown hardware family {family!r}; pass one of {list(HARDWARE_FAMILIES)}"
    )
