"""Preset models and hardware families.

Model shapes come from the published configs (Meta's Llama 3.1 model cards / HF
config.json, Brown et al. 2020 Table 2.1 for GPT-3, Mistral's Mixtral config). GPU
figures are vendor data sheets (dense fp16/bf16 tensor TFLOP/s, HBM GB/s, NVLink
per-direction GB/s, one 200/400 Gb/s NIC per GPU). ``pe_hbm_gb`` is in GB (1e9 bytes):
the "80 GB" parts hold 80 GiB = 85.9 GB (nvidia-smi: 81920 MiB), the 40 GB part 42.9 GB,
the H200's "141 GB" 143771 MiB = 150.8 GB.

Examples
--------
>>> round(PRESETS["Llama 3.1 70B"].model.n_params / 1e9, 1)
70.6
>>> HARDWARE_FAMILIES["H100-SXM"].hardware.bw_hbm_gbs
3350.0
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .specs import Hardware, HardwareFamily, Model, Topology

__all__ = [
    "PRESETS",
    "HARDWARE_FAMILIES",
    "DEFAULT_FAMILY",
    "DEFAULT_MODEL",
    "ModelPreset",
    "get_model",
    "get_family",
    "load_model",
]


@dataclass(frozen=True)
class ModelPreset:
    model: Model
    source: str
    reported_params_b: float

    @property
    def name(self) -> str:
        return self.model.name


def _p(model: Model, source: str, reported: float) -> tuple[str, ModelPreset]:
    return model.name, ModelPreset(model, source, reported)


PRESETS: dict[str, ModelPreset] = dict([
    _p(Model("Llama 3.1 8B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
             d_ff=14336, vocab_size=128256),
       "meta-llama/Llama-3.1-8B config.json", 8.03),
    _p(Model("Llama 3.1 70B", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
             d_ff=28672, vocab_size=128256),
       "meta-llama/Llama-3.1-70B config.json", 70.6),
    _p(Model("Llama 3.1 405B", n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8,
             d_ff=53248, vocab_size=128256),
       "meta-llama/Llama-3.1-405B config.json", 405.9),
    _p(Model("GPT-3 175B", n_layers=96, d_model=12288, n_heads=96, n_kv_heads=96,
             d_ff=4 * 12288, vocab_size=50257, gated_ffn=False, tied_embeddings=True,
             attn_bias=True),
       "Brown et al. 2020, Table 2.1", 175.0),
    _p(Model("Mixtral 8x7B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
             d_ff=14336, vocab_size=32000, n_experts=8, top_k=2),
       "mistralai/Mixtral-8x7B-v0.1 config.json", 46.7),
    _p(Model("Llama 2 7B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32,
             d_ff=11008, vocab_size=32000),
       "meta-llama/Llama-2-7b-hf config.json", 6.74),
    _p(Model("Llama 2 70B", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
             d_ff=28672, vocab_size=32000),
       "meta-llama/Llama-2-70b-hf config.json", 69.0),
])

DEFAULT_MODEL = "Llama 3.1 70B"

_GPU_CLUSTER = Topology(pes_per_cube=8, cubes_per_sip=16, n_sips=32,
                        alpha_intra_ns=700.0, alpha_inter_ns=3000.0, alpha_intersip_ns=5000.0)

#: DGX A100: one HDR NIC per GPU, INT8 at 2x the FP16 dense peak (624 vs 312 TFLOP/s), no
#: FP8, PCIe Gen4 x16 (~32 GB/s per direction) to the host, 1 TB host memory / 8 GPUs
#: (NVIDIA DGX A100 and A100 Tensor Core GPU data sheets).
_A100_CLUSTER = replace(_GPU_CLUSTER, nics_per_cube=8, int8_ratio=2.0, pcie_gbs=32.0,
                        host_mem_gb=128.0)
#: DGX H100 / HGX H200: one NDR NIC per GPU, FP8 and INT8 at 2x the BF16 dense peak
#: (1979 vs 989 TFLOP/s), PCIe Gen5 x16 (~64 GB/s), 2 TB host memory / 8 GPUs (NVIDIA
#: DGX H100 and H100/H200 Tensor Core GPU data sheets).
_HOPPER_CLUSTER = replace(_GPU_CLUSTER, nics_per_cube=8, fp8_ratio=2.0, int8_ratio=2.0,
                          pcie_gbs=64.0, host_mem_gb=256.0)

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


def get_model(model: str | Model) -> Model:
    """A preset by name (case-insensitive) or a :class:`Model` passed through."""
    if isinstance(model, Model):
        return model
    for name, preset in PRESETS.items():
        if name.lower() == str(model).lower():
            return preset.model
    raise ValueError(f"unknown model {model!r}; pass one of {list(PRESETS)} or a Model")


def load_model(spec: str | Model) -> Model:
    """A preset name, a HuggingFace ``config.json`` path, or a folder holding one.

    Errors are ``ValueError`` / ``FileNotFoundError`` saying what to pass instead.
    """
    import os

    if isinstance(spec, Model):
        return spec
    if not spec:
        raise ValueError(f"pass a model: a preset ({', '.join(PRESETS)}) or a config.json path")
    if spec.endswith(".json") or os.sep in spec or os.path.exists(spec):
        path = os.path.join(spec, "config.json") if os.path.isdir(spec) else spec
        return Model.from_hf_config(path)
    return get_model(spec)


def get_family(family: str | HardwareFamily | None) -> HardwareFamily:
    """A hardware family by name (case-insensitive), default ``"SiP"``."""
    if family is None:
        return HARDWARE_FAMILIES[DEFAULT_FAMILY]
    if isinstance(family, HardwareFamily):
        return family
    for name, fam in HARDWARE_FAMILIES.items():
        if name.lower() == str(family).lower():
            return fam
    raise ValueError(
        f"unknown hardware family {family!r}; pass one of {list(HARDWARE_FAMILIES)}"
    )
