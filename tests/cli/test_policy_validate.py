"""`fleetctl policy validate`: a region the catalog does not sell in is a warning at its line and column."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fleetctl.cli.main import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _policy(tmp_path: Path, providers: str, regions: str) -> Path:
    """The example policy without its infrastructure section, with these providers and regions."""
    text = (REPO / "policies" / "example.yaml").read_text()
    text = text[:text.index("\ninfrastructure:")] + "\n"
    text = text.replace("providers:\n  - aws\n  - gcp\n  - azure\n", f"providers: {providers}\n", 1)
    path = tmp_path / "policy.yaml"
    path.write_text(f"regions: {regions}\n" + text)
    return path


def test_a_mistyped_region_is_a_warning_with_its_position_and_a_hint(tmp_path):
    """It was "ok" and nothing else: only `fleetctl plan` (after the merge) noted that nothing is sold there."""
    path = _policy(tmp_path, "[aws, gcp, azure]", "[us-east-1, us-centrl1]")
    result = runner.invoke(app, ["policy", "validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: ok" in result.output
    assert (f"{path}:1:22: regions[1]: warning: the shipped catalog has no offer in region 'us-centrl1' "
            "(did you mean 'us-central1'?); fleetctl would buy nothing there") in result.output
    assert "us-east-1'" not in result.output


def test_a_region_of_a_provider_the_policy_leaves_out_is_a_warning(tmp_path):
    path = _policy(tmp_path, "[aws]", "[us-east-1, eastus2]")
    result = runner.invoke(app, ["policy", "validate", str(path)])
    assert result.exit_code == 0, result.output
    assert (f"{path}:1:22: regions[1]: warning: region 'eastus2' is azure's, and providers allows only aws; "
            "fleetctl would buy nothing there") in result.output


def test_regions_the_catalog_sells_in_give_no_warning(tmp_path):
    path = _policy(tmp_path, "[aws, gcp, azure]", "[us-east-1, us-central1, eastus2]")
    result = runner.invoke(app, ["policy", "validate", str(path)])
    assert result.exit_code == 0 and result.output == f"{path}: ok\n", result.output
