"""Preset models and the model catalogue.

Model shapes come from the published configs (Meta's Llama 3.1 model cards / HF
config.json, Brown et al. 2020 Table 2.1 for GPT-3, Mistral's Mixtral config).

The model catalogue (``simcore/catalogue/``) ships Hugging Face ``config.json`` files of
popular open models; :func:`get_model` and :func:`load_model` accept their ids
(``"meta-llama/Llama-3.1-70B"``, case-insensitive) wherever a preset name is accepted.

Model-card ids of the same architecture resolve to the catalogue entry (or preset) by one
rule, :func:`card_key`: instruction / chat tunes and ports share their base model's shape,
so ``meta-llama/Meta-Llama-3.1-70B-Instruct`` is ``meta-llama/Llama-3.1-70B``; a model of
another version with the same shape resolves only where the catalogue declares it
(``same_shape`` in ``index.json``, with what differs: Llama 3's 8K context). The model
keeps a note of what it was resolved from (``Model.note``). :func:`load_model` also finds
an id's ``config.json`` in the local Hugging Face cache, offline.

Examples
--------
>>> round(PRESETS["Llama 3.1 70B"].model.n_params / 1e9, 1)
70.6
>>> get_model("qwen/qwen3-30b-a3b").name
'Qwen/Qwen3-30B-A3B'
>>> m = get_model("meta-llama/Meta-Llama-3.1-70B-Instruct")
>>> m.name, m == get_model("meta-llama/Llama-3.1-70B")
('meta-llama/Llama-3.1-70B', True)

The hardware families (``HARDWARE_FAMILIES``, ``get_family``, ``DEFAULT_FAMILY``) moved
to :mod:`simcore.hardware.families`; the model layer never imports the hardware layer, so
those names are forwarded from here on first access (PEP 562) for old imports.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from dataclasses import dataclass, replace
from importlib import resources
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import SpecError
from .checks import did_you_mean
from .hf import cached_hf_config, hf_cache_dir, hf_context_tokens, looks_like_hub_id
from .transformer import Model

__all__ = [
    "PRESETS",
    "find_model",
    "HARDWARE_FAMILIES",
    "DEFAULT_MODEL",
    "TUNE_WORDS",
    "CatalogueEntry",
    "ModelPreset",
    "SameShape",
    "card_key",
    "catalogue",
    "get_model",
    "get_family",
    "load_model",
]


@dataclass(frozen=True)
class ModelPreset:
    """A named model shape with its source, the parameter count the source reports and
    the context length (tokens) it was trained for."""

    model: Model
    source: str
    reported_params_b: float
    context_tokens: int

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def hf_id(self) -> str:
        """The Hugging Face id whose ``config.json`` the shape comes from ("" if none).

        Examples
        --------
        >>> PRESETS["Llama 2 7B"].hf_id, PRESETS["GPT-3 175B"].hf_id
        ('meta-llama/Llama-2-7b-hf', '')
        """
        head, sep, _ = self.source.partition(" config.json")
        return head if sep and looks_like_hub_id(head) else ""


def _p(model: Model, source: str, reported: float, context: int) -> tuple[str, ModelPreset]:
    return model.name, ModelPreset(model, source, reported, context)


PRESETS: dict[str, ModelPreset] = dict([
    _p(Model("Llama 3.1 8B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
             d_ff=14336, vocab_size=128256),
       "meta-llama/Llama-3.1-8B config.json", 8.03, 131072),
    _p(Model("Llama 3.1 70B", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
             d_ff=28672, vocab_size=128256),
       "meta-llama/Llama-3.1-70B config.json", 70.6, 131072),
    _p(Model("Llama 3.1 405B", n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8,
             d_ff=53248, vocab_size=128256),
       "meta-llama/Llama-3.1-405B config.json", 405.9, 131072),
    _p(Model("GPT-3 175B", n_layers=96, d_model=12288, n_heads=96, n_kv_heads=96,
             d_ff=4 * 12288, vocab_size=50257, gated_ffn=False, tied_embeddings=True,
             attn_bias=True),
       "Brown et al. 2020, Table 2.1", 175.0, 2048),
    _p(Model("Mixtral 8x7B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
             d_ff=14336, vocab_size=32000, n_experts=8, top_k=2),
       "mistralai/Mixtral-8x7B-v0.1 config.json", 46.7, 32768),
    _p(Model("Llama 2 7B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32,
             d_ff=11008, vocab_size=32000),
       "meta-llama/Llama-2-7b-hf config.json", 6.74, 4096),
    _p(Model("Llama 2 70B", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
             d_ff=28672, vocab_size=32000),
       "meta-llama/Llama-2-70b-hf config.json", 69.0, 4096),
])

DEFAULT_MODEL = "Llama 3.1 70B"



# --- the model catalogue -----------------------------------------------------------------
_CATALOGUE = "catalogue"


class SameShape(NamedTuple):
    """Another model (a different version) with a catalogue entry's shape.

    ``differs`` says what does differ (context, rope settings), shown when the id is
    resolved; ``source`` cites the other model's shape.
    """

    id: str
    differs: str
    source: str


@dataclass(frozen=True)
class CatalogueEntry:
    """One shipped Hugging Face config with the parameter count its model card states.

    ``card_active_params_b`` is the card's active (per-token) count where it gives one;
    ``card_active_excludes_embedding`` says the card leaves the input embedding table out
    of it (GPT-OSS). ``aliases`` are other ids of the same checkpoint (renamed repos);
    ``same_shape`` other models of the same shape (:class:`SameShape`), resolved to this
    entry; ``not_same_shape`` tunes of it whose shape differs (a larger vocabulary),
    which :func:`card_key` alone would resolve to it and which are refused instead.
    """

    id: str
    card_params_b: float
    card_source: str
    card_active_params_b: float | None = None
    card_active_excludes_embedding: bool = False
    aliases: tuple[str, ...] = ()
    same_shape: tuple[SameShape, ...] = ()
    not_same_shape: tuple[SameShape, ...] = ()
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

    @property
    def context_tokens(self) -> int | None:
        """The context length the config declares (``max_position_embeddings``)."""
        return hf_context_tokens(self.config())


@functools.cache
def catalogue() -> dict[str, CatalogueEntry]:
    """The catalogue index (``simcore/catalogue/index.json``), keyed by Hugging Face id."""
    raw = json.loads(resources.files("simcore").joinpath(_CATALOGUE, "index.json")
                     .read_text("utf-8"))
    entries = (CatalogueEntry(**{**e, "aliases": tuple(e.get("aliases", ())), **{
        key: tuple(SameShape(**x) for x in e.get(key, ())) for key in ("same_shape",
                                                                       "not_same_shape")}})
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


# --- model-card ids ----------------------------------------------------------------------
#: Words of a model-card name that name a tune or a port of a model, not its shape:
#: instruction and chat tunes (``-Instruct``, ``-Chat``, Gemma's ``-it``), base-model
#: tags (``-Base``, Gemma's ``-pt``) and Meta's Hugging Face ports of Llama 2 (``-hf``). They are dropped
#: wherever they stand between dashes (``Mistral-7B-Instruct-v0.1`` is ``Mistral-7B-v0.1``).
TUNE_WORDS: tuple[str, ...] = ("instruct", "chat", "it", "pt", "base", "hf")
#: Name prefixes that are the maker's, not the model's (``Meta-Llama-3.1-8B``).
_CARD_PREFIXES: tuple[str, ...] = ("meta-",)


def card_key(model_id: str) -> str:
    """What fixes a model-card id's shape: ``org/name`` in lower case without the
    :data:`TUNE_WORDS` and a ``Meta-`` prefix; ``""`` for a name that is not an
    ``org/name`` id. Two ids with one key are one architecture (a model and its tunes);
    versions stay apart (``Llama-3-70B`` is not ``Llama-3.1-70B``: the catalogue declares
    such pairs as ``same_shape``, with what differs).

    Examples
    --------
    >>> card_key("meta-llama/Meta-Llama-3.1-70B-Instruct"), card_key("google/gemma-2-9b-it")
    ('meta-llama/llama-3.1-70b', 'google/gemma-2-9b')
    >>> card_key("Llama 3.1 70B")
    ''
    """
    if not looks_like_hub_id(model_id):
        return ""
    org, _, name = model_id.strip().lower().partition("/")
    for prefix in _CARD_PREFIXES:
        name = name.removeprefix(prefix)
    words = [w for w in name.split("-") if w not in TUNE_WORDS]
    return f"{org}/{'-'.join(words)}" if any(words) else ""


@functools.cache
def _card_names() -> dict[str, tuple[str, str]]:
    """:func:`card_key` -> (preset name or catalogue id, what differs: "" for a tune).

    Catalogue ids and their aliases, the catalogue's ``same_shape`` ids, then the
    presets' Hugging Face ids that the catalogue lacks (Llama 2). Two targets under one
    key would make an id ambiguous: a data error, refused here.
    """
    out: dict[str, tuple[str, str]] = {}

    def add(spelling: str, target: str, differs: str) -> None:
        key = card_key(spelling)
        if not key:
            return
        have = out.setdefault(key, (target, differs))
        if have[0] != target:
            raise SpecError(f"simcore/catalogue/index.json: {spelling!r} is the same model "
                            f"card as {have[0]!r} and {target!r}; declare it for one of them")

    for entry in catalogue().values():
        for spelling in (entry.id, *entry.aliases):
            add(spelling, entry.id, "")
        for other in entry.same_shape:
            add(other.id, entry.id, other.differs)
    names = _names()
    for name, preset in PRESETS.items():
        if preset.hf_id and preset.hf_id.lower() not in names:
            add(preset.hf_id, name, "")
    return out


@functools.cache
def _other_shapes() -> dict[str, tuple[str, SameShape]]:
    """Lower-cased ids of tunes whose shape differs -> (catalogue id, what differs)."""
    return {other.id.lower(): (entry.id, other) for entry in catalogue().values()
            for other in entry.not_same_shape}


def _named(key: str) -> Model:
    """The preset or catalogue model of a canonical key."""
    return PRESETS[key].model if key in PRESETS else _catalogue_model(key)


def _lookup(name: str) -> Model | None:
    """A preset or catalogue model by name, alias, file stem or model-card id (the
    last with a note of what it was resolved as), or None."""
    query = name.strip()
    key = _names().get(query.lower())
    if key is not None:
        return _named(key)
    if query.lower() in _other_shapes():
        return None
    found = _card_names().get(card_key(query))
    if found is None:
        return None
    target, differs = found
    preset = PRESETS.get(target)
    if differs:
        why = differs
    elif preset is not None and preset.hf_id.lower() == query.lower():
        why = "the preset was read from its config.json"
    else:
        why = "instruction and chat tunes share their base model's shape"
    kind = "preset" if preset is not None else "catalogue"
    return replace(_named(target), note=f"resolved {query!r} as {kind} {target!r}: {why}")


def find_model(name: str) -> Model | None:
    """:func:`get_model` for a name that may not be there: the preset or catalogue model, or
    None (no did-you-mean work: for loaders that try several names in turn)."""
    return _lookup(name)


def _unknown(model: object, *, paths: bool = False) -> SpecError:
    """The one-line error of a name that is not a preset or a catalogue id (with
    ``paths``, also not a file nor in the local Hugging Face cache: :func:`load_model`):
    what it is not, the closest name, what to pass instead."""
    text = str(model)
    if paths and looks_like_hub_id(text):
        head = (f"unknown model {model!r}: not a preset, not in the catalogue and not in the "
                f"local Hugging Face cache at {hf_cache_dir()}")
        instead = (f"pass a config.json path (none exists at {text!r}), fetch the config into "
                   f"the cache (hf download {text.strip()} config.json), or a name from "
                   "`simcore models`")
    else:
        head = f"unknown model {model!r}"
        instead = (f"pass a preset ({', '.join(PRESETS)}), a catalogue id (e.g. "
                   f"'meta-llama/Llama-3.1-70B') or {'a config.json path' if paths else 'a Model'}"
                   "; `simcore models` lists the presets and the catalogue")
    other = _other_shapes().get(text.strip().lower())
    if other is not None:  # a tune the rule would take for its base, wrongly
        hint = f"it is not {other[0]!r}: {other[1].differs}"
    else:
        hint = did_you_mean(text, _names()) if isinstance(model, str) else ""
    head = f"{head}; {hint}" if hint else head
    if head.endswith("?"):
        return SpecError(f"{head} {instead[0].upper()}{instead[1:]}")
    return SpecError(f"{head}; {instead}")


def get_model(model: str | Model) -> Model:
    """A preset or catalogue model by name (case-insensitive), or a :class:`Model` passed through.

    Catalogue models keep their Hugging Face id as ``name``. A model-card id of a
    catalogue entry's architecture (a tune: ``-Instruct``, ``-Chat``, ``-it``; a
    ``Meta-`` prefix; see :func:`card_key`) resolves to it, with a ``note`` saying so.
    An unknown name raises :class:`~simcore.errors.SpecError` suggesting the closest one.

    Examples
    --------
    >>> get_model("META-LLAMA/llama-3.1-70b").n_layers
    80
    >>> print(get_model("Qwen/Qwen2.5-72B").note)
    resolved 'Qwen/Qwen2.5-72B' as catalogue 'Qwen/Qwen2.5-72B-Instruct': instruction and chat tunes share their base model's shape
    >>> get_model("Llama-3.1-70")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    simcore.errors.SpecError: unknown model 'Llama-3.1-70'; did you mean 'meta-llama/Llama-3.1-70B'? Pass a preset ...
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
    """A preset name, a catalogue id (or a model-card id of its shape, see
    :func:`get_model`), a Hugging Face ``config.json`` path, a folder holding one, or the
    id of a model whose ``config.json`` is in the local Hugging Face cache.

    The cache is read offline (:func:`simcore.model.hf.cached_hf_config`: never the
    network); a model found there keeps the id as its name and a ``note`` with the path.
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
    if looks_like_hub_id(spec):
        cached = cached_hf_config(spec)
        if cached is not None:
            model = Model.from_hf_config(cached, name=spec.strip())
            return replace(model, note=f"read {spec.strip()!r} from the local Hugging Face "
                                       f"cache: {cached}")
    elif spec.endswith(".json") or spec.startswith((".", os.sep, "~")) or spec.count(os.sep) > 1:
        return Model.from_hf_config(local)
    raise _unknown(spec, paths=True)


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
