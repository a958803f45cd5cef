"""What the commands and the app assume unless told otherwise, declared once, and the line
every output header states it in.

Practitioners deploy a model on one node's GPUs (8 on an HGX board) and serve decode by
replaying CUDA graphs (vLLM, SGLang and TensorRT-LLM do by default). ``simcore evaluate``,
``explore``, ``compare`` and the app start from there:

* :meth:`Budget.resolve`: without ``--gpus`` the device budget is one node
  (:func:`default_gpus`: ``Topology.pes_per_cube``, 8 for the HGX families) of a GPU
  family, at most (not exactly) that many devices; the families in
  :data:`SYSTEM_FAMILIES` (SiP: the system in package is the unit one deploys on) keep
  their whole system.
* :func:`decode_graphs`: decode steps replay CUDA graphs unless ``--eager``; prefill and
  training steps launch every kernel from the host.
* the runtime: simcore's default stack (the above) unless ``--runtime NAME`` names one
  (:data:`simcore.model.runtime.RUNTIMES`: vLLM, SGLang, TensorRT-LLM, Megatron-LM,
  torchtitan, ...), whose profile then decides CUDA graphs, kernels and training
  framework; :func:`runtime_text` states which in the header.

The library keeps its own defaults (:func:`simcore.evaluate`: no budget;
:class:`simcore.Workload`: ``cuda_graphs=False``): the validation and the golden numbers
are pinned on them, and a caller of the library names what it wants.

:func:`assumed_line` is the one header line stating the budget, the precision and the
runtime; every command prints it (to stderr when the rows are JSON / CSV).

Examples
--------
>>> from simcore.model.specs import Workload
>>> b = Budget.resolve("H100-SXM")
>>> b.gpus, b.kwargs(), b.describe()
(8, {'gpus': 8, 'exact_gpus': False}, 'at most 8 devices (one node; pass --gpus N for more)')
>>> Budget.resolve("SiP").describe()
'the whole system, 256 devices (pass --gpus N to cap it)'
>>> print(assumed_line(b.describe(), precision_text(Workload("decode", cuda_graphs=True)),
...                    runtime_text(Workload("decode", cuda_graphs=True))))
assumed: budget: at most 8 devices (one node; pass --gpus N for more) | precision: weights 16-bit, activations 16-bit, KV cache 16-bit (the model's own) | runtime: CUDA graphs in decode, fused attention (simcore's default stack)
>>> runtime_text(Workload("decode", runtime="hf-eager"))
'eager decode (every kernel launched from the host), fused attention (--runtime hf-eager: Hugging Face transformers in eager PyTorch (generate(), Trainer with DDP))'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model.presets import get_family
from ..model.runtime import RUNTIMES, host_wait_text

__all__ = ["SYSTEM_FAMILIES", "Budget", "assumed_line", "budgets_text", "decode_graphs",
           "default_gpus", "dtypes_text", "precision_text", "routing_text", "runtime_text"]

#: GPUs of one server node (HGX boards); a larger scale-up domain (GB200/GB300 NVL72)
#: spans several nodes' trays on one NVLink fabric, and a budget of it says so
NODE_GPUS = 8

#: Families whose default budget is their whole system rather than one node: simcore's
#: system-in-package design, deployed as one package.
SYSTEM_FAMILIES = ("SiP",)


def default_gpus(family: Any) -> int | None:
    """The default device budget of ``family`` (a name or a HardwareFamily): one node's
    devices (``Topology.pes_per_cube``), or None (the whole system) for
    :data:`SYSTEM_FAMILIES`.

    Examples
    --------
    >>> default_gpus("H200"), default_gpus("SiP")
    (8, None)
    """
    fam = get_family(family)
    return None if fam.name in SYSTEM_FAMILIES else int(fam.topology.pes_per_cube)


def decode_graphs(mode: str, *, eager: bool = False) -> bool:
    """Whether the steps of ``mode`` replay CUDA graphs by default: decode unless
    ``eager``; prefill and training never do."""
    return mode == "decode" and not eager


@dataclass(frozen=True)
class Budget:
    """A device budget and where it came from.

    ``gpus``: at most (``exact``: exactly) that many devices, None for no cap (the whole
    system, ``system`` devices); ``default``: True when the user gave none and the budget
    is :func:`default_gpus`'s.
    """

    gpus: int | None
    exact: bool = False
    default: bool = False
    system: int = 0

    @classmethod
    def resolve(cls, family: Any, gpus: int | None = None, exact: bool = False) -> Budget:
        """The budget of ``family``: ``gpus`` (``exact``) when given, else the default."""
        fam = get_family(family)
        if gpus is None:
            return cls(default_gpus(fam), False, True, fam.topology.n_devices)
        return cls(int(gpus), bool(exact), False, fam.topology.n_devices)

    def kwargs(self) -> dict[str, Any]:
        """``gpus=`` / ``exact_gpus=`` keywords of the engine (``{}`` for no cap)."""
        return {} if self.gpus is None else {"gpus": self.gpus, "exact_gpus": self.exact}

    def describe(self, option: str | None = "--gpus N") -> str:
        """The budget in words; ``option`` is how to change it (None: say nothing)."""
        if self.gpus is None:
            how = f" (pass {option} to cap it)" if option and self.default else ""
            return f"the whole system, {self.system} devices{how}"
        devices = f"{self.gpus} device{'s' if self.gpus != 1 else ''}"
        if self.default:
            how = f"; pass {option} for more" if option else ""
            # a default budget is one scale-up domain: an 8-GPU HGX node, or an NVL72 rack
            domain = "one node" if self.gpus <= NODE_GPUS else "one NVLink domain"
            return f"at most {devices} ({domain}{how})"
        return f"{'exactly' if self.exact else 'at most'} {devices}"


def budgets_text(designs: Sequence[str], budgets: Sequence[Budget],
                 option: str | None = "--gpus N") -> str:
    """Several designs' budgets in words: once ("... devices per design") when they read
    alike, else per group of designs ("H100-SXM, H200: at most 8 devices (one node); SiP:
    the whole system, 256 devices").

    Examples
    --------
    >>> print(budgets_text(["H100-SXM", "H200", "SiP"],
    ...                    [Budget.resolve(f) for f in ("H100-SXM", "H200", "SiP")]))
    H100-SXM, H200: at most 8 devices (one node); SiP: the whole system, 256 devices; pass --gpus N for one budget
    """
    texts = [b.describe(option) for b in budgets]
    if len(set(texts)) == 1:
        return texts[0].replace(" devices", " devices per design", 1)
    groups: dict[str, list[str]] = {}
    for d, b in zip(designs, budgets, strict=True):
        groups.setdefault(b.describe(None), []).append(d)
    hint = f"; pass {option} for one budget" if option and any(b.default for b in budgets) else ""
    return "; ".join(f"{', '.join(ds)}: {t}" for t, ds in groups.items()) + hint


def _bits(n_bytes: int) -> str:
    return f"{8 * int(n_bytes)}-bit"


def dtypes_text(weights: str, activations: str, kv: str, *, own: bool = False) -> str:
    """``"weights fp8, activations fp8, KV cache 16-bit"``; ``own``: all three are the
    model's own (nothing asked for), which the text says."""
    text = f"weights {weights}, activations {activations}, KV cache {kv}"
    return text + (" (the model's own)" if own else "")


def precision_text(workload: Any, model: Any = None) -> str:
    """What the workload computes in: the training precision, or the weights',
    activations' and KV cache's dtypes (the model's own where the workload keeps it:
    ``model.bytes_per_param`` / ``bytes_per_kv``, 16-bit without a model)."""
    if workload.mode == "train":
        extra = [f"{n} {d}" for n, d in (("weights", workload.weight_dtype),
                                          ("saved activations", workload.act_dtype)) if d]
        return f"{workload.precision} training" + (f" ({', '.join(extra)})" if extra else "")
    w = workload.weight_dtype or _bits(getattr(model, "bytes_per_param", 2))
    kv = workload.kv_dtype or _bits(getattr(model, "bytes_per_kv", 2))
    own = not (workload.weight_dtype or workload.act_dtype or workload.kv_dtype)
    return dtypes_text(w, workload.act_dtype or "16-bit", kv, own=own)


def runtime_text(*workloads: Any) -> str:
    """How the steps run: CUDA graphs in decode or every kernel launched from the host
    (eager), one part per distinct mode of ``workloads``, then the attention kernel, then
    the runtime (the software stack, :mod:`simcore.model.runtime`): the default, or the
    one ``--runtime`` named."""
    parts: list[str] = []
    for wl in workloads:
        if wl.mode == "decode":
            part = ("CUDA graphs in decode" if wl.cuda_graphs else
                    "eager decode (every kernel launched from the host)")
        elif wl.mode == "prefill":
            part = "prefill launched from the host (no CUDA graphs)"
        else:
            part = (f"{wl.framework} training, "
                    + ("eager" if getattr(wl, "eager_elementwise", False) else "fused")
                    + " element-wise kernels")
        if part not in parts:
            parts.append(part)
    train = [wl for wl in workloads if wl.mode == "train"]
    attention = f"{train[0].attention} attention" if train else "fused attention"
    for wl in workloads:  # a synchronous serving loop's host time (runtime.host_wait_text)
        wait = host_wait_text(getattr(wl, "host_step_ns", 0.0) or 0.0,
                              getattr(wl, "host_seq_ns", 0.0) or 0.0)
        if wait and wait not in parts:
            parts.append(wait)
    text = ", ".join([*parts, attention])
    names = list(dict.fromkeys(getattr(wl, "runtime", "") for wl in workloads))
    if names == [""]:
        return f"{text} (simcore's default stack)"
    return f"{text} (--runtime {', '.join(n or 'default' for n in names)}: " + "; ".join(
        RUNTIMES[n].stack for n in names if n) + ")"


def assumed_line(budget: str, precision: str, runtime: str, routing: str = "") -> str:
    """The header line every command prints: ``assumed: budget: ... | precision: ... |
    runtime: ...``, then ``| MoE routing: ...`` for a mixture-of-experts model
    (:func:`routing_text`)."""
    line = f"assumed: budget: {budget} | precision: {precision} | runtime: {runtime}"
    return f"{line} | MoE routing: {routing}" if routing else line


def routing_text(workload: Any, model: Any = None) -> str:
    """How a mixture-of-experts model's tokens spread over the expert-parallel ranks
    (``Workload.moe_load_imbalance``, :data:`~simcore.model.workload.MOE_ROUTING`); ``""``
    for a dense model (or none given).

    Examples
    --------
    >>> from simcore.model.presets import load_model
    >>> from simcore.model.specs import Workload
    >>> routing_text(Workload("decode"), load_model("Llama 3.1 8B"))
    ''
    >>> routing_text(Workload("decode", moe_load_imbalance=2.564), load_model("deepseek-ai/DeepSeek-V3"))
    'busiest EP rank 2.564x the mean (no-eplb: TensorRT-LLM, DeepSeek-R1 at EP 32 without a load balancer)'
    """
    from ..model.workload import MOE_ROUTING

    if model is None or getattr(model, "n_experts", 1) <= 1:
        return ""
    lam = float(workload.moe_load_imbalance)
    if abs(lam - 1.0) < 1e-9:
        return ("balanced (the busiest EP rank carries the mean; pass --moe-imbalance eplb or "
                "no-eplb for measured skew)")
    where = {"eplb": "TensorRT-LLM, DeepSeek-R1 at EP 32 with EPLB",
             "no-eplb": "TensorRT-LLM, DeepSeek-R1 at EP 32 without a load balancer"}
    name = next((k for k, v in MOE_ROUTING.items() if k in where and abs(lam - v) < 1e-9),
                None)
    return f"busiest EP rank {lam:g}x the mean" + (f" ({name}: {where[name]})" if name else "")
