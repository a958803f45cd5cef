"""Named hardware families, declared as data: one TOML file per family.

``simcore/hardware/data/<name>.toml`` declares every value of a family (its six
:class:`~simcore.hardware.specs.Hardware` knobs and every
:class:`~simcore.hardware.specs.Topology` field; optionally ``[cost]``: a price per device
``price_usd`` and its power ``power_w``) with its unit, a source (a key of the
file's ``[sources]`` table: a data sheet's title, a paper and table, or a repository,
path and commit) and a tag: ``measured``, ``datasheet``, ``reported`` (a figure a press
report or a community page gives: an indication, such as a price) or ``inferred`` (chosen
by simcore without a direct citation, which its source says). A value computed from cited
figures carries the arithmetic as ``derived``, checked to give the value exactly.
``data/index.toml`` lists the families in order. The files are read once, on import,
and checked at this boundary (keys, units, tags, sources, then the specs' own ranges);
a bad file is refused with one line naming the file and the key.

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
>>> provenance("A100-80G")["topology.mm_ratio"].tag
'measured'
"""

from __future__ import annotations

import ast
import operator
import os
import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import SpecError
from ..model.checks import did_you_mean
from .specs import (
    COST_UNITS,
    HW_UNITS,
    RATE_FIELDS,
    TOPOLOGY_UNITS,
    Hardware,
    HardwareFamily,
    Topology,
)

__all__ = ["DEFAULT_FAMILY", "HARDWARE_FAMILIES", "TAGS", "Declared", "get_family",
           "provenance", "read_family", "require_matmul_rate", "unknown_family"]

#: How a value is known: measured (a cited measurement), datasheet (a vendor's data
#: sheet or documentation), reported (a figure a press report or a community page gives:
#: an indication, e.g. a price), inferred (chosen by simcore without a direct citation).
TAGS: tuple[str, ...] = ("measured", "datasheet", "reported", "inferred")
#: the spec each section of a family file builds, and the unit of each of its keys
_SECTIONS: dict[str, tuple[type, dict[str, str]]] = {
    "hardware": (Hardware, HW_UNITS), "topology": (Topology, TOPOLOGY_UNITS),
}
#: an optional section whose keys are each optional: a price and a power per device
_COST = "cost"
_FILE_KEYS = ("name", "description", "sources", *_SECTIONS)
_ENTRY_KEYS = ("value", "unit", "tag", "source")
_ENTRY_OPTIONAL = ("note", "derived")
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv}


class Declared(NamedTuple):
    """One declared value of a family file, with its provenance."""

    value: float | int | bool
    unit: str
    tag: str
    #: the citation (the text of the file's ``[sources]`` entry)
    source: str
    note: str = ""


def _keys(where: str, what: str, table: Any, required: tuple[str, ...],
          optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``table`` as a dict holding every ``required`` key and nothing unknown."""
    if not isinstance(table, dict):
        raise SpecError(f"{where}: {what} must be a table, got {table!r}")
    missing = [k for k in required if k not in table]
    if missing:
        raise SpecError(f"{where}: {what} lacks {missing[0]!r}; declare {', '.join(required)}")
    unknown = sorted(set(table) - set(required) - set(optional))
    if unknown:
        raise SpecError(f"{where}: {what} has unknown key {unknown[0]!r}; known: "
                        f"{', '.join((*required, *optional))}")
    return table


def _arithmetic(node: ast.AST) -> float:
    """The value of ``+ - * /`` on number literals (a ``derived`` entry), nothing else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        if not isinstance(node.value, bool):
            return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arithmetic(node.operand)
    raise ValueError(ast.dump(node))


def _entry(where: str, key: str, raw: Any, unit: str, sources: dict[str, str]) -> Declared:
    """One ``key = { value, unit, tag, source[, note][, derived] }`` entry, checked."""
    entry = _keys(where, key, raw, _ENTRY_KEYS, _ENTRY_OPTIONAL)
    value = entry["value"]
    if entry["unit"] != unit:
        raise SpecError(f"{where}: {key} has unit {entry['unit']!r}; write unit = \"{unit}\" "
                        f"and the value in {unit}")
    if entry["tag"] not in TAGS:
        raise SpecError(f"{where}: {key} has tag {entry['tag']!r}; pass one of {', '.join(TAGS)}")
    if entry["source"] not in sources:
        raise SpecError(f"{where}: {key} cites source {entry['source']!r}, which is not a key "
                        f"of [sources]; known: {', '.join(sources) or 'none'}")
    if (unit == "bool") != isinstance(value, bool) or not isinstance(value, int | float):
        kind = "true or false" if unit == "bool" else "a number"
        raise SpecError(f"{where}: {key} value must be {kind}, got {value!r}")
    note = entry.get("note", "")
    if not isinstance(note, str):
        raise SpecError(f"{where}: {key} note must be a string, got {note!r}")
    if "derived" in entry:
        text = entry["derived"]
        try:
            exact = _arithmetic(ast.parse(str(text), mode="eval").body)
        except (SyntaxError, ValueError, ZeroDivisionError):
            raise SpecError(f"{where}: {key} derived {text!r} must be arithmetic on numbers "
                            "(+ - * / and parentheses)") from None
        if float(exact) != float(value):
            raise SpecError(f"{where}: {key} derived {text!r} gives {exact!r}, not the value "
                            f"{value!r}; write value = {exact!r}")
    return Declared(value, unit, entry["tag"], sources[entry["source"]], note)


def _read(file: Traversable, where: str) -> tuple[HardwareFamily, dict[str, Declared]]:
    """The family a data file declares and each value's provenance (``section.key``)."""
    try:
        doc = tomllib.loads(file.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{where}: cannot read it: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where}: not valid TOML: {exc}") from None
    _keys(where, "the file", doc, _FILE_KEYS, (_COST,))
    name, description = doc["name"], doc["description"]
    stem = file.name.removesuffix(".toml")
    if name != stem:
        raise SpecError(f"{where}: name {name!r} must be the file's name, {stem!r}")
    if not isinstance(description, str):
        raise SpecError(f"{where}: description must be a string, got {description!r}")
    sources = doc["sources"]
    if not isinstance(sources, dict) or not sources:
        raise SpecError(f"{where}: [sources] must be a table of citations, got {sources!r}")
    for key, text in sources.items():
        if not isinstance(text, str) or not text.strip():
            raise SpecError(f"{where}: sources.{key} must be a citation (a non-empty string)")
    declared: dict[str, Declared] = {}
    cited: set[str] = set()
    specs = []
    for section, (spec, units) in _SECTIONS.items():
        table = _keys(where, f"[{section}]", doc[section], tuple(units))
        found = {k: _entry(where, f"{section}.{k}", table[k], u, sources) for k, u in units.items()}
        declared.update({f"{section}.{k}": d for k, d in found.items()})
        cited.update(table[k]["source"] for k in units)
        try:
            specs.append(spec(**{k: d.value for k, d in found.items()}))
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    cost: dict[str, float] = {}
    if _COST in doc:
        table = _keys(where, f"[{_COST}]", doc[_COST], (), tuple(COST_UNITS))
        for k in table:
            d = _entry(where, f"{_COST}.{k}", table[k], COST_UNITS[k], sources)
            declared[f"{_COST}.{k}"] = d
            cited.add(table[k]["source"])
            cost[k] = d.value
    unused = [k for k in sources if k not in cited]
    if unused:
        raise SpecError(f"{where}: sources.{unused[0]} is cited by no value; remove it")
    try:
        return HardwareFamily(name, specs[0], specs[1], description, **cost), declared
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def read_family(path: str | os.PathLike[str]) -> HardwareFamily:
    """A :class:`~simcore.hardware.specs.HardwareFamily` from a family data file.

    The file is ``<name>.toml`` in the format of ``simcore/hardware/data/`` (see the
    module docstring); a bad file raises :class:`~simcore.errors.SpecError` naming the
    file and the key.
    """
    return _read(Path(path), os.fspath(path))[0]


def _load_shipped() -> tuple[dict[str, HardwareFamily], dict[str, dict[str, Declared]]]:
    """Every family in ``simcore/hardware/data/``, in ``index.toml``'s order."""
    data = resources.files(__package__ or "simcore.hardware").joinpath("data")
    names = tomllib.loads(data.joinpath("index.toml").read_text("utf-8"))["families"]
    files = sorted(e.name for e in data.iterdir() if e.name.endswith(".toml"))
    listed = sorted(f"{n}.toml" for n in names)
    if len(set(names)) != len(names) or files != sorted(["index.toml", *listed]):
        raise SpecError(f"simcore/hardware/data/index.toml lists {listed}, the folder holds "
                        f"{files}: list each family file once")
    families, declared = {}, {}
    for name in names:
        families[name], declared[name] = _read(data.joinpath(f"{name}.toml"), f"{name}.toml")
    return families, declared


HARDWARE_FAMILIES: dict[str, HardwareFamily]
_PROVENANCE: dict[str, dict[str, Declared]]
HARDWARE_FAMILIES, _PROVENANCE = _load_shipped()

DEFAULT_FAMILY = "SiP"


def get_family(family: str | HardwareFamily | None) -> HardwareFamily:
    """A hardware family by name (case-insensitive), default ``"SiP"``."""
    if family is None:
        return HARDWARE_FAMILIES[DEFAULT_FAMILY]
    if isinstance(family, HardwareFamily):
        return family
    for name, fam in HARDWARE_FAMILIES.items():
        if name.lower() == str(family).strip().lower():
            return fam
    raise unknown_family(family)


def unknown_family(family: object) -> SpecError:
    """The one-line error of an unknown family name: the closest known names (a prefix
    such as ``H100`` for ``H100-SXM`` first), then every known one.

    Examples
    --------
    >>> print(unknown_family("H100"))
    unknown hardware family 'H100'; did you mean 'H100-SXM'? Known: SiP, A100-80G, A100-40G, H100-SXM, H200, B200, B300, GB200-NVL72, GB300-NVL72 (simcore families compares them)
    """
    hint = did_you_mean(str(family), list(HARDWARE_FAMILIES)) if isinstance(family, str) else ""
    return SpecError(
        f"unknown hardware family {family!r}; {hint + ' ' if hint else ''}Known: "
        f"{', '.join(HARDWARE_FAMILIES)} (simcore families compares them)"
    )


def provenance(family: str) -> dict[str, Declared]:
    """Unit, tag and source of every value of a shipped family, keyed ``section.key``
    (``"hardware.bw_hbm_gbs"``, ``"topology.nvls"``, ``"cost.price_usd"``)."""
    return dict(_PROVENANCE[get_family(family).name])


def require_matmul_rate(act_dtype: str, topology: Topology, name: str = "this family") -> None:
    """Refuse activations (matmul inputs) in ``act_dtype`` on a topology without that
    dtype's matmul rate (:data:`~simcore.hardware.specs.RATE_FIELDS`): one line naming the
    shipped families that have it, and the weight-only alternative.

    Examples
    --------
    >>> require_matmul_rate("fp4", get_family("B200").topology)
    >>> try:
    ...     require_matmul_rate("fp4", get_family("H100-SXM").topology, "H100-SXM")
    ... except SpecError as exc:
    ...     print(exc)
    Workload.act_dtype='fp4' needs a family with an FP4 matmul rate (Topology.fp4_ratio > 0: B200, B300, GB200-NVL72, GB300-NVL72); H100-SXM has fp4_ratio = 0: pass act_dtype='bf16' (or weight_dtype='fp4' alone: 4-bit weights run weight-only, dequantised)
    """
    rate = RATE_FIELDS.get(act_dtype)
    if rate is None or getattr(topology, rate) > 0:
        return
    kind = rate.removesuffix("_ratio").upper()
    fams = [n for n, f in HARDWARE_FAMILIES.items() if getattr(f.topology, rate) > 0]
    bits = "4-bit" if rate == "fp4_ratio" else "8-bit"
    raise SpecError(
        f"Workload.act_dtype={act_dtype!r} needs a family with a{'n' if kind[0] in 'FI' else ''} "
        f"{kind} matmul rate (Topology.{rate} > 0: {', '.join(fams) or 'none shipped'}); "
        f"{name} has {rate} = 0: pass act_dtype='bf16' (or weight_dtype={act_dtype!r} alone: "
        f"{bits} weights run weight-only, dequantised)")
