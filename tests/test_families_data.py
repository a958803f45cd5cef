"""Hardware families are data with provenance (issue 31 item 3): one TOML file per family,
every value with a unit, a source and a tag, read once and checked at the boundary."""

import dataclasses
import hashlib
import json
import tomllib
from pathlib import Path

import pytest

from simcore import HARDWARE_FAMILIES, SpecError, get_family
from simcore.hardware import families
from simcore.hardware.families import TAGS, provenance, read_family
from simcore.hardware.specs import HW_KNOBS, HW_UNITS, TOPOLOGY_UNITS, Topology

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "simcore" / "hardware" / "data"
FILES = sorted(p for p in DATA.glob("*.toml") if p.name != "index.toml")

#: the families, in order, as simcore/model/presets.py declared them in code before they
#: became data files (commit f90c821)
NAMES = ["SiP", "A100-80G", "A100-40G", "H100-SXM", "H200"]
#: sha256 of every family's name, description, hardware and topology values (JSON, floats
#: as their shortest round-trip repr, so bit-exact), computed from those code definitions
DIGEST = "5d0d7c5c849448ea48013dfd9901b8496c38d461079e9fa152f3821dbc5e602a"
#: a few values per family, spelled as the code spelled them
KEY_VALUES = {
    "SiP": dict(pe_hbm_gb=96.0, bw_hbm_gbs=4000.0, pes_per_cube=8, cubes_per_sip=4, n_sips=8,
                alpha_inter_ns=1000.0, nvls=False),
    "A100-80G": dict(pe_hbm_gb=85.9, bw_hbm_gbs=2039.0, peak_tflops_f16=312.0, bw_inter_gbs=25.0,
                     int8_ratio=2.0, fp8_ratio=0.0, host_mem_gb=128.0,
                     mm_ratio=(271.2 / 312.0) / (794.5 / 989.0), nvls=False),
    "A100-40G": dict(pe_hbm_gb=42.9, bw_hbm_gbs=1555.0, pcie_gbs=32.0, n_sips=32),
    "H100-SXM": dict(pe_hbm_gb=85.9, bw_hbm_gbs=3350.0, peak_tflops_f16=989.0,
                     bw_intra_gbs=450.0, fp8_ratio=2.0, fa2_ratio=329.483 / 631.338,
                     alpha_intra_ns=700.0, alpha_intersip_ns=5000.0, nvls=True),
    "H200": dict(pe_hbm_gb=150.8, bw_hbm_gbs=4800.0, bw_intersip_gbs=50.0, host_mem_gb=256.0,
                 mm_ratio=1.0, nvls=True),
}


def _digest(fams):
    rows = [[n, f.name, f.description, f.hardware.as_dict(), dataclasses.asdict(f.topology)]
            for n, f in fams.items()]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def test_families__yield_exactly_the_families_and_values_of_before():
    assert list(HARDWARE_FAMILIES) == NAMES
    assert _digest(HARDWARE_FAMILIES) == DIGEST
    for name, values in KEY_VALUES.items():
        fam = get_family(name)
        for key, value in values.items():
            spec = fam.hardware if key in HW_KNOBS else fam.topology
            got = getattr(spec, key)
            assert got == value and type(got) is type(value), (name, key, got)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_read_family__each_file_loads_as_the_shipped_family(path):
    assert read_family(path) == HARDWARE_FAMILIES[path.stem]


def test_index__lists_every_file_once():
    index = tomllib.loads((DATA / "index.toml").read_text())
    assert index["families"] == NAMES
    assert sorted(NAMES) == sorted(p.stem for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_family_file__every_value_has_unit_source_and_tag(path):
    doc = tomllib.loads(path.read_text())
    assert set(doc["hardware"]) == set(HW_KNOBS)
    assert set(doc["topology"]) == {f.name for f in dataclasses.fields(Topology)}
    for section, units in (("hardware", HW_UNITS), ("topology", TOPOLOGY_UNITS)):
        for key, entry in doc[section].items():
            assert entry["unit"] == units[key], (section, key)
            assert entry["tag"] in TAGS, (section, key)
            assert doc["sources"][entry["source"]].strip(), (section, key)
    assert set(provenance(path.stem)) == {f"hardware.{k}" for k in HW_KNOBS} | {
        f"topology.{f.name}" for f in dataclasses.fields(Topology)}


def test_provenance__inferred_values_say_so_and_cited_ones_cite():
    for name in NAMES:
        for key, d in provenance(name).items():
            if d.tag == "inferred":
                assert "chosen by simcore" in d.source, (name, key)
            else:
                assert "chosen by simcore" not in d.source, (name, key)
    mm = provenance("A100-80G")["topology.mm_ratio"]
    assert mm.tag == "measured" and "stas00/ml-engineering @ 744d01e" in mm.source
    assert provenance("h100-sxm")["hardware.bw_hbm_gbs"].source == (
        "NVIDIA H100 Tensor Core GPU data sheet")


def test_families__declared_as_package_data():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "hardware/data/*.toml" in pyproject["tool"]["setuptools"]["package-data"]["simcore"]


def test_topology_units__name_every_topology_field():
    assert list(TOPOLOGY_UNITS) == [f.name for f in dataclasses.fields(Topology)]


# --- a bad file is refused with one line naming the file and the key ---------------------
def _broken(tmp_path, old, new, name="H100-SXM"):
    text = (DATA / f"{name}.toml").read_text()
    assert old in text
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(("old", "new", "says"), [
    (', source = "h100", note = "dense BF16 tensor"', ', note = "dense BF16 tensor"',
     "hardware.peak_tflops_f16 lacks 'source'"),
    ('value = 3350.0, unit = "GB/s"', 'value = 3.35,   unit = "TB/s"',
     "hardware.bw_hbm_gbs has unit 'TB/s'; write unit = \"GB/s\""),
    ('unit = "ns",    tag = "inferred"', 'unit = "ns",    tag = "guessed"',
     "topology.alpha_intra_ns has tag 'guessed'; pass one of measured, datasheet, inferred"),
    ('source = "h100", note = "NVLink4', 'source = "nvlink-doc", note = "NVLink4',
     "hardware.bw_intra_gbs cites source 'nvlink-doc', which is not a key of [sources]"),
    ('derived = "329.483 / 631.338"', 'derived = "329.5 / 631.338"',
     "topology.fa2_ratio derived '329.5 / 631.338' gives"),
    ('derived = "329.483 / 631.338"', 'derived = "__import__(\'os\')"',
     "topology.fa2_ratio derived \"__import__('os')\" must be arithmetic"),
    ('value = 8,      unit = "NICs"', 'value = "8",    unit = "NICs"',
     "topology.nics_per_cube value must be a number"),
    ('value = true,   unit = "bool"', 'value = 1,      unit = "bool"',
     "topology.nvls value must be true or false"),
    ('value = 3350.0, unit = "GB/s"', 'value = -1.0,   unit = "GB/s"',
     "Hardware.bw_hbm_gbs must be a number in [0.001, 10000000] GB/s, got -1.0"),
    ('name = "H100-SXM"', 'name = "H100"', "name 'H100' must be the file's name, 'H100-SXM'"),
    ('simcore = "none', 'unused = "a data sheet"\nsimcore = "none',
     "sources.unused is cited by no value"),
    ('tag = "measured", source = "pytorch-142132"',
     'tag = "measured", source = "pytorch-142132", unit2 = "x"',
     "topology.fa2_ratio has unknown key 'unit2'"),
    ('description = "', 'descr = "', "the file lacks 'description'"),
    ('[topology]', '[topology]\nextra = 1', "[topology] has unknown key 'extra'"),
])
def test_read_family__refuses_a_bad_file_in_one_line(tmp_path, old, new, says):
    path = _broken(tmp_path, old, new)
    with pytest.raises(SpecError) as info:
        read_family(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: "), message
    assert says in message, message


def test_read_family__refuses_a_file_that_is_not_toml(tmp_path):
    path = tmp_path / "SiP.toml"
    path.write_text("name = \n")
    with pytest.raises(SpecError, match=r"SiP.toml: not valid TOML: "):
        read_family(path)


def test_load_shipped__refuses_an_unlisted_file(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    for p in DATA.glob("*.toml"):
        (data / p.name).write_text(p.read_text())
    (data / "B200.toml").write_text((DATA / "H200.toml").read_text())
    monkeypatch.setattr(families.resources, "files", lambda package: tmp_path)
    with pytest.raises(SpecError, match="list each family file once"):
        families._load_shipped()
