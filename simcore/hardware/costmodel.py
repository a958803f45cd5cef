"""A declarative cost and power model: dollars and watts per device from the six knobs.

:class:`CostModel` is a frozen spec: a base price and base power per device plus one
:class:`KnobCost` per hardware knob. Each knob term is

``usd_per_unit · ref · (x / ref) ** exponent``   (and likewise ``w_per_unit``, ``w_exponent``)

with ``x`` the knob in the term's unit (``pe_hbm_gb`` in GB, ``bw_hbm_gbs`` in TB/s,
``peak_tflops_f16`` in TFLOP/s, the three link tiers in GB/s per device) and ``ref`` a
reference value of the knob in the same unit (H100 SXM by default). At ``x = ref`` the
term is exactly ``usd_per_unit · x``; an exponent > 1 makes it super-linear around the
reference (faster HBM stacks and bigger dies cost more than proportionally). Totals are
scaled by the devices a layout uses (``n_devices``): :func:`add_costs` writes
``cost_usd_per_device``, ``power_w_per_device``, ``cost_usd``, ``power_w`` and
``tokens_per_s_per_gpu`` into a per-hardware Dataset. ``cost_score`` (Σ knob/default,
:func:`simcore.studies.codesign.cost_score`) stays the original unit-free proxy.

A model loads from TOML or JSON (:func:`load_cost_model`)::

    base_usd = 5000
    base_w = 200
    [knobs.bw_hbm_gbs]     # unit TB/s
    usd_per_unit = 1500
    w_per_unit = 30
    exponent = 1.2
    ref = 3.35

Knobs left out keep their :data:`DEFAULT_COST_MODEL` term; ``replace = true`` at the top
level starts from zero instead.

Defaults and their sources
--------------------------
Only the **totals** are anchored to public figures; the split over the knobs is a rough
public estimate (marked *estimate*), calibrated so the totals land near them:

============================  ==========================  ==========================================
term                          default                     source
============================  ==========================  ==========================================
H100 SXM list price (total)   model: ~$30.8k              *public reporting*: $25k-$30k per H100
                                                          to end customers (Raymond James
                                                          estimate, via TechSpot 2023-08:
                                                          techspot.com/news/99839); ~$30k per
                                                          H100 80GB card in the US (Financial
                                                          Times report, via Tom's Hardware
                                                          2023-08-15)
A100 80GB price (total)       model: ~$17.2k              *public reporting*: ~$15k-$17k list
                                                          (CNBC 2023; retail listings)
HBM capacity                  $15 / GB                    *estimate*: HBM3 ~$10-20/GB (TrendForce
                                                          and SemiAnalysis reporting, 2023-24)
HBM bandwidth                 $1,500 / TB/s, exp 1.2      *estimate* (stacks, interposer, PHY)
compute                       $12 / TFLOP/s (f16 dense)   *estimate* (die + CoWoS share)
scale-up link (NVLink)        $8 / GB/s                   *estimate* (NVSwitch share per GPU)
scale-out NIC (inter)         $40 / GB/s                  *estimate*: ConnectX-7 400 Gb/s
                                                          (50 GB/s) NIC ~$1.5k-2.5k list + port
system network (intersip)     $40 / GB/s                  *estimate*: switch ports and optics
base (board, cooling, host)   $5,000                      *estimate*
H100 SXM power (total)        model: 688 W + 35 W net     NVIDIA H100 data sheet: SXM5 TDP 700 W
A100 SXM power (total)        model: 397 W + 18 W net     NVIDIA A100 data sheet: SXM4 TDP 400 W
H200 SXM power (total)        model: 738 W + 35 W net     NVIDIA H200 data sheet: up to 700 W
                                                          (HBM3e is more efficient per TB/s than
                                                          the model's one rate: +5 %)
compute power                 0.36 W / TFLOP/s            *estimate*, calibrated to the TDPs
HBM bandwidth power           30 W / TB/s                 *estimate* (~3-4 pJ/bit HBM3 access
                                                          energy, public JEDEC/vendor talks)
HBM capacity power            0.1 W / GB                  *estimate* (refresh, standby)
NVLink power                  0.05 W / GB/s               *estimate*
NIC power                     0.5 W / GB/s                *estimate*: ConnectX-7 ~25 W typical
system network power          0.2 W / GB/s                *estimate*: optics/switch share
base power                    200 W                       *estimate* (board, VRM, fans share)
============================  ==========================  ==========================================

Examples
--------
>>> from simcore.model.presets import get_family
>>> m = DEFAULT_COST_MODEL
>>> round(float(m.device_cost_usd(get_family("H100-SXM").hardware.as_dict())), -2)
30800.0
>>> round(float(m.device_power_w(get_family("A100-80G").hardware.as_dict())))
415
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SimcoreInputError
from ..model.specs import HW_KNOBS

__all__ = [
    "KNOB_UNITS",
    "KnobCost",
    "CostModel",
    "DEFAULT_COST_MODEL",
    "COST_VARIABLES",
    "load_cost_model",
    "get_cost_model",
    "add_costs",
    "usd_per_million_tokens",
]

#: knob -> (the unit its price is quoted in, multiplier from the knob's own unit).
KNOB_UNITS: dict[str, tuple[str, float]] = {
    "pe_hbm_gb": ("GB", 1.0),
    "bw_hbm_gbs": ("TB/s", 1e-3),
    "peak_tflops_f16": ("TFLOP/s", 1.0),
    "bw_intra_gbs": ("GB/s", 1.0),
    "bw_inter_gbs": ("GB/s", 1.0),
    "bw_intersip_gbs": ("GB/s", 1.0),
}

#: Variables :func:`add_costs` writes: name -> (units, long_name).
COST_VARIABLES: dict[str, tuple[str, str]] = {
    "cost_usd_per_device": ("USD", "price per device"),
    "power_w_per_device": ("W", "power per device"),
    "cost_usd": ("USD", "price of the devices the best layout uses"),
    "power_w": ("W", "power of the devices the best layout uses"),
    "tokens_per_s_per_gpu": ("tokens/s/device", "throughput per device"),
}

_TERM_FIELDS = ("usd_per_unit", "w_per_unit", "exponent", "w_exponent", "ref", "source")


def _number(owner: str, name: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SimcoreInputError(f"cost model {owner}.{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        what = "> 0" if positive else ">= 0 (a price or power cannot be negative)"
        raise SimcoreInputError(f"cost model {owner}.{name} must be a finite number {what}, "
                                f"got {value!r}")
    return v


@dataclass(frozen=True)
class KnobCost:
    """Price and power of one knob: ``usd_per_unit · ref · (x/ref) ** exponent``.

    ``x`` and ``ref`` are in the knob's price unit (:data:`KNOB_UNITS`: GB, TB/s,
    TFLOP/s, GB/s). ``source`` says where the numbers come from.
    """

    knob: str
    usd_per_unit: float = 0.0
    w_per_unit: float = 0.0
    exponent: float = 1.0
    w_exponent: float = 1.0
    ref: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        if self.knob not in KNOB_UNITS:
            raise SimcoreInputError(f"cost model: unknown knob {self.knob!r}; knobs are "
                                    f"{', '.join(HW_KNOBS)}")
        for name in ("usd_per_unit", "w_per_unit"):
            object.__setattr__(self, name, _number(self.knob, name, getattr(self, name)))
        for name in ("exponent", "w_exponent", "ref"):
            object.__setattr__(self, name, _number(self.knob, name, getattr(self, name),
                                                   positive=True))

    @property
    def unit(self) -> str:
        return KNOB_UNITS[self.knob][0]

    def _term(self, x: Any, per_unit: float, exponent: float) -> Any:
        u = x * KNOB_UNITS[self.knob][1]
        return per_unit * self.ref * (u / self.ref) ** exponent

    def usd(self, x: Any) -> Any:
        """Price of this knob at value ``x`` (in the knob's own unit, e.g. GB/s)."""
        return self._term(x, self.usd_per_unit, self.exponent)

    def watts(self, x: Any) -> Any:
        """Power of this knob at value ``x`` (in the knob's own unit)."""
        return self._term(x, self.w_per_unit, self.w_exponent)


@dataclass(frozen=True)
class CostModel:
    """Price (USD) and power (W) per device as functions of the six knobs.

    Parameters
    ----------
    base_usd, base_w : float
        Per-device cost and power that do not depend on the knobs.
    knobs : tuple of KnobCost
        At most one term per knob; a knob without a term costs nothing.
    name, source : str
        What this model is and where its numbers come from.

    Examples
    --------
    >>> m = CostModel(base_usd=100, knobs=(KnobCost("pe_hbm_gb", usd_per_unit=10),))
    >>> float(m.device_cost_usd({"pe_hbm_gb": 80.0}))
    900.0
    """

    base_usd: float = 0.0
    base_w: float = 0.0
    knobs: tuple[KnobCost, ...] = ()
    name: str = "custom"
    source: str = ""
    _by_knob: dict[str, KnobCost] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_usd", _number("base", "base_usd", self.base_usd))
        object.__setattr__(self, "base_w", _number("base", "base_w", self.base_w))
        object.__setattr__(self, "knobs", tuple(self.knobs))
        by: dict[str, KnobCost] = {}
        for t in self.knobs:
            if not isinstance(t, KnobCost):
                raise SimcoreInputError(f"cost model knobs must be KnobCost terms, got {t!r}")
            if t.knob in by:
                raise SimcoreInputError(f"cost model: knob {t.knob!r} given twice")
            by[t.knob] = t
        object.__setattr__(self, "_by_knob", by)

    def term(self, knob: str) -> KnobCost | None:
        return self._by_knob.get(knob)

    def device_cost_usd(self, knobs: Mapping[str, Any]) -> Any:
        """Price per device; ``knobs`` maps knob -> value (numbers, arrays, DataArrays)."""
        total: Any = self.base_usd
        for t in self.knobs:
            total = total + t.usd(knobs[t.knob])
        return total

    def device_power_w(self, knobs: Mapping[str, Any]) -> Any:
        """Power per device (W); ``knobs`` as in :meth:`device_cost_usd`."""
        total: Any = self.base_w
        for t in self.knobs:
            total = total + t.watts(knobs[t.knob])
        return total

    def check_finite(self, knobs: Mapping[str, Any], *, n_devices: float = 1.0) -> None:
        """Refuse a model whose price or power overflows to ``inf`` on ``knobs`` (knob ->
        the values it takes: a number, a sequence, an array or a DataArray), totals over up
        to ``n_devices`` devices included, with a :class:`~simcore.errors.SimcoreInputError`
        naming the term's key (``knobs.bw_hbm_gbs.exponent``) and what to pass instead.

        Each term grows with its knob, so it is evaluated at the knob's largest value
        only: cheap enough to run before any sweep.

        Examples
        --------
        >>> m = CostModel(knobs=(KnobCost("bw_hbm_gbs", 1500.0, exponent=1000, ref=3.35),))
        >>> m.check_finite({"bw_hbm_gbs": [3350.0]})  # at the reference: 1500 x 3.35
        >>> try:
        ...     m.check_finite({"bw_hbm_gbs": [3350.0, 8000.0]})
        ... except ValueError as exc:
        ...     print(str(exc).split(";")[0])
        cost model 'custom': the price of knobs.bw_hbm_gbs overflows to inf at bw_hbm_gbs=8000 (exponent 1000)
        """
        total = {"price": float(self.base_usd), "power": float(self.base_w)}
        for t in self.knobs:
            if t.knob not in knobs:
                continue
            x = float(np.max(np.asarray(knobs[t.knob], dtype=float)))
            for what, per_unit, exponent, key, field_ in (
                    ("price", t.usd_per_unit, t.exponent, "exponent", "usd_per_unit"),
                    ("power", t.w_per_unit, t.w_exponent, "w_exponent", "w_per_unit")):
                with np.errstate(over="ignore"):
                    value = float(t._term(np.float64(x), per_unit, exponent))
                if not math.isfinite(value):
                    fix = key if exponent != 1.0 else field_
                    raise SimcoreInputError(
                        f"cost model {self.name!r}: the {what} of knobs.{t.knob} overflows to "
                        f"inf at {t.knob}={x:g} ({key} {exponent:g}); pass a smaller "
                        f"knobs.{t.knob}.{fix} (the term is {field_} x ref x (x / ref) ** "
                        f"{key})")
                total[what] += value
        for what, value in total.items():
            if not math.isfinite(value * max(float(n_devices), 1.0)):
                keys = "base_usd, knobs.*.usd_per_unit" if what == "price" else \
                    "base_w, knobs.*.w_per_unit"
                raise SimcoreInputError(
                    f"cost model {self.name!r}: the total {what} over {n_devices:g} devices "
                    f"overflows to inf ({value:.3g} per device); pass smaller values of {keys}")

    def breakdown(self, knobs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One row per term (base first): knob, usd, w, source."""
        rows = [{"knob": "base", "usd": self.base_usd, "w": self.base_w, "source": self.source}]
        rows += [{"knob": t.knob, "usd": float(t.usd(knobs[t.knob])),
                  "w": float(t.watts(knobs[t.knob])), "source": t.source} for t in self.knobs]
        return rows

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: CostModel | None = None,
                  where: str = "cost model") -> CostModel:
        """Build from a mapping (the parsed TOML/JSON); knobs not given keep ``base``'s
        terms (default :data:`DEFAULT_COST_MODEL`) unless ``replace`` is true."""
        if not isinstance(data, Mapping):
            raise SimcoreInputError(f"{where}: expected a table/object at the top, got "
                                    f"{type(data).__name__}")
        allowed = {"base_usd", "base_w", "knobs", "name", "source", "replace"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise SimcoreInputError(f"{where}: unknown keys {unknown}; allowed: {sorted(allowed)}")
        start = CostModel() if data.get("replace") else (base or DEFAULT_COST_MODEL)
        raw = data.get("knobs", {})
        if not isinstance(raw, Mapping):
            raise SimcoreInputError(f"{where}: 'knobs' must be a table of knob -> term")
        terms = {t.knob: t for t in start.knobs}
        for knob, spec in raw.items():
            if knob not in KNOB_UNITS:
                raise SimcoreInputError(f"{where}: unknown knob {knob!r}; knobs are "
                                        f"{', '.join(HW_KNOBS)}")
            if not isinstance(spec, Mapping):
                raise SimcoreInputError(f"{where}: knobs.{knob} must be a table with "
                                        f"{', '.join(_TERM_FIELDS)}")
            bad = sorted(set(spec) - set(_TERM_FIELDS))
            if bad:
                raise SimcoreInputError(f"{where}: knobs.{knob}: unknown keys {bad}; allowed: "
                                        f"{', '.join(_TERM_FIELDS)}")
            prev = terms.get(knob, KnobCost(knob))
            terms[knob] = replace(prev, **{"source": where, **spec})
        return CostModel(
            base_usd=data.get("base_usd", start.base_usd), base_w=data.get("base_w", start.base_w),
            knobs=tuple(terms[k] for k in HW_KNOBS if k in terms),
            name=str(data.get("name", "custom")), source=str(data.get("source", start.source)))


_H100 = {"pe_hbm_gb": 85.9, "bw_hbm_gbs": 3.35, "peak_tflops_f16": 989.0,
         "bw_intra_gbs": 450.0, "bw_inter_gbs": 50.0, "bw_intersip_gbs": 50.0}

#: The documented defaults (see the module docstring for every source). Rough public
#: estimates, calibrated so H100 SXM ≈ $30.8k and 688 W (+35 W network), A100 80GB ≈ $17.2k and 397 W.
DEFAULT_COST_MODEL = CostModel(
    base_usd=5000.0, base_w=200.0, name="default (public estimates, H100-calibrated)",
    source="estimate: board, cooling and host share",
    knobs=(
        KnobCost("pe_hbm_gb", 15.0, 0.1, ref=_H100["pe_hbm_gb"],
                 source="estimate: HBM3 ~$10-20/GB (TrendForce/SemiAnalysis reporting)"),
        KnobCost("bw_hbm_gbs", 1500.0, 30.0, exponent=1.2, ref=_H100["bw_hbm_gbs"],
                 source="estimate: stacks/interposer/PHY; ~3-4 pJ/bit HBM3 access energy"),
        KnobCost("peak_tflops_f16", 12.0, 0.36, ref=_H100["peak_tflops_f16"],
                 source="estimate: calibrated to H100 SXM ~$25-40k (CNBC 2023) and "
                        "700 W TDP (NVIDIA H100 data sheet)"),
        KnobCost("bw_intra_gbs", 8.0, 0.05, ref=_H100["bw_intra_gbs"],
                 source="estimate: NVSwitch share per GPU"),
        KnobCost("bw_inter_gbs", 40.0, 0.5, ref=_H100["bw_inter_gbs"],
                 source="estimate: ConnectX-7 400 Gb/s NIC ~$1.5-2.5k list, ~25 W"),
        KnobCost("bw_intersip_gbs", 40.0, 0.2, ref=_H100["bw_intersip_gbs"],
                 source="estimate: switch ports and optics share"),
    ),
)


def load_cost_model(path: str | os.PathLike[str]) -> CostModel:
    """A :class:`CostModel` from a ``.toml`` or ``.json`` file (see the module docstring).

    Unreadable files, bad syntax, unknown knobs or keys and negative prices raise
    :class:`~simcore.errors.SimcoreInputError` naming the file.
    """
    from ..io import InputFileError, read_input_bytes

    p = Path(path)
    try:  # a regular file only: a FIFO would block forever
        text = read_input_bytes(p)
    except OSError as exc:
        raise SimcoreInputError(f"cost model {str(p)!r}: cannot read it: "
                                f"{exc.strerror or exc}") from None
    except InputFileError as exc:
        raise SimcoreInputError(f"cost model {str(p)!r}: cannot read it: it {exc.why}; pass "
                                "a TOML or JSON file") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text.decode("utf-8"))
        else:
            data = tomllib.loads(text.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
        raise SimcoreInputError(f"cost model {str(p)!r}: not valid {kind}: {exc}") from None
    except RecursionError:
        raise SimcoreInputError(f"cost model {str(p)!r}: nested too deeply; a cost model "
                                "nests two levels ([knobs.NAME])") from None
    model = CostModel.from_dict(data, where=f"cost model {str(p)!r}")
    if "name" not in data:
        model = replace(model, name=p.stem)
    return model


def get_cost_model(cost_model: CostModel | Mapping[str, Any] | str | os.PathLike[str] | bool
                   | None) -> CostModel | None:
    """``None``/``False`` -> None; ``True`` or ``"default"`` -> :data:`DEFAULT_COST_MODEL`;
    a mapping -> :meth:`CostModel.from_dict`; a path -> :func:`load_cost_model`."""
    if cost_model is None or cost_model is False:
        return None
    if cost_model is True or cost_model == "default":
        return DEFAULT_COST_MODEL
    if isinstance(cost_model, CostModel):
        return cost_model
    if isinstance(cost_model, Mapping):
        return CostModel.from_dict(cost_model)
    if isinstance(cost_model, str | os.PathLike):
        return load_cost_model(cost_model)
    raise SimcoreInputError(f"cost_model must be a CostModel, a mapping, a TOML/JSON path or "
                            f"'default', got {type(cost_model).__name__}")


def add_costs(ds: Any, cost_model: CostModel | None = None, *, n_devices: str = "n_devices",
              throughput: str = "throughput_tok_s") -> Any:
    """Add the :data:`COST_VARIABLES` to a per-hardware Dataset (knob dims, ``n_devices``).

    Per-device values depend on the knobs only; totals multiply by the devices the best
    layout uses (NaN where nothing fits).

    Examples
    --------
    >>> import xarray as xr
    >>> ds = xr.Dataset({"n_devices": ("bw_hbm_gbs", [8.0, 16.0]),
    ...                  "throughput_tok_s": ("bw_hbm_gbs", [800.0, 1600.0])},
    ...                 coords={"bw_hbm_gbs": [3350.0, 6700.0]})
    >>> ds = ds.assign_coords(pe_hbm_gb=80.0, peak_tflops_f16=989.0, bw_intra_gbs=450.0,
    ...                       bw_inter_gbs=50.0, bw_intersip_gbs=50.0)
    >>> out = add_costs(ds)
    >>> out.tokens_per_s_per_gpu.values.tolist()
    [100.0, 100.0]
    >>> add_costs(ds, CostModel()).cost_usd_per_device.values.tolist()  # no terms: 0 $
    [0.0, 0.0]
    """
    import xarray as xr

    m = cost_model or DEFAULT_COST_MODEL
    knobs = {k: ds[k] for k in HW_KNOBS}
    n = ds[n_devices]
    n_max = float(np.nanmax(n.values)) if n.size and np.isfinite(n.values).any() else 1.0
    m.check_finite(knobs, n_devices=n_max)  # never an inf price in the output
    # every knob dim, even for a model without a term for some knob (or none at all)
    grid = sum((0.0 * ds[k] for k in HW_KNOBS), start=xr.DataArray(0.0))
    dev_usd = m.device_cost_usd(knobs) + grid
    dev_w = m.device_power_w(knobs) + grid
    out = ds.copy()
    dims = [d for d in HW_KNOBS if d in ds.dims]
    values = {
        "cost_usd_per_device": dev_usd,
        "power_w_per_device": dev_w,
        "cost_usd": dev_usd * n,
        "power_w": dev_w * n,
        "tokens_per_s_per_gpu": ds[throughput] / n,
    }
    for name, da in values.items():
        if hasattr(da, "dims"):
            da = da.transpose(*[d for d in dims if d in da.dims])
        out[name] = da
        units, long_name = COST_VARIABLES[name]
        out[name].attrs = {"units": units, "long_name": long_name,
                           **({"cost_model": m.name} if name != "tokens_per_s_per_gpu" else {})}
    out.attrs["cost_model"] = m.name
    return out


def usd_per_million_tokens(tokens_per_s_per_gpu: float, family: Any, *, hours: float,
                           usd_per_kwh: float) -> float:
    """What a million tokens cost on ``family``'s GPUs at ``tokens_per_s_per_gpu``: the
    family's cited price per GPU (``HardwareFamily.price_usd``, an indication) spread over
    ``hours`` of service, plus its data-sheet maximum power (``power_w``) at ``usd_per_kwh``.
    ``hours`` and ``usd_per_kwh`` are the caller's assumptions (no default: a service life
    and an electricity price are not properties of the hardware); host, network, facility
    and cooling are not counted. A family without a cited price or power is refused in one
    line naming the families that have both.

    Examples
    --------
    >>> from simcore.hardware.families import get_family
    >>> round(usd_per_million_tokens(1000.0, get_family("H200"), hours=4 * 8760,
    ...                              usd_per_kwh=0.10), 4)
    0.2731
    """
    from ..errors import SpecError
    from .families import HARDWARE_FAMILIES, get_family

    fam = get_family(family)
    if fam.price_usd is None or fam.power_w is None:
        have = [n for n, f in HARDWARE_FAMILIES.items() if f.price_usd and f.power_w]
        raise SpecError(f"{fam.name} has no cited price and power per GPU (simcore families "
                        f"--provenance {fam.name}); pass one of {', '.join(have)}")
    for name, v in (("tokens_per_s_per_gpu", tokens_per_s_per_gpu), ("hours", hours),
                    ("usd_per_kwh", usd_per_kwh)):
        if not (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                and v > 0):
            raise SimcoreInputError(f"usd_per_million_tokens: {name} must be a positive "
                                    f"number, got {v!r}")
    usd_per_hour = fam.price_usd / hours + fam.power_w / 1000.0 * usd_per_kwh
    return usd_per_hour / (tokens_per_s_per_gpu * 3600.0) * 1e6
