"""`fleetctl policy schema -o FILE`: it replaces a schema it wrote, never a policy or another file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.policy import policy_json_schema

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
SCHEMA = json.dumps(policy_json_schema(), indent=2, sort_keys=True) + "\n"


def _older_schema() -> str:
    """A schema an older fleetctl wrote: the same marker, one field fewer."""
    doc = policy_json_schema()
    del doc["properties"]["teams"]
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize(("name", "existing", "why"), [
    pytest.param("prod.yaml", (REPO / "policies" / "example.yaml").read_text(),
                 "is not JSON, so not a policy schema fleetctl wrote", id="a-policy"),
    pytest.param("other.schema.json", json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema",
                                                  "title": "jobs", "type": "object"}),
                 'is JSON, but not a policy schema fleetctl wrote (a JSON Schema titled "fleetctl policy")',
                 id="another-schema"),
    pytest.param("titled.json", json.dumps({"title": "fleetctl policy"}),
                 "is JSON, but not a policy schema fleetctl wrote", id="no-$schema"),
    pytest.param("list.json", json.dumps(["fleetctl policy"]), "is JSON, but not a policy schema", id="json-list"),
    pytest.param("latin1.json", "caf\xe9 = 1\n", "is not JSON", id="not-utf8"),
])
def test_an_existing_file_that_is_not_a_schema_fleetctl_wrote_is_not_replaced(tmp_path, name, existing, why):
    """`policy schema -o policies/prod.yaml` replaced the policy with the schema, exit 0."""
    target = tmp_path / name
    target.write_bytes(existing.encode("latin-1" if name == "latin1.json" else "utf-8"))
    before = target.read_bytes()
    result = runner.invoke(app, ["policy", "schema", "-o", str(target)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"-o {target}: exists and {why}" in text and "nothing was written" in text, text
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left beside it


def test_a_symlink_to_a_policy_is_not_replaced_through(tmp_path):
    policy = tmp_path / "prod.yaml"
    policy.write_text((REPO / "policies" / "example.yaml").read_text())
    (tmp_path / "schema.json").symlink_to(policy)
    result = runner.invoke(app, ["policy", "schema", "-o", str(tmp_path / "schema.json")])
    assert result.exit_code == 2 and "is not JSON" in result.output, result.output
    assert policy.read_text() == (REPO / "policies" / "example.yaml").read_text()


@pytest.mark.parametrize("existing", [
    pytest.param(None, id="absent"),
    pytest.param("", id="empty"),
    pytest.param("\n", id="blank"),
    pytest.param(_older_schema(), id="an-older-fleetctl-schema"),
    pytest.param(SCHEMA, id="the-same-schema"),
])
def test_a_schema_fleetctl_wrote_an_empty_file_or_no_file_is_written(tmp_path, existing):
    """Editors' schema files are regenerated after each upgrade: those are replaced, whole."""
    target = tmp_path / "sub" / "schema.json"
    if existing is not None:
        target.parent.mkdir()
        target.write_text(existing)
    result = runner.invoke(app, ["policy", "schema", "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert f"wrote {target}" in result.output
    assert target.read_text() == SCHEMA
    assert sorted(p.name for p in target.parent.iterdir()) == ["schema.json"]


def test_stdout_is_written_whatever_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text("not a schema")
    result = runner.invoke(app, ["policy", "schema", "-o", "-"])
    assert result.exit_code == 0 and json.loads(result.stdout) == json.loads(SCHEMA)
    assert (tmp_path / "-").read_text() == "not a schema"
