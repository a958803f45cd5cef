"""``simcore families``: the hardware families side by side, and where each value comes from.

Rows: one per family (``simcore/hardware/data/<name>.toml``): HBM per GPU (GB) and its
bandwidth, the dense 16-bit (bf16), FP8 and FP4 matmul peaks, NVLink (scale-up, per
direction) and scale-out NIC bandwidth per GPU, GPUs per node (the scale-up domain),
nodes per SiP (rack or leaf group), NICs per node, the family's cited price per GPU (an
indication: ``price_usd``, "-" where none was found) and maximum power per GPU
(``power_w``), and the default cost model's price and power per GPU
(:data:`simcore.hardware.costmodel.DEFAULT_COST_MODEL`, estimates from the knobs).
``--provenance FAMILY`` prints instead one row per declared value of that family: its
value, unit, tag (measured, datasheet, inferred) and source
(:func:`simcore.hardware.families.provenance`); the table numbers the sources and lists
them, with the values' notes, below it (JSON / CSV: ``source`` and ``note`` per row). Fast: no kernel runs (no numba, no xarray).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from ..errors import SimcoreInputError
from .options import add_output_options
from .output import Column, emit_rows, note_stream

__all__ = ["COLUMNS", "PROVENANCE_COLUMNS", "add_parser", "family_rows", "provenance_rows",
           "run"]


def _fixed(key: str, scale: float = 1.0, digits: int = 0) -> Any:
    def cell(row: Mapping[str, Any]) -> str:
        v = row.get(key)
        return "-" if v is None else f"{v * scale:,.{digits}f}"
    return cell


COLUMNS = [
    Column("family"),
    Column("pe_hbm_gb", "HBM GB", display=_fixed("pe_hbm_gb", digits=1)),
    Column("bw_hbm_gbs", "HBM TB/s", display=_fixed("bw_hbm_gbs", 1e-3, 2)),
    Column("peak_tflops_f16", "bf16 TFLOP/s", display=_fixed("peak_tflops_f16")),
    Column("peak_tflops_fp8", "fp8 TFLOP/s", display=_fixed("peak_tflops_fp8")),
    Column("peak_tflops_fp4", "fp4 TFLOP/s", display=_fixed("peak_tflops_fp4")),
    Column("bw_intra_gbs", "NVLink GB/s", display=_fixed("bw_intra_gbs")),
    Column("bw_inter_gbs", "NIC GB/s", display=_fixed("bw_inter_gbs")),
    Column("pes_per_cube", "GPUs/node"), Column("cubes_per_sip", "nodes/SiP"),
    Column("nics_per_node", "NICs/node"),
    Column("price_usd", "price $/GPU", display=_fixed("price_usd")),
    Column("power_w", "max W/GPU", display=_fixed("power_w")),
    Column("cost_usd_per_device", "model $/GPU", display=_fixed("cost_usd_per_device")),
    Column("power_w_per_device", "model W/GPU", display=_fixed("power_w_per_device")),
    Column("n_devices", in_table=False), Column("description", in_table=False),
]
PROVENANCE_COLUMNS = [
    Column("key"), Column("value"), Column("unit"), Column("tag"),
    # the table shows the source as a footnote number; the citations and notes follow it
    Column("source_ref", "source", display=lambda r: f"[{r['source_ref']}]"),
    Column("source", in_table=False), Column("note", in_table=False),
]


def family_rows() -> list[dict[str, Any]]:
    """One row per shipped family, in ``index.toml``'s order (see the module docstring).

    Examples
    --------
    >>> rows = {r["family"]: r for r in family_rows()}
    >>> rows["H100-SXM"]["peak_tflops_fp8"], rows["A100-80G"]["peak_tflops_fp8"]
    (1978.0, None)
    >>> rows["B200"]["peak_tflops_fp4"], rows["H200"]["peak_tflops_fp4"]
    (9000.0, None)
    """
    from ..hardware.costmodel import DEFAULT_COST_MODEL
    from ..hardware.families import HARDWARE_FAMILIES

    rows = []
    for name, fam in HARDWARE_FAMILIES.items():
        hw, topo = fam.hardware, fam.topology
        knobs = hw.as_dict()
        rows.append({
            "family": name, **knobs,
            "peak_tflops_fp8": hw.peak_tflops_f16 * topo.fp8_ratio if topo.fp8_ratio else None,
            "peak_tflops_fp4": hw.peak_tflops_f16 * topo.fp4_ratio if topo.fp4_ratio else None,
            "pes_per_cube": topo.pes_per_cube, "cubes_per_sip": topo.cubes_per_sip,
            "nics_per_node": topo.nics_per_cube or topo.pes_per_cube,  # 0: one per GPU
            "price_usd": fam.price_usd, "power_w": fam.power_w,
            "cost_usd_per_device": float(DEFAULT_COST_MODEL.device_cost_usd(knobs)),
            "power_w_per_device": float(DEFAULT_COST_MODEL.device_power_w(knobs)),
            "n_devices": topo.n_devices, "description": fam.description,
        })
    return rows


def provenance_rows(family: str) -> list[dict[str, Any]]:
    """One row per declared value of ``family``: key (``section.name``), value, unit, tag,
    source and note; an unknown family raises :class:`~simcore.errors.SpecError`."""
    from ..hardware.families import provenance

    declared = provenance(family)
    refs = {source: n for n, source in enumerate(dict.fromkeys(
        d.source for d in declared.values()), start=1)}
    return [{"key": key, "value": d.value, "unit": d.unit, "tag": d.tag,
             "source_ref": refs[d.source], "source": d.source, "note": d.note}
            for key, d in declared.items()]


def _footnotes(rows: list[dict[str, Any]]) -> list[str]:
    """The sources of :func:`provenance_rows` by footnote number, then the notes: long
    texts that a table column would make unreadable."""
    lines = ["sources:", *(f"  [{n}] {source}" for source, n in
                           dict.fromkeys((r["source"], r["source_ref"]) for r in rows))]
    noted = [r for r in rows if r["note"]]
    return lines + (["notes:", *(f"  {r['key']}: {r['note']}" for r in noted)] if noted else [])


def add_parser(sub: Any, name: str, help: str) -> None:
    p = sub.add_parser(
        name, help=help,
        description="List the hardware families side by side (HBM, bandwidths, bf16 / fp8 / "
                    "fp4 peaks, NVLink and NIC bandwidth, GPUs per node, the cited price and power "
                    "per GPU and the default cost model's), or with --provenance FAMILY each "
                    "declared value of one family with its unit, tag and source.")
    p.add_argument("--provenance", metavar="FAMILY", default=None,
                   help="print each value of FAMILY with its unit, tag (measured, datasheet, "
                        "inferred) and source instead")
    add_output_options(p, rows="the families (or the values of --provenance)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.provenance is not None:
        from ..hardware.families import get_family

        try:
            fam = get_family(args.provenance)
        except ValueError as exc:
            raise SimcoreInputError(f"--provenance: {exc}") from None
        rows = provenance_rows(fam.name)
        print(f"{fam.name}: {fam.description}; every value with its unit, tag and source",
              file=note_stream(args))
        emit_rows(rows, PROVENANCE_COLUMNS, args.format, args.out)
        if args.format == "table":  # JSON / CSV carry the texts in their rows
            print("\n".join(_footnotes(rows)), file=note_stream(args))
        return 0
    emit_rows(family_rows(), COLUMNS, args.format, args.out)
    print("GPUs/node is the scale-up (NVLink) domain (72 on an NVL72 rack); NVLink GB/s per "
          "direction; price $/GPU is a reported indication and max W/GPU the data sheet's, "
          "'-' where no source gives one; model $/GPU and W/GPU are the default cost model's "
          "estimates from the knobs (docs: simcore.hardware.costmodel); simcore families "
          "--provenance FAMILY cites each value", file=note_stream(args))
    return 0
