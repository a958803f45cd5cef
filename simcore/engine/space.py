"""The design space as xarray coordinates.

Hardware knobs and parallel-layout choices are dimensions. A :class:`Space` holds the
layout coordinates; hardware grids are plain mappings knob → values (see
:func:`hardware_grid`). Invalid layout combinations are *masked* (the ``valid``
variable of :func:`simcore.evaluate`), never dropped.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import SimcoreInputError
from ..model.specs import HW_KNOBS, Hardware, Workload

__all__ = [
    "PARALLEL_DIMS",
    "CHOICES",
    "Space",
    "NamedSpace",
    "SPACE_NAMES",
    "MAX_EP",
    "expert_sizes",
    "ep_choices",
    "check_ep",
    "reduced_space",
    "full_space",
    "get_space",
    "hardware_grid",
    "layout_table",
    "PLACEMENT_ORDERS",
    "physical_keys",
    "canonical_layouts",
    "straddling_layouts",
    "HW_KNOB_DEFAULTS",
    "DEPTHS",
    "depth_grid",
    "WORKLOAD_DIMS",
    "TRAIN_DIMS",
    "RECOMPUTE_CHOICES",
    "ZERO_STAGES",
    "workload_points",
]

#: Layout dims in canonical (C-order) order.
PARALLEL_DIMS: tuple[str, ...] = (
    "cp", "tp", "pp", "dp", "kv_shard_mode",
    "ffn_shard_scope", "tp_placement", "cp_placement", "cp_ring_variant", "ep",
)

#: Allowed values of the categorical layout dims (index = integer code in kernels).
CHOICES: dict[str, tuple[str, ...]] = {
    # head: KV heads over TP ranks, duplicated when tp > n_kv_heads;
    # seq: every rank keeps all KV heads for 1/tp of the sequence (split-K combine);
    # head_seq: heads over n_kv_heads groups, sequence within each group
    #           (needs tp a multiple of n_kv_heads, tp > n_kv_heads).
    # MLA caches one latent shared by all heads (one group): head keeps it whole on every
    # TP rank, seq and head_seq (tp > 1) split it by sequence (docs/design.md).
    "kv_shard_mode": ("head", "seq", "head_seq"),
    # which group shards the FFN weights
    "ffn_shard_scope": ("TP", "TP+CP"),
    # TP innermost (stride 1) or outside CP
    "tp_placement": ("inner", "outer"),
    # CP inside DP/PP, or outermost (PP is always outside DP)
    "cp_placement": ("inner", "outer"),
    # ring attention passes KV blocks, or Q, O and softmax stats (m, l)
    "cp_ring_variant": ("kv", "qoml"),
}

_LATENCY_FRIENDLY = {
    "ffn_shard_scope": "TP",
    "tp_placement": "inner",
    "cp_placement": "inner",
}


@dataclass(frozen=True)
class Space:
    """Layout coordinates: a mapping dim → tuple of values, in :data:`PARALLEL_DIMS` order."""

    coords: tuple[tuple[str, tuple[Any, ...]], ...]
    name: str = "custom"

    def __post_init__(self) -> None:
        d = dict(self.coords)
        if list(d) != list(PARALLEL_DIMS):
            raise ValueError(f"Space needs exactly the dims {list(PARALLEL_DIMS)} in order")
        for dim in ("cp", "tp", "pp", "dp", "ep"):
            vals = d[dim]
            if not vals or any(int(v) != v or v < 1 for v in vals):
                raise ValueError(f"Space.{dim} must be positive integers, got {vals!r}")
        for dim, allowed in CHOICES.items():
            bad = [v for v in d[dim] if v not in allowed]
            if bad or not d[dim]:
                raise ValueError(f"Space.{dim} values {bad} unknown; pass some of {list(allowed)}")

    @property
    def dict(self) -> dict[str, tuple[Any, ...]]:
        return dict(self.coords)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for _, v in self.coords)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def with_(self, **values: Sequence[Any]) -> Space:
        """A copy with some dims replaced."""
        unknown = set(values) - set(PARALLEL_DIMS)
        if unknown:
            raise ValueError(f"unknown layout dims {sorted(unknown)}; known: {list(PARALLEL_DIMS)}")
        d = self.dict
        d.update({k: tuple(v) for k, v in values.items()})
        return Space(tuple((k, d[k]) for k in PARALLEL_DIMS), name=self.name + "*")


def reduced_space(
    *,
    cp: Sequence[int] = (1, 2, 4, 8, 16),
    tp: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
    pp: Sequence[int] = (1, 2, 4, 8),
    dp: Sequence[int] = (1, 2, 4, 8),
    ep: Sequence[int] = (1,),
) -> Space:
    """CP×TP×PP×DP×kv_shard_mode (1,920 points); other knobs at latency-friendly defaults.

    ``ep`` (expert parallelism, MoE only) defaults to 1: experts split over the TP×DP
    devices of a stage (training: TP×CP×DP, each expert whole on its rank) with all-to-all
    dispatch and combine; pass e.g. ``ep=(1, 2, 4, 8)``.
    """
    d: dict[str, tuple[Any, ...]] = {
        "cp": tuple(cp), "tp": tuple(tp), "pp": tuple(pp), "dp": tuple(dp),
        "kv_shard_mode": CHOICES["kv_shard_mode"],
    }
    d.update({k: (v,) for k, v in _LATENCY_FRIENDLY.items()})
    d["cp_ring_variant"] = ("qoml",)
    d["ep"] = tuple(ep)
    return Space(tuple((k, d[k]) for k in PARALLEL_DIMS), name="reduced")


def full_space(**kw: Sequence[int]) -> Space:
    """All layout dims (30,720 points with the default integer grids, ``ep`` = 1)."""
    base = reduced_space(**kw).dict
    base.update(CHOICES)
    return Space(tuple((k, tuple(base[k])) for k in PARALLEL_DIMS), name="full")


#: The largest pipeline degree a budget-widened named space offers.
MAX_BUDGET_PP = 64


def budget_sizes(default: Sequence[int], gpus: int, cap: int | None = None) -> tuple[int, ...]:
    """A layout dim's sizes widened to a device budget: ``default``, every power of two up
    to ``gpus`` (and ``cap``), and every ``gpus / 2^k`` that is a whole number (so a
    power-of-two TP / CP / PP times DP uses exactly ``gpus`` devices, e.g. TP8 x DP3 for
    24).

    Examples
    --------
    >>> budget_sizes((1, 2, 4, 8), 64)
    (1, 2, 4, 8, 16, 32, 64)
    >>> budget_sizes((1, 2, 4, 8), 24)
    (1, 2, 3, 4, 6, 8, 12, 16, 24)
    >>> budget_sizes((1, 2, 4, 8), 1024, cap=64)
    (1, 2, 4, 8, 16, 32, 64)
    """
    top = gpus if cap is None else min(gpus, cap)
    sizes = set(default)
    p = 1
    while p <= top:
        sizes.add(p)
        if gpus % p == 0 and gpus // p <= top:
            sizes.add(gpus // p)
        p *= 2
    return tuple(sorted(sizes))


#: The named layout spaces (:func:`reduced_space`, :func:`full_space`).
SPACE_NAMES: tuple[str, ...] = ("reduced", "full")

#: The largest expert-parallel degree a named space offers an MoE model without a device
#: budget (with one, up to the budget).
MAX_EP = 64


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def expert_sizes(experts: int, gpus: int | None = None) -> tuple[int, ...]:
    """The ``ep`` values a named space offers a model with ``experts`` routed experts:
    ``(1,)`` for a dense model (``experts`` 1); else every divisor of ``experts`` up to the
    budget ``gpus`` (:data:`MAX_EP` without one) that is a power of two or divides
    ``gpus`` (the devices TP x DP can hold: ``ep`` must divide them).

    Examples
    --------
    >>> expert_sizes(256, 16), expert_sizes(8, 16), expert_sizes(1, 16)
    ((1, 2, 4, 8, 16), (1, 2, 4, 8), (1,))
    >>> expert_sizes(60, 24)
    (1, 2, 3, 4, 6, 12)
    >>> expert_sizes(128)
    (1, 2, 4, 8, 16, 32, 64)
    """
    experts = int(experts)
    if experts <= 1:
        return (1,)
    top = min(experts, MAX_EP if gpus is None else int(gpus))
    return tuple(d for d in range(1, top + 1) if experts % d == 0
                 and (_power_of_two(d) or (gpus is not None and gpus % d == 0)))


def ep_choices(space: Space, experts: int, mode: str = "decode",
               gpus: int | None = None) -> tuple[int, ...]:
    """Every ``ep`` a layout of ``space`` can take for a model with ``experts`` routed
    experts (the values :class:`NamedSpace` pins may name): 1, and each divisor of
    ``experts`` that divides some TP x DP of the space (TP x CP x DP in training: the
    devices the experts split over) and is at most the budget ``gpus``.

    Examples
    --------
    >>> ep_choices(get_space("reduced", gpus=16), 256, gpus=16)
    (1, 2, 4, 8, 16)
    >>> ep_choices(get_space("reduced", gpus=16), 1, gpus=16)
    (1,)
    """
    d = space.dict
    cps = d["cp"] if mode == "train" else (1,)
    devices = {t * c * p for t in d["tp"] for c in cps for p in d["dp"]}
    experts = int(experts)
    if experts <= 1:
        return (1,)
    return tuple(v for v in range(1, experts + 1) if experts % v == 0
                 and (gpus is None or v <= gpus) and any(n % v == 0 for n in devices))


@dataclass(frozen=True)
class NamedSpace:
    """A named space (``"reduced"`` or ``"full"``) with its ``ep`` values pinned: resolved
    as the name is (widened to the budget and the model, :func:`get_space`), then ``ep``
    replaced. ``ep`` None keeps the name's own choices (:func:`expert_sizes`); ``"all"``
    takes every value the model can (:func:`ep_choices`). An ``ep`` the model cannot take
    (a dense model, a value dividing no layout's devices or not the experts) is a
    :class:`~simcore.errors.SimcoreInputError` naming the values it can.

    Examples
    --------
    >>> get_space(NamedSpace("reduced", ep=(8,)), gpus=16, experts=256).dict["ep"]
    (8,)
    >>> get_space(NamedSpace("reduced", ep="all"), gpus=24, experts=256).dict["ep"]
    (1, 2, 4, 8, 16)
    """

    name: str = "reduced"
    ep: tuple[int, ...] | str | None = None

    def __post_init__(self) -> None:
        if self.name not in SPACE_NAMES:
            raise ValueError(f"NamedSpace.name must be one of {list(SPACE_NAMES)}, "
                             f"got {self.name!r}")
        if isinstance(self.ep, str):
            if self.ep != "all":
                raise ValueError(f"NamedSpace.ep must be positive integers or 'all', got "
                                 f"{self.ep!r}")
        elif self.ep is not None:
            ep = tuple(self.ep)
            if not ep or any(isinstance(v, bool) or not isinstance(v, numbers.Integral)
                             or v < 1 for v in ep):
                raise ValueError(f"NamedSpace.ep must be positive integers, got {self.ep!r}")
            object.__setattr__(self, "ep", tuple(sorted({int(v) for v in ep})))

    def __str__(self) -> str:
        return self.name


def check_ep(values: Sequence[int], space: Space, experts: int, mode: str = "decode",
             gpus: int | None = None) -> None:
    """Refuse ``ep`` values a model with ``experts`` routed experts cannot take in
    ``space`` (:func:`ep_choices`): a :class:`~simcore.errors.SimcoreInputError` naming
    the ones it can."""
    bad = [v for v in values if v > 1]
    if bad and int(experts) <= 1:
        raise SimcoreInputError(f"ep={','.join(map(str, bad))}: the model is dense (no "
                                "experts); ep applies to mixture-of-experts models")
    ok = ep_choices(space, experts, mode, gpus)
    bad = [v for v in values if v not in ok]
    if bad:
        within = "" if gpus is None else f" within {gpus} devices"
        raise SimcoreInputError(
            f"ep={','.join(map(str, bad))}: ep must divide the {int(experts)} experts and the "
            f"devices of a layout{within}; pass one of {', '.join(map(str, ok))}")


def get_space(space: str | Space | NamedSpace | Mapping[str, Sequence[Any]] | None,
              mode: str = "decode", gpus: int | None = None, experts: int = 1) -> Space:
    """Resolve ``"reduced"``, ``"full"``, a :class:`NamedSpace`, a :class:`Space` or a
    mapping of overrides.

    For the reduced space the ring variant follows the mode: ``"kv"`` for prefill and
    training, ``"qoml"`` for decode (DESIGN.md). With a device budget ``gpus`` the two
    named spaces widen DP (and PP, up to :data:`MAX_BUDGET_PP`) to it
    (:func:`budget_sizes`): their default grids stop at 8 and hold powers of two only, so
    without it a question such as "the fastest layout of 64 GPUs" could never be answered
    with DP 64, nor one of 6 GPUs with TP2 x DP3. The widened grids are not nested: a
    budget of 24 offers DP 3, 6, 12 and 24, one of 32 does not, so a larger budget is not
    a superset of a smaller one's layouts. For a mixture-of-experts model (``experts`` >
    1 routed experts) the named spaces search expert parallelism over
    :func:`expert_sizes` (a dense model keeps ``ep`` 1); a :class:`NamedSpace` pins it.
    A :class:`Space` or a mapping is used as given.
    """
    pinned = space if isinstance(space, NamedSpace) else None
    if pinned is not None:
        space = pinned.name
    if space is None or space in SPACE_NAMES:
        s = full_space() if space == "full" else reduced_space().with_(
            cp_ring_variant=("qoml",) if mode == "decode" else ("kv",))
        d = s.dict
        if gpus is not None:
            d["dp"] = budget_sizes(d["dp"], gpus)
            d["pp"] = budget_sizes(d["pp"], gpus, cap=MAX_BUDGET_PP)
        d["ep"] = expert_sizes(experts, gpus)
        s = Space(tuple((k, d[k]) for k in PARALLEL_DIMS), name=s.name)
        if pinned is not None and pinned.ep is not None:
            if isinstance(pinned.ep, str):  # "all"
                d["ep"] = ep_choices(s, experts, mode, gpus)
            else:
                check_ep(pinned.ep, s, experts, mode, gpus)
                d["ep"] = tuple(pinned.ep)
            s = Space(tuple((k, d[k]) for k in PARALLEL_DIMS), name=s.name)
        return s
    if isinstance(space, Space):
        return space
    if isinstance(space, Mapping):
        return full_space().with_(**space)
    raise ValueError(f"space must be 'reduced', 'full', a NamedSpace, a Space or a mapping; "
                     f"got {space!r}")


def layout_table(space: Space) -> np.ndarray:
    """Every layout as integer rows (C order over :data:`PARALLEL_DIMS`).

    Integer dims hold their value; categorical dims hold their index in :data:`CHOICES`.
    """
    cols = []
    for dim, vals in space.coords:
        if dim in CHOICES:
            cols.append(np.array([CHOICES[dim].index(v) for v in vals], dtype=np.int64))
        else:
            cols.append(np.array([int(v) for v in vals], dtype=np.int64))
    grids = np.meshgrid(*cols, indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


#: Placement code (``tp_placement`` + 2 · ``cp_placement``, category indices) → the order
#: of the TP, CP, PP and DP groups (0, 1, 2, 3) on the devices, innermost first: TP
#: innermost or just outside CP; CP inside DP and PP or outside both; PP always outside
#: DP, the order Megatron-LM (``tp-cp-ep-dp-pp``), torchtitan (mesh ``pp, dp, cp, tp``,
#: outermost first) and DeepSpeed (``PipeDataParallelTopology``) use. The kernels' table
#: (``simcore/kernels/inference.py``, ``_ORDERS``) is the same (tests check it).
PLACEMENT_ORDERS: tuple[tuple[int, int, int, int], ...] = (
    (0, 1, 3, 2),  # tp, cp, dp, pp: TP inner, CP inner
    (1, 0, 3, 2),  # cp, tp, dp, pp: TP just outside CP, CP inner
    (0, 3, 2, 1),  # tp, dp, pp, cp: TP inner, CP outermost
    (3, 2, 1, 0),  # dp, pp, cp, tp: TP just outside CP, CP outside DP and PP
)


def straddling_layouts(table: np.ndarray, pes_per_cube: int, pes_per_sip: int) -> np.ndarray:
    """Whether each layout row puts a group across a tier boundary its span does not show.

    Groups tile the devices in consecutive blocks of their span (``group_span``: size x
    stride), and the kernels price a group by its span alone: a span within a cube runs on
    the cube's links. A block of a span that does not divide the cube crosses a cube
    boundary once the layout holds more than one cube (TP16 on two 72-GPU NVL72 racks:
    the group on devices 64-79), so part of it would run on the scale-out network while
    priced on NVLink; likewise for SiPs. Power-of-two groups on power-of-two cubes (HGX
    nodes of 8) never straddle; on a 72-GPU domain every group of a multi-rack layout must
    divide 72 (2, 4, 8, 9, 18, 36 ...) or span whole racks. The engine marks such layouts
    not valid rather than price them wrongly.

    Examples
    --------
    >>> t = layout_table(reduced_space(cp=(1,), tp=(8, 16), pp=(1,), dp=(9,)))
    >>> straddling_layouts(t, 72, 576)[::3].tolist()  # TP8 x DP9 = 72, TP16 x DP9 = 144
    [False, True]
    >>> straddling_layouts(t, 8, 128).any()  # the same layouts on HGX nodes of 8
    np.False_
    """
    t = np.asarray(table, dtype=np.int64).reshape(-1, len(PARALLEL_DIMS))
    col = {d: t[:, i] for i, d in enumerate(PARALLEL_DIMS)}
    sizes = np.stack([col["tp"], col["cp"], col["pp"], col["dp"]], axis=1)  # order codes
    tiers = np.array([pes_per_cube, pes_per_sip], dtype=np.int64)
    if not (np.bitwise_and(sizes, sizes - 1).any() or np.bitwise_and(tiers, tiers - 1).any()):
        return np.zeros(len(t), dtype=bool)  # powers of two tile powers of two exactly
    orders = np.asarray(PLACEMENT_ORDERS, dtype=np.int64)[col["tp_placement"]
                                                           + 2 * col["cp_placement"]]
    inner = np.take_along_axis(sizes, orders, axis=1)
    stride_in_order = np.cumprod(np.concatenate([np.ones((len(t), 1), np.int64),
                                                 inner[:, :-1]], axis=1), axis=1)
    stride = np.empty_like(stride_in_order)
    np.put_along_axis(stride, orders, stride_in_order, axis=1)
    span = np.where(sizes > 1, sizes * stride, 1)
    n = np.prod(sizes, axis=1)
    bad = np.zeros(len(t), dtype=bool)
    for size in (int(pes_per_cube), int(pes_per_sip)):
        crosses = (span <= size) & (size % span != 0) & (n > size)[:, None]
        bad |= crosses.any(axis=1)
    return bad


def physical_keys(table: np.ndarray) -> np.ndarray:
    """One integer per layout row naming its physical configuration: two rows with the
    same key put the same groups on the same devices and do the same work.

    A row's key is its dims with what cannot matter taken out:

    * the placements only through the order of the groups with more than one member (a
      group of one device has no place: TP placement when ``tp == 1``, CP placement when
      ``cp == 1`` or when ``pp == dp == 1``, ...);
    * the ring variant, and ``ffn_shard_scope`` TP+CP (which is TP), only when ``cp > 1``;
    * ``kv_shard_mode`` ``seq`` is ``head`` when ``tp == 1`` (the one rank keeps every KV
      head for the whole sequence).

    Examples
    --------
    >>> t = layout_table(full_space(cp=(1,), tp=(1,), pp=(1,), dp=(1,)))
    >>> len(t), len(np.unique(physical_keys(t)))
    (48, 2)
    """
    t = np.asarray(table, dtype=np.int64).reshape(-1, len(PARALLEL_DIMS))
    col = {d: t[:, i] for i, d in enumerate(PARALLEL_DIMS)}
    cp, tp = col["cp"], col["tp"]
    seq, head = CHOICES["kv_shard_mode"].index("seq"), CHOICES["kv_shard_mode"].index("head")
    kv = np.where((tp == 1) & (col["kv_shard_mode"] == seq), head, col["kv_shard_mode"])
    ffn = np.where(cp > 1, col["ffn_shard_scope"], 0)
    ring = np.where(cp > 1, col["cp_ring_variant"] + 1, 0)
    # the order of the groups that have more than one member, as base-5 digits
    orders = np.asarray(PLACEMENT_ORDERS, dtype=np.int64)[col["tp_placement"]
                                                           + 2 * col["cp_placement"]]
    sizes = np.stack([tp, cp, col["pp"], col["dp"]], axis=1)
    big = np.take_along_axis(sizes, orders, axis=1) > 1
    digit = np.maximum(np.cumsum(big, axis=1) - 1, 0)
    order = np.sum(np.where(big, (orders + 1) * 5 ** digit, 0), axis=1)
    key = np.zeros(len(t), dtype=np.int64)
    for part in (cp, tp, col["pp"], col["dp"], kv, ffn, order, ring, col["ep"]):
        # mixed radix: every part is a non-negative integer below its own maximum + 1
        key = key * (int(part.max(initial=0)) + 1) + part
    return key


def canonical_layouts(table: np.ndarray) -> np.ndarray:
    """Whether each layout row is the first (in table order) of its physical
    configuration (:func:`physical_keys`); the others repeat it. The engine marks the
    repeats not valid, so a space never offers one configuration twice.

    Examples
    --------
    >>> t = layout_table(full_space(cp=(1,), tp=(1, 2), pp=(1,), dp=(1,)))
    >>> int(canonical_layouts(t).sum()), len(t)
    (5, 96)
    """
    key = physical_keys(table)
    keep = np.zeros(len(key), dtype=bool)
    keep[np.unique(key, return_index=True)[1]] = True
    return keep


def hardware_grid(
    hardware: Hardware | Mapping[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """Normalise hardware input to knob → 1-D float array (one value per knob for a point).

    A mapping may give some knobs; the others come from the default :class:`Hardware`.
    Non-positive or non-finite values raise ``ValueError`` naming the knob.
    """
    if hardware is None:
        hardware = Hardware()
    if isinstance(hardware, Hardware):
        return {k: np.array([v]) for k, v in hardware.as_dict().items()}
    if not isinstance(hardware, Mapping):
        raise ValueError(
            f"hardware must be a Hardware or a mapping knob -> values, got {type(hardware).__name__}"
        )
    unknown = set(hardware) - set(HW_KNOBS)
    if unknown:
        raise ValueError(f"unknown hardware knobs {sorted(unknown)}; known: {list(HW_KNOBS)}")
    default = Hardware().as_dict()
    out: dict[str, np.ndarray] = {}
    for k in HW_KNOBS:
        vals = np.atleast_1d(np.asarray(hardware.get(k, default[k]), dtype=float))
        if vals.ndim != 1 or vals.size == 0:
            raise ValueError(f"hardware knob {k!r} needs a 1-D list of values, got {vals!r}")
        if not np.all(np.isfinite(vals)) or np.any(vals <= 0):
            raise ValueError(
                f"hardware knob {k!r} must be > 0 and finite, got {vals.tolist()}; "
                "pass positive values (e.g. GB/s for bandwidths)"
            )
        out[k] = vals
    return out


#: Default value of each hardware knob (the default SiP PE); ``cost_score`` divides by these.
HW_KNOB_DEFAULTS: dict[str, float] = Hardware().as_dict()

#: Named sweep depths → multipliers of the defaults per knob.
DEPTHS: dict[str, tuple[float, ...]] = {
    "two_stage": (1.0,),
    "balanced": (1.0, 2.0),
    "coarse": (0.5, 1.0, 2.0),
}


def depth_grid(
    depth: str | int | Mapping[str, Sequence[float]] = "balanced",
    *,
    defaults: Mapping[str, float] | None = None,
) -> dict[str, np.ndarray]:
    """Hardware grid (knob → values) for a sweep depth.

    ``"two_stage"`` = the defaults (1 point), ``"balanced"`` = {1×, 2×} per knob
    (2^6 = 64), ``"coarse"`` = {0.5×, 1×, 2×} (3^6 = 729); an int ``n`` gives ``n``
    log-spaced multipliers from 0.5× to 2× per knob (n^6 points); a mapping gives custom
    values per knob (missing knobs stay at the default).

    Examples
    --------
    >>> g = depth_grid("coarse")
    >>> int(np.prod([len(v) for v in g.values()]))
    729
    """
    base = dict(HW_KNOB_DEFAULTS if defaults is None else defaults)
    if isinstance(depth, Mapping):
        return hardware_grid({**{k: [v] for k, v in base.items()}, **depth})
    if isinstance(depth, bool) or not isinstance(depth, str | int):
        raise ValueError(f"depth must be a name {list(DEPTHS)}, an int or a mapping; got {depth!r}")
    if isinstance(depth, int):
        if depth < 1:
            raise ValueError(f"depth as an int is values per knob (>= 1), got {depth}")
        mults = (1.0,) if depth == 1 else tuple(np.geomspace(0.5, 2.0, depth))
    else:
        if depth not in DEPTHS:
            raise ValueError(
                f"unknown depth {depth!r}; pass one of {list(DEPTHS)}, an int (values per knob) "
                "or a mapping knob -> values"
            )
        mults = DEPTHS[depth]
    return hardware_grid({k: [v * m for m in mults] for k, v in base.items()})


# --- the workload sweep dims (batch, s_kv; training's micro_batch, zero_stage, recompute) ---

#: The workload fields :func:`evaluate` sweeps as dimensions, in dim order (outermost
#: first), with the units and long name of their coordinates. The last three are
#: training-only (``Workload(mode="train")``): the search ``simcore evaluate --mode train``
#: runs with the layout.
WORKLOAD_DIMS: dict[str, dict[str, str]] = {
    "s_kv": {"units": "tokens", "long_name": "context length"},
    "batch": {"units": "sequences", "long_name": "sequences per step"},
    "micro_batch": {"units": "sequences", "long_name": "sequences per micro-batch per replica"},
    "zero_stage": {"units": "1", "long_name": "ZeRO stage"},
    "recompute": {"units": "1", "long_name": "activation recomputation"},
}

#: Units and long names of the layout dims: of the layout coordinates of ``evaluate``'s
#: tensor (:func:`simcore.engine.labels.layout_attrs`) and of the per-hardware winners of
#: a reduction (``best_<dim>`` of :func:`simcore.engine.chunks.reduce_best`, what
#: ``joint_explore`` returns); the categorical dims are dimensionless ("1").
LAYOUT_DIM_ATTRS: dict[str, dict[str, str]] = {
    "cp": {"units": "devices", "long_name": "context-parallel degree"},
    "tp": {"units": "devices", "long_name": "tensor-parallel degree"},
    "pp": {"units": "stages", "long_name": "pipeline-parallel degree"},
    "dp": {"units": "replicas", "long_name": "data-parallel degree"},
    "ep": {"units": "devices", "long_name": "expert-parallel degree"},
    "kv_shard_mode": {"units": "1", "long_name": "KV-cache sharding mode"},
    "ffn_shard_scope": {"units": "1", "long_name": "FFN sharding scope"},
    "tp_placement": {"units": "1", "long_name": "TP group placement"},
    "cp_placement": {"units": "1", "long_name": "CP group placement"},
    "cp_ring_variant": {"units": "1", "long_name": "CP ring variant"},
}

#: The training-only sweep dims of :data:`WORKLOAD_DIMS`.
TRAIN_DIMS: tuple[str, ...] = ("micro_batch", "zero_stage", "recompute")

#: Allowed values of the categorical training dims (``Workload``'s choices).
RECOMPUTE_CHOICES: tuple[str, ...] = ("none", "selective", "full", "op")
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)


def _sweep_values(name: str, values: Any, *, minimum: int = 1) -> int | tuple[int, ...]:
    """A scalar (int) or a sweep (tuple) of integers >= ``minimum``, each once."""
    what = "positive integers" if minimum == 1 else f"integers >= {minimum}"

    def one(v: Any) -> int:
        if (isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Integral)
                or v < minimum):
            raise SimcoreInputError(f"{name} values must be {what}, got {v!r}")
        return int(v)

    if isinstance(values, np.ndarray) and values.ndim == 0:
        values = values.item()
    if isinstance(values, numbers.Integral) and not isinstance(values, bool | np.bool_):
        return one(values)
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence | np.ndarray):
        raise SimcoreInputError(f"{name} must be {what[:-1]} or a sequence of them "
                                f"(a sweep dimension), got {values!r}")
    return _once(name, tuple(one(v) for v in values))


def _once(name: str, out: tuple[Any, ...]) -> tuple[Any, ...]:
    if not out:
        raise SimcoreInputError(f"{name} needs at least one value (an empty sweep)")
    dup = sorted({v for v in out if out.count(v) > 1}, key=str)
    if dup:
        raise SimcoreInputError(f"{name} repeats {', '.join(map(str, dup))}; give each value once")
    return out


def _recompute_values(values: Any) -> str | tuple[str, ...]:
    """A recompute mode or a sweep (tuple) of them, each one of :data:`RECOMPUTE_CHOICES`."""
    def one(v: Any) -> str:
        if v not in RECOMPUTE_CHOICES:
            raise SimcoreInputError(f"recompute values must be one of "
                                    f"{', '.join(RECOMPUTE_CHOICES)}, got {v!r}")
        return str(v)

    if isinstance(values, str):
        return one(values)
    if isinstance(values, bytes | Mapping) or not isinstance(values, Sequence | np.ndarray):
        raise SimcoreInputError(f"recompute must be one of {', '.join(RECOMPUTE_CHOICES)} or a "
                                f"sequence of them (a sweep dimension), got {values!r}")
    return _once("recompute", tuple(one(v) for v in values))


def _with(w: Workload, **fields: Any) -> Workload:
    """``w`` with new ``batch`` / ``s_kv`` / training fields; ``s_q`` follows ``s_kv``
    where it equalled it (prefill's default, training) and stays otherwise (decode: 1)."""
    if "s_kv" in fields and (w.s_q == w.s_kv or w.mode == "train"):
        fields = {**fields, "s_q": 0}
    return replace(w, **fields)


def workload_points(
    workload: Workload | None = None,
    *,
    batch: int | Sequence[int] | None = None,
    s_kv: int | Sequence[int] | None = None,
    micro_batch: int | Sequence[int] | None = None,
    zero_stage: int | Sequence[int] | None = None,
    recompute: str | Sequence[str] | None = None,
) -> tuple[dict[str, tuple[Any, ...]], list[Workload]]:
    """The workloads of a sweep over ``batch`` / ``s_kv`` (and, training only,
    ``micro_batch`` / ``zero_stage`` / ``recompute``): ``(dims, workloads)``.

    ``dims`` maps each swept field (a sequence, even of one value) to its values, in
    :data:`WORKLOAD_DIMS` order; ``workloads`` has one :class:`Workload` per point, in C
    order over ``dims`` (one, with no dims, when nothing is swept). A scalar replaces
    the workload's value; ``s_q`` follows ``s_kv`` where it equalled it (prefill, train).
    A point the workload refuses (a ``micro_batch`` that does not divide the ``batch``,
    a ZeRO stage its ``framework`` cannot run) is a :class:`SimcoreInputError` naming it;
    a ``micro_batch`` that divides the batch but not a layout's per-replica share is
    masked per layout by the engine (not valid there).

    Examples
    --------
    >>> dims, wls = workload_points(Workload("prefill"), batch=[1, 8], s_kv=2048)
    >>> dims, [(w.batch, w.s_kv, w.s_q) for w in wls]
    ({'batch': (1, 8)}, [(1, 2048, 2048), (8, 2048, 2048)])
    >>> dims, wls = workload_points(Workload("train", batch=8), micro_batch=[1, 2],
    ...                             recompute=["selective", "full"])
    >>> dims, [(w.micro_batch, w.recompute) for w in wls][:2]
    ({'micro_batch': (1, 2), 'recompute': ('selective', 'full')}, [(1, 'selective'), (1, 'full')])
    """
    if workload is None:
        workload = Workload("decode")
    if not isinstance(workload, Workload):
        raise SimcoreInputError(f"workload must be a simcore.Workload, got "
                                f"{type(workload).__name__}")
    given = {"s_kv": s_kv, "batch": batch, "micro_batch": micro_batch,
             "zero_stage": zero_stage, "recompute": recompute}
    train = [n for n in TRAIN_DIMS if given[n] is not None]
    if train and workload.mode != "train":
        raise SimcoreInputError(f"{', '.join(train)}: training only (Workload(mode='train')), "
                                f"got a {workload.mode} workload; drop {', '.join(train)}")
    fixed: dict[str, Any] = {}
    dims: dict[str, tuple[Any, ...]] = {}
    for name, values in given.items():
        if values is None:
            continue
        v: Any
        if name == "recompute":
            v = _recompute_values(values)
        else:
            v = _sweep_values(name, values, minimum=0 if name == "zero_stage" else 1)
        if isinstance(v, tuple):
            dims[name] = v
        else:
            fixed[name] = v
    base = _with(workload, **fixed) if fixed else workload
    if not dims:
        return dims, [base]
    points = []
    for combo in itertools.product(*dims.values()):
        at = dict(zip(dims, combo, strict=True))
        try:
            points.append(_with(base, **at))
        except ValueError as exc:
            where = ", ".join(f"{k}={v}" for k, v in at.items())
            raise SimcoreInputError(f"{where}: {exc}") from None
    return dims, points
