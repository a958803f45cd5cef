"""Preset models and hardware families.

Model shapes come from the published configs (Meta's Llama 3.1 model cards / HF
config.json, Brown et al. 2020 Table 2.1 for GPT-3, Mistral's Mixtral config). GPU
figures are vendor data sheets (dense fp16/bf16 tensor TFLOP/s, HBM GB/s, NVLink
per-direction GB/s, one 200/400 Gb/s NIC per GPU). ``pe_hbm_gb`` is in GB (1e9 bytes):
the "80 GB" parts hold 80 GiB = 85.9 GB (nvidia-smi: 81920 MiB), the 40 GB part 42.9 GB,
the H200's "141 GB" 143771 MiB = 150.8 GB.

The model catalogue (``simcore/catalogue/``) ships Hugging Face ``config.json`` files of
popular open models; :func:`get_model` and :func:`load_model` accept their ids
(``"meta-llama/Llama-3.1-70B"``, case-insensitive) wherever a preset name is accepted.

Examples
--------
>>> round(PRESETS["Llama 3.1 70B"].model.n_params / 1e9, 1)
70.6
>>> get_model("qwen/qwen3-30b-a3b").name
'Qwen/Qwen3-30B-A3B'
>>> HARDWARE_FAMILIES["H100-SXM"].hardware.bw_hbm_gbs
3350.0
"""

from __future__ import annotations

import difflib
import functools
import json
import os
from dataclasses import dataclass, replace
from importlib import resources

from .specs import Hardware, HardwareFamily, Model, SpecError, Topology

__all__ = [
    "PRESETS",
    "HARDWARE_FAMILIES",
    "DEFAULT_FAMILY",
    "DEFAULT_MODEL",
    "CatalogueEntry",
    "ModelPreset",
    "catalogue",
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


# --- the model catalogue -----------------------------------------------------------------
_CATALOGUE = "catalogue"


@dataclass(frozen=True)
class CatalogueEntry:
    """One shipped Hugging Face config with the parameter count its model card states.

    ``card_active_params_b`` is the card's active (per-token) count where it gives one;
    ``card_active_excludes_embedding`` says the card leaves the input embedding table out
    of it (GPT-OSS). ``aliases`` are other ids of the same checkpoint (renamed repos).
    """

    id: str
    card_params_b: float
    card_source: str
    card_active_params_b: float | None = None
    card_active_excludes_embedding: bool = False
    aliases: tuple[str, ...] = ()
    note: str = ""

    @property
    def filename(self) -> str:
        """``<org>--<name>.json`` inside ``simcore/catalogue/``."""
        return self.id.replace("/", "--") + ".json"

    def config(self) -> dict:
        """The shipped ``config.json`` contents."""
        text = resources.files("simcore").joinpath(_CATALOGUE, self.filename).read_text("utf-8")
        return json.loads(text)

    def model(self) -> Model:
        """The :class:`Model`, named by its Hugging Face id."""
        return _catalogue_model(self.id)


@functools.cache
def catalogue() -> dict[str, CatalogueEntry]:
    """The catalogue index (``simcore/catalogue/index.json``), keyed by Hugging Face id."""
    raw = json.loads(resources.files("simcore").joinpath(_CATALOGUE, "index.json")
                     .read_text("utf-8"))
    entries = (CatalogueEntry(**{**e, "aliases": tuple(e.get("aliases", ()))})
               for e in raw["models"])
    return {e.id: e for e in entries}


@functools.cache
def _catalogue_model(model_id: str) -> Model:
    entry = catalogue()[model_id]
    return Model.from_hf_dict(entry.config(), name=entry.id, source=f"catalogue {entry.id!r}")


@functools.cache
def _names() -> dict[str, str]:
    """Lower-cased preset names, catalogue ids, aliases and file stems -> canonical key."""
    out = {name.lower(): name for name in PRESETS}
    for entry in catalogue().values():
        for key in (entry.id, *entry.aliases, entry.filename[:-len(".json")]):
            out.setdefault(key.lower(), entry.id)
    return out


def _lookup(name: str) -> Model | None:
    key = _names().get(name.strip().lower())
    if key is None:
        return None
    return PRESETS[key].model if key in PRESETS else _catalogue_model(key)


def _suggest(name: str) -> list[str]:
    """The closest preset names and catalogue ids, best first (also on the part after "/")."""
    names = _names()
    wanted = name.strip().lower()
    scored: dict[str, float] = {}
    wanted_bare = wanted.split("/", 1)[-1]
    for key, canonical in names.items():
        bare = key.split("/", 1)[-1]
        score = max(difflib.SequenceMatcher(None, wanted, key).ratio(),
                    difflib.SequenceMatcher(None, wanted_bare, bare).ratio())
        if wanted_bare and (bare.startswith(wanted_bare) or key.startswith(wanted)):
            score = max(score, 0.9 + 0.1 * len(wanted_bare) / len(bare))  # a truncated id
        scored[canonical] = max(score, scored.get(canonical, 0.0))
    ranked = sorted(scored, key=lambda k: (-scored[k], k))
    return [k for k in ranked if scored[k] >= 0.5][:3] or ranked[:3]


def _unknown(model: object, *, path_hint: bool = False) -> SpecError:
    close = ", ".join(repr(k) for k in _suggest(str(model)))
    where = (f"; or pass a config.json path (none exists at {str(model)!r})" if path_hint
             else "")
    return SpecError(
        f"unknown model {model!r}; closest: {close}. Pass a preset ({', '.join(PRESETS)}), "
        f"a catalogue id (simcore.model.presets.catalogue(), e.g. 'meta-llama/Llama-3.1-70B') or a "
        f"Model{where}"
    )


def get_model(model: str | Model) -> Model:
    """A preset or catalogue model by name (case-insensitive), or a :class:`Model` passed through.

    Catalogue models keep their Hugging Face id as ``name``. An unknown name raises
    :class:`~simcore.model.specs.SpecError` suggesting the closest names.

    Examples
    --------
    >>> get_model("META-LLAMA/llama-3.1-70b").n_layers
    80
    >>> get_model("Llama-3.1-70")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    simcore.model.specs.SpecError: unknown model 'Llama-3.1-70'; closest: 'meta-llama/Llama-3.1-70B', ...
    """
    if isinstance(model, Model):
        return model
    if not isinstance(model, str):
        raise SpecError(f"a model must be a name or a simcore.Model, got {type(model).__name__}")
    found = _lookup(model)
    if found is None:
        raise _unknown(model)
    return found


def load_model(spec: str | Model) -> Model:
    """A preset name, a catalogue id, a Hugging Face ``config.json`` path, or a folder holding one.

    Errors are :class:`~simcore.model.specs.SpecError` (a ``ValueError``) / ``FileNotFoundError``
    saying what to pass instead.
    """
    if isinstance(spec, Model):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise SpecError(
            f"pass a model: a preset ({', '.join(PRESETS)}), a catalogue id such as "
            f"'meta-llama/Llama-3.1-70B' or a config.json path; got {spec!r}"
        )
    local = os.path.expanduser(spec)
    if os.path.exists(local):
        path = os.path.join(local, "config.json") if os.path.isdir(local) else local
        return Model.from_hf_config(path)
    found = _lookup(spec)
    if found is not None:
        return found
    if spec.endswith(".json") or spec.startswith((".", os.sep, "~")) or spec.count(os.sep) > 1:
        return Model.from_hf_config(local)
    raise _unknown(spec, path_hint=os.sep in spec)


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
