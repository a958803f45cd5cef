"""``simcore models``: the model presets and the catalogue, with their shapes.

Rows: one per preset (``kind`` preset) and per catalogue entry (``kind`` catalogue, named
by its Hugging Face id): total and, for mixture-of-experts models, active parameters in
billions, layers, ``d_model``, attention and KV heads, routed experts and experts per
token, and the context length the source declares (``max_position_embeddings``). Any
of these names is accepted by ``--model``; so are model-card ids of the same shape
(``meta-llama/Meta-Llama-3.1-70B-Instruct``: see :func:`simcore.model.presets.card_key`).
An optional ``FILTER`` keeps the names containing it (case-insensitive); exit code 1 when
none does. Fast: reads the shipped configs, runs no kernel (no numba, no xarray).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from .options import add_output_options
from .output import Column, emit_rows, for_script, note_stream

__all__ = ["COLUMNS", "add_parser", "model_rows", "run"]


def _experts(row: Mapping[str, Any]) -> str:
    return "-" if row["n_experts"] <= 1 else f"{row['n_experts']} (top {row['top_k']})"


def _billions(key: str) -> Any:
    def cell(row: Mapping[str, Any]) -> str:
        v = row.get(key)
        return "-" if v is None else f"{v:.2f}"
    return cell


COLUMNS = [
    Column("name", "model"), Column("kind"),
    Column("params_b", "params (B)", display=_billions("params_b")),
    Column("active_params_b", "active (B)", display=_billions("active_params_b")),
    Column("n_layers", "layers"), Column("d_model"), Column("n_heads", "heads"),
    Column("n_kv_heads", "kv heads"),
    Column("n_experts", "experts", display=_experts), Column("top_k", in_table=False),
    Column("context_tokens", "context"),
    Column("hf_id", in_table=False), Column("source", in_table=False),
]


def model_rows() -> list[dict[str, Any]]:
    """One row per preset, then per catalogue entry (see the module docstring).

    Examples
    --------
    >>> rows = model_rows()
    >>> [r["name"] for r in rows[:2]], rows[0]["n_layers"]
    (['Llama 3.1 8B', 'Llama 3.1 70B'], 32)
    """
    from ..model.presets import PRESETS, catalogue

    def row(model: Any, kind: str, hf_id: str, context: int | None, source: str
            ) -> dict[str, Any]:
        moe = model.n_experts > 1
        return {"name": model.name, "kind": kind, "params_b": model.n_params / 1e9,
                "active_params_b": model.n_active_params / 1e9 if moe else None,
                "n_layers": model.n_layers, "d_model": model.d_model,
                "n_heads": model.n_heads, "n_kv_heads": model.n_kv_heads,
                "n_experts": model.n_experts, "top_k": model.top_k,
                "context_tokens": context, "hf_id": hf_id, "source": source}

    rows = [row(p.model, "preset", p.hf_id, p.context_tokens, p.source)
            for p in PRESETS.values()]
    rows += [row(e.model(), "catalogue", e.id, e.context_tokens, e.card_source)
             for e in catalogue().values()]
    return rows


def add_parser(sub: Any, name: str, help: str) -> None:
    p = sub.add_parser(
        name, help=help,
        description="List the model presets and the catalogue of Hugging Face configs "
                    "with their shapes: parameters, layers, d_model, heads / KV heads, "
                    "experts, context. Every name is accepted by --model, and so are "
                    "model-card ids of the same shape (meta-llama/Meta-Llama-3.1-70B-"
                    "Instruct is meta-llama/Llama-3.1-70B).")
    p.add_argument("filter", nargs="?", default=None, metavar="FILTER",
                   help="keep the models whose name contains FILTER (case-insensitive)")
    add_output_options(p, rows="the models")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = model_rows()
    notes = note_stream(args)
    if args.filter:
        want = args.filter.strip().lower()
        rows = [r for r in rows if want in r["name"].lower() or want in r["hf_id"].lower()]
        if not rows:
            if for_script(args):
                emit_rows([], COLUMNS, args.format, args.out)
            print(f"no model name contains {args.filter!r}; run simcore models without a "
                  "filter to list them all", file=notes)
            return 1
    emit_rows(rows, COLUMNS, args.format, args.out)
    if not for_script(args):
        print("--model takes any of these names, a model-card id of the same shape "
              "(e.g. meta-llama/Meta-Llama-3.1-70B-Instruct), a config.json path, or the id "
              "of a model in the local Hugging Face cache", file=notes)
    return 0
