"""Preset models and the model catalogue.

Model shapes come from the published configs (Meta's Llama 3.1 model cards / HF
config.json, Brown et al. 2020 Table 2.1 for GPT-3, Mistral's Mixtral config).

The model catalogue (``simcore/catalogue/``) ships Hugging Face ``config.json`` files of
popular open models; :func:`get_model` and :func:`load_model` accept their ids
(``"meta-llama/Llama-3.1-70B"``, case-insensitive) wherever a preset name is accepted.

Examples
--------
>>> round(PRESETS["Llama 3.1 70B"].model.n_params / 1e9, 1)
70.6
>>> get_model("qwen/qwen3-30b-a3b").name
'Qwen/Qwen3-30B-A3B'

The hardware families (``HARDWARE_FAMILIES``, ``get_family``, ``DEFAULT_FAMILY``) moved
to :mod:`simcore.hardware.families`; the model layer never imports the hardware layer, so
those names are forwarded from here on first access (PEP 562) for old imports.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import json
import os
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..errors import SpecError
from .transformer import Model

__all__ = [
    "PRESETS",
    "HARDWARE_FAMILIES",
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
    :class:`~simcore.errors.SpecError` suggesting the closest names.

    Examples
    --------
    >>> get_model("META-LLAMA/llama-3.1-70b").n_layers
    80
    >>> get_model("Llama-3.1-70")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    simcore.errors.SpecError: unknown model 'Llama-3.1-70'; closest: 'meta-llama/Llama-3.1-70B', ...
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

    Errors are :class:`~simcore.errors.SpecError` (a ``ValueError``) / ``FileNotFoundError``
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


#: names that moved up to the hardware layer -> the module that declares them now
MOVED: dict[str, str] = {
    name: "simcore.hardware.families"
    for name in ("HARDWARE_FAMILIES", "DEFAULT_FAMILY", "get_family")
}


def __getattr__(name: str) -> Any:
    module = MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:  # the forwarded names, for type checkers (through the lazy facade)
    from simcore import HARDWARE_FAMILIES, get_family
