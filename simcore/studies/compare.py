"""Compare hardware designs over batch and context: the best layout of each, side by side.

A design is a hardware family by name (``"H100-SXM"``), a family with knob overrides
(``"H100-SXM:bw_hbm_gbs=6700,pe_hbm_gb=141"``) and / or another scale-up domain size
(``"GB200-NVL72:pes_per_cube=8"``: :data:`DOMAIN_KNOB`), or a
:class:`~simcore.model.specs.HardwareFamily`.
:func:`compare` finds, per design and per (batch, s_kv) point, the metric-best fitting
layout (the fused kernel, one hardware point) and reports its latency, throughput and
devices, plus the speed-up of every design over the first (``latency(first) /
latency(design)``, > 1 = faster).

Examples
--------
>>> r = compare(["H100-SXM", "H100-SXM:bw_hbm_gbs=6700"], "Llama 3.1 8B", "decode",
...             batch=[1], s_kv=[8192])
>>> r.designs
['H100-SXM', 'H100-SXM:bw_hbm_gbs=6700']
>>> bool(r.dataset.speedup.sel(design="H100-SXM:bw_hbm_gbs=6700").item() > 1)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import xarray as xr

from ..engine.chunks import reduce_best
from ..engine.core import prepare
from ..engine.metrics import Metric, get_metric
from ..engine.space import PARALLEL_DIMS
from ..errors import SimcoreInputError
from ..model.presets import HARDWARE_FAMILIES, get_family
from ..model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Workload

__all__ = ["DOMAIN_KNOB", "parse_design", "compare", "CompareResult", "COMPARE_VARIABLES",
           "with_domain"]

#: The design override that sets the scale-up (NVLink) domain: GPUs per cube.
DOMAIN_KNOB = "pes_per_cube"

#: Variables of :attr:`CompareResult.dataset`: name -> (units, long_name).
COMPARE_VARIABLES: dict[str, tuple[str, str]] = {
    "latency_ns": ("ns", "latency of the best layout"),
    "throughput_tok_s": ("tokens/s", "throughput of the best layout"),
    "n_devices": ("1", "devices the best layout uses"),
    "speedup": ("1", "latency of the first design / latency of this design"),
}


def with_domain(family: HardwareFamily, pes_per_cube: int) -> HardwareFamily:
    """``family`` with a scale-up domain of ``pes_per_cube`` devices: as many scale-out
    NICs per device as before, and the same devices per SiP where the new domain divides
    them (else the nearest whole number of cubes, at least one).

    Examples
    --------
    >>> t = with_domain(get_family("GB200-NVL72"), 8).topology
    >>> t.pes_per_cube, t.nics_per_cube, t.cubes_per_sip, t.pes_per_sip
    (8, 8, 72, 576)
    """
    topo = family.topology
    n = int(pes_per_cube)
    nics = topo.nics_per_cube and max(1, round(topo.nics_per_cube * n / topo.pes_per_cube))
    sip = topo.pes_per_sip
    cubes = sip // n if sip % n == 0 else max(1, round(sip / n))
    return replace(family, topology=replace(topo, pes_per_cube=n, nics_per_cube=nics,
                                            cubes_per_sip=cubes))


def parse_design(design: str | HardwareFamily) -> tuple[str, HardwareFamily]:
    """``"FAMILY"`` or ``"FAMILY:knob=value,knob=value"`` -> (label, family); a knob is
    one of the six hardware knobs or :data:`DOMAIN_KNOB` (the scale-up domain size,
    :func:`with_domain`).

    Examples
    --------
    >>> label, fam = parse_design("H100-SXM:bw_hbm_gbs=6700")
    >>> label, fam.hardware.bw_hbm_gbs, fam.hardware.peak_tflops_f16
    ('H100-SXM:bw_hbm_gbs=6700', 6700.0, 989.0)
    >>> parse_design("GB200-NVL72:pes_per_cube=36")[1].topology.pes_per_cube
    36
    """
    if isinstance(design, HardwareFamily):
        return design.name, design
    if not isinstance(design, str) or not design.strip():
        raise SimcoreInputError(f"a design is a family name or FAMILY:knob=value,...; got "
                                f"{design!r}")
    text = design.strip()
    name, _, rest = text.partition(":")
    try:
        fam = get_family(name.strip())
    except ValueError:
        raise SimcoreInputError(f"design {text!r}: unknown hardware family {name.strip()!r}; "
                                f"pass one of {', '.join(HARDWARE_FAMILIES)}") from None
    overrides: dict[str, float] = {}
    for part in (p.strip() for p in rest.split(",") if p.strip()):
        knob, sep, value = part.partition("=")
        knob = knob.strip()
        if not sep or knob not in (*HW_KNOBS, DOMAIN_KNOB):
            raise SimcoreInputError(f"design {text!r}: expected knob=value with knob one of "
                                    f"{', '.join((*HW_KNOBS, DOMAIN_KNOB))}, got {part!r}")
        try:
            overrides[knob] = float(value)
        except ValueError:
            raise SimcoreInputError(f"design {text!r}: {knob} must be a number, got "
                                    f"{value.strip()!r}") from None
    domain = overrides.pop(DOMAIN_KNOB, None)
    if domain is not None:
        if domain != int(domain) or not 1 <= domain <= 1e6:
            raise SimcoreInputError(f"design {text!r}: {DOMAIN_KNOB} must be a whole number of "
                                    f"devices from 1 to 1000000, got {domain:g}")
        fam = with_domain(fam, int(domain))
    if not overrides:
        return fam.name if not rest else text, fam
    try:
        hw = Hardware(**{**fam.hardware.as_dict(), **overrides})
    except ValueError as exc:
        raise SimcoreInputError(f"design {text!r}: {exc}") from None
    return text, replace(fam, name=fam.name, hardware=hw)


@dataclass
class CompareResult:
    """What :func:`compare` found.

    ``dataset``: dims ``design``, ``batch``, ``s_kv``; variables ``latency_ns``,
    ``throughput_tok_s``, ``n_devices``, ``speedup``, ``fits`` and the best layout as
    ``best_<dim>``. ``shared``: (batch, s_kv) points where every design fits.
    """

    model: str
    mode: str
    metric: str
    designs: list[str]
    dataset: xr.Dataset
    shared: list[tuple[int, int]]
    #: each design's device budget (None: uncapped) and whether it is exact
    gpus: tuple[int | None, ...] = ()
    exact_gpus: bool = False
    #: the workload compared (``batch`` / ``s_kv`` are swept)
    workload: Workload | None = None

    def rows(self) -> list[dict[str, Any]]:
        """One row per design and point (fitting or not), designs in the order given."""
        ds = self.dataset
        out = []
        for d in self.designs:
            for b in ds.batch.values.tolist():
                for s in ds.s_kv.values.tolist():
                    pt = ds.sel(design=d, batch=b, s_kv=s)
                    fits = bool(pt.fits)
                    row: dict[str, Any] = {"design": d, "batch": b, "s_kv": s, "fits": fits}
                    for v in ("latency_ns", "throughput_tok_s", "n_devices", "speedup"):
                        row[v] = float(pt[v]) if fits else float("nan")
                    if fits and np.isfinite(row["n_devices"]):
                        row["n_devices"] = int(row["n_devices"])
                    for dim in PARALLEL_DIMS:
                        val = pt[f"best_{dim}"].item()
                        row[dim] = val if fits else None
                    out.append(row)
        return out


def _budgets(gpus: Any, exact: Any, labels: list[str]) -> list[int | None]:
    """``gpus`` as one budget per design (checked as :func:`simcore.evaluate` checks one)."""
    from ..engine.core import check_gpus

    if gpus is None or isinstance(gpus, int | np.integer):
        return [check_gpus(gpus, exact)[0]] * len(labels)
    if isinstance(gpus, str) or not isinstance(gpus, Sequence) or len(gpus) != len(labels):
        raise SimcoreInputError(f"gpus: pass one budget for every design, or a sequence of "
                                f"{len(labels)} (one per design: {', '.join(labels)}); got "
                                f"{gpus!r}")
    if exact and any(g is None for g in gpus):
        raise SimcoreInputError("exact_gpus=True needs a budget for every design")
    return [check_gpus(g, exact)[0] for g in gpus]


def _axis(values: Sequence[int] | int | None, default: int, name: str) -> list[int]:
    if values is None:
        return [default]
    vals = [values] if isinstance(values, int) else list(values)
    if not vals or any(isinstance(v, bool) or int(v) != v or v < 1 for v in vals):
        raise SimcoreInputError(f"{name} must be positive integers, got {values!r}")
    out = sorted({int(v) for v in vals})
    return out


def compare(
    designs: Sequence[str | HardwareFamily],
    model: Model | str,
    workload: Workload | str = "decode",
    *,
    batch: Sequence[int] | int | None = None,
    s_kv: Sequence[int] | int | None = None,
    space: Any = "reduced",
    metric: str | Metric = "latency",
    efficiency: Efficiency | None = None,
    gpus: int | Sequence[int | None] | None = None,
    exact_gpus: bool = False,
) -> CompareResult:
    """Best layout of each design at every (batch, s_kv) point; speed-up over the first.

    Parameters
    ----------
    designs : sequence of str or HardwareFamily
        Two or more: family names or ``FAMILY:knob=value,...`` (see :func:`parse_design`).
    model : Model or str
    workload : Workload or {"decode", "prefill", "train"}
        The mode (and, for a Workload, every other field); ``batch`` / ``s_kv`` default
        to its values (1 and 8192 for a mode name).
    batch, s_kv : int or sequence of int
        The points swept (their product).
    metric : str
        What "best layout" means (default latency).
    gpus : int, or a sequence of int or None (one per design), optional
        Device budget (see :func:`simcore.evaluate`): each design's best layout uses at
        most ``gpus`` devices (exactly, with ``exact_gpus``); None (the default) leaves a
        design uncapped, free to spread over its whole system. ``simcore compare`` passes
        one node per GPU design unless ``--gpus`` says otherwise
        (:mod:`simcore.studies.assumptions`), so its speed-ups compare equal device
        counts.
    exact_gpus : bool

    Raises
    ------
    SimcoreInputError
        Fewer than two designs, a bad design, a bad budget, or no point where every
        design fits.
    """
    if isinstance(designs, str | HardwareFamily):
        designs = [designs]
    parsed = [parse_design(d) for d in designs]
    labels = [lab for lab, _ in parsed]
    if len(parsed) < 2:
        raise SimcoreInputError(f"compare needs two or more designs, got {labels}")
    if len(set(labels)) != len(labels):
        raise SimcoreInputError(f"designs repeat a name: {labels}")
    if isinstance(workload, str):
        try:
            base = Workload(workload, batch=1, s_kv=8192)
        except ValueError as exc:
            raise SimcoreInputError(f"workload: {exc}") from None
    elif isinstance(workload, Workload):
        base = workload
    else:
        raise SimcoreInputError(f"workload must be a mode name or a Workload, got "
                                f"{type(workload).__name__}")
    budgets = _budgets(gpus, exact_gpus, labels)
    bs = _axis(batch, base.batch, "batch")
    ss = _axis(s_kv, base.s_kv, "s_kv")
    m = get_metric(metric)
    shape = (len(parsed), len(bs), len(ss))
    num = {v: np.full(shape, np.nan) for v in ("latency_ns", "throughput_tok_s", "n_devices")}
    fits = np.zeros(shape, dtype=bool)
    lay: dict[str, np.ndarray] = {d: np.empty(shape, dtype=object) for d in PARALLEL_DIMS}
    model_name = ""
    for i, ((_, fam), budget) in enumerate(zip(parsed, budgets, strict=True)):
        for j, b in enumerate(bs):
            for k, s in enumerate(ss):
                try:
                    wl = replace(base, batch=b, s_kv=s, s_q=0 if base.mode != "decode"
                                 else base.s_q)
                except ValueError as exc:
                    raise SimcoreInputError(f"batch={b}, s_kv={s}: {exc}") from None
                p = prepare(model, wl, space=space, hardware=fam.hardware, family=fam,
                            efficiency=efficiency, gpus=budget, exact_gpus=exact_gpus)
                model_name = p.model.name
                r = reduce_best(p, metric=m).squeeze()
                ok = bool(r.any_fits)
                fits[i, j, k] = ok
                for v in num:
                    num[v][i, j, k] = float(r[v]) if ok else np.nan
                for d in PARALLEL_DIMS:
                    lay[d][i, j, k] = r[f"best_{d}"].item() if ok else None
    shared_mask = fits.all(axis=0)
    shared = [(bs[j], ss[k]) for j, k in zip(*np.nonzero(shared_mask), strict=True)]
    if not shared:
        where = "; ".join(
            f"{lab}: " + (", ".join(f"batch={bs[j]} s_kv={ss[k]}"
                                   for j, k in zip(*np.nonzero(fits[i]), strict=True)) or "none")
            for i, lab in enumerate(labels))
        caps = ("" if all(b is None for b in budgets) else
                f" within {'exactly' if exact_gpus else 'at most'} "
                + " / ".join(dict.fromkeys("all" if b is None else str(b) for b in budgets))
                + " devices")
        raise SimcoreInputError(
            f"designs {', '.join(labels)} share no point where a layout fits{caps} "
            f"({model_name}, {base.mode}); fitting points per design: {where}")
    lat = num["latency_ns"]
    speedup = np.where(fits & fits[:1], lat[:1] / lat, np.nan)
    dims = ("design", "batch", "s_kv")
    ds = xr.Dataset(coords={"design": labels, "batch": bs, "s_kv": ss},
                    attrs={"model": model_name, "mode": base.mode, "metric": m.name,
                           "cuda_graphs": int(base.cuda_graphs),
                           "gpus": ",".join("all" if b is None else str(b) for b in budgets),
                           "exact_gpus": int(exact_gpus)})
    for v, arr in {**num, "speedup": speedup}.items():
        units, long_name = COMPARE_VARIABLES[v]
        ds[v] = xr.DataArray(arr, dims=dims, attrs={"units": units, "long_name": long_name})
    ds["fits"] = xr.DataArray(fits, dims=dims)
    for d in PARALLEL_DIMS:
        ds[f"best_{d}"] = xr.DataArray(lay[d], dims=dims)
    return CompareResult(model=model_name, mode=base.mode, metric=m.name, designs=labels,
                         dataset=ds, shared=shared, gpus=tuple(budgets), exact_gpus=exact_gpus,
                         workload=base)
