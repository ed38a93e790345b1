"""The scenario key reference in docs/ is written from the schema and stays true to it."""

import dataclasses
from pathlib import Path

from pipeprof import scenario as scen
from pipeprof import scenario_keys

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenario-keys.md"


def test_the_key_reference_is_what_the_schema_writes():
    assert (
        DOC.read_text() == scenario_keys.document()
    ), "docs/scenario-keys.md differs from the schema: .venv/bin/python -m pipeprof.scenario_keys > docs/scenario-keys.md"


def test_the_reference_loads_as_a_scenario_holding_every_default(tmp_path):
    (tmp_path / "ref.toml").write_text(scenario_keys.reference())
    loaded = scen.load(str(tmp_path / "ref.toml"))
    defaults = scen.Scenario()
    for f in dataclasses.fields(scen.Scenario):
        if f.name not in ("variants", "source_file"):
            assert getattr(loaded, f.name) == getattr(defaults, f.name), f.name
    assert [v.name for v in loaded.variants] == ["real", "no-augment"]
    assert loaded.variant_pipeline(loaded.variants[1]).augment.enabled is False
