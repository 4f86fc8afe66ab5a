"""fleetctl.policydiff over real policy files (the real loader) and the shipped catalog."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import pytest

from fleetctl import model
from fleetctl.model import Market
from fleetctl.policy import spec_from_document
from fleetctl.policydiff import ChangeKind, PolicyDiff, diff_policies, render_text
from fleetctl.yamlerrors import read_document
from providers.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = (ROOT / "policies" / "example.yaml").read_text()
DEFAULTS = model.Policy()


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def diff(old: Path, new: Path) -> PolicyDiff:
    old_doc, new_doc = read_document(old), read_document(new)
    return diff_policies(old_doc=old_doc, old=spec_from_document(old_doc), new_doc=new_doc,
                         new=spec_from_document(new_doc), offers=load_catalog())


def example_with(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    """The example policy with each (old, new) text replaced once (each must be there)."""
    text = EXAMPLE
    for before, after in edits:
        assert before in text, before
        text = text.replace(before, after, 1)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def line_of(path: Path, text: str) -> int:
    """The 1-based line of ``path`` that holds ``text`` (once)."""
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def settings(d: PolicyDiff) -> list[tuple[str, str, object, object]]:
    return [(c.kind.value, c.field_path, c.old, c.new) for c in d.settings]


# --------------------------------------------------------------------------- settings


def test_writing_out_defaults_is_no_change(tmp_path):
    old = write(tmp_path, "old.yaml", "budget: {max_usd_per_hour: 100}\n")
    new = write(tmp_path, "new.yaml", f"""
        providers: []
        regions: []
        markets:
          max_spot_share: {DEFAULTS.max_spot_share}
          max_wait_for_spot_minutes: {DEFAULTS.max_wait_for_spot_minutes}
        budget: {{max_usd_per_hour: 100, max_gpus: null}}
        teams: {{}}
        priority_classes:
        {"".join(f'''
          {pc.name}: {{value: {pc.value}, preemptible: {str(pc.preemptible).lower()}, spot_eligible: {str(pc.spot_eligible).lower()}}}'''
                 for pc in DEFAULTS.priority_classes)}
        default_priority_class: {DEFAULTS.default_priority_class}
        scaling: {{idle_timeout_minutes: {DEFAULTS.idle_timeout_minutes}}}
        interruptions: {{count_interruptions: all}}
        infrastructure: null
        """)
    d = diff(old, new)
    assert d.settings == () and d.market == () and not d.changed
    assert d.old_admitted == d.new_admitted == d.catalog_offers  # no allow-list: every priced offer
    assert "No differences" in render_text(d)


def test_an_explicit_value_that_goes_back_to_the_default_is_a_change(tmp_path):
    old = write(tmp_path, "old.yaml", """
        markets: {max_wait_for_spot_minutes: 15, max_spot_share: 0.5}
        budget: {max_usd_per_hour: 100}
        """)
    new = write(tmp_path, "new.yaml", """
        markets: {max_spot_share: 0.5}
        budget: {max_usd_per_hour: 100}
        """)
    d = diff(old, new)
    assert settings(d) == [("change", "markets.max_wait_for_spot_minutes", 15.0, DEFAULTS.max_wait_for_spot_minutes)]
    change = d.settings[0]
    assert not change.written and change.at is not None and change.at.line == 1  # at `markets:`, where to write it
    assert "~ markets.max_wait_for_spot_minutes: 15.0 -> 0.0 (default)" in render_text(d)


def test_a_changed_quota_points_at_its_line_in_new(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(EXAMPLE)
    # Three lines more at the top of NEW: a line of OLD would be three off.
    new = example_with(tmp_path, "new.yaml", ("# fleetctl policy", "# changed\n# by\n# a PR\n# fleetctl policy"),
                       ("    guaranteed_gpus: 32\n", "    guaranteed_gpus: 16\n"))
    d = diff(old, new)
    assert settings(d) == [("change", "teams.ml-research.guaranteed_gpus", 32, 16)]
    change = d.settings[0]
    assert change.written and change.at.line == line_of(new, "guaranteed_gpus: 16") == line_of(old, "guaranteed_gpus: 32") + 3
    assert change.at.column == len("    guaranteed_gpus: ") + 1
    assert d.market == ()  # quotas take no offer out of the market
    text = render_text(d)
    assert f"  ~ teams.ml-research.guaranteed_gpus: 32 -> 16  # {new}:{change.at.line}\n" in text


def test_a_removed_gpu_model_takes_its_offers_out_of_the_market(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(EXAMPLE)
    new = example_with(tmp_path, "new.yaml", ("  - T4\n", ""))
    d = diff(old, new)
    assert settings(d) == [("remove", "gpu_models[T4]", "T4", None)]
    assert d.settings[0].at.line == line_of(new, "gpu_models:")  # the list it left
    # The example allows every provider and region: every priced T4 offer of the catalog goes.
    t4 = Counter((o.provider, o.market) for o in load_catalog() if o.instance_type.gpu_model == "T4"
                 and o.usd_per_hour > 0)
    assert t4, "the shipped catalog sells T4"
    assert all(c.kind is ChangeKind.REMOVE and c.gpu_model == "T4" and c.new_admitted == 0 for c in d.market)
    assert {(c.provider, m): n for c in d.market for m, n in c.by_market} == dict(t4)
    assert d.old_admitted - d.new_admitted == sum(t4.values())
    aws = next(c for c in d.market if c.provider == "aws")
    assert (f"  - {aws.offers} offers: aws T4 (spot {t4['aws', Market.SPOT]}, on_demand {t4['aws', Market.ON_DEMAND]}); "
            f"aws T4 admitted {aws.offers} -> 0") in render_text(d)


def test_an_added_team_is_one_line_per_setting_with_its_defaults_marked(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(EXAMPLE)
    new = example_with(tmp_path, "new.yaml", ("teams:\n", "teams:\n  ml-infra:\n    burst_gpus: 8\n"))
    d = diff(old, new)
    assert settings(d) == [
        ("add", "teams.ml-infra.guaranteed_gpus", None, 0),
        ("add", "teams.ml-infra.burst_gpus", None, 8),
        ("add", "teams.ml-infra.weight", None, 1.0),
    ]
    assert [c.written for c in d.settings] == [False, True, False]
    assert d.settings[1].at.line == line_of(new, "burst_gpus: 8")
    assert d.settings[0].at.line == d.settings[2].at.line == line_of(new, "ml-infra:")  # defaults: at the team
    text = render_text(d)
    assert "  + teams.ml-infra.guaranteed_gpus: 0 (default)" in text
    assert "  + teams.ml-infra.burst_gpus: 8  " in text


def test_a_removed_team_has_no_line_of_its_own_in_new(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(EXAMPLE)
    start = EXAMPLE.index("  # Product: production")
    end = EXAMPLE.index("# Priority classes jobs name")
    new = tmp_path / "new.yaml"
    new.write_text(EXAMPLE[:start] + "\n" + EXAMPLE[end:])
    d = diff(old, new)
    assert settings(d) == [("remove", f"teams.ml-product.{f}", v, None)
                           for f, v in (("guaranteed_gpus", 24), ("burst_gpus", 48), ("weight", 1.0))]
    assert {c.at.line for c in d.settings} == {line_of(new, "teams:")}
    assert "  - teams.ml-product.burst_gpus: 48" in render_text(d)


def test_reordering_teams_classes_and_lists_is_no_change(tmp_path):
    old = write(tmp_path, "old.yaml", """
        providers: [aws, gcp]
        gpu_models: [T4, L4, A10G]
        budget: {max_usd_per_hour: 100}
        teams:
          a: {guaranteed_gpus: 1}
          b: {guaranteed_gpus: 2, weight: 3}
        priority_classes:
          high: {value: 10}
          low: {value: 1}
        default_priority_class: low
        """)
    new = write(tmp_path, "new.yaml", """
        teams:
          b: {weight: 3, guaranteed_gpus: 2}
          a: {guaranteed_gpus: 1}
        priority_classes:
          low: {value: 1}
          high: {value: 10}
        default_priority_class: low
        budget: {max_usd_per_hour: 100}
        gpu_models: [A10G, T4, L4]
        providers: [gcp, aws]
        """)
    d = diff(old, new)
    assert d.settings == () and d.market == () and not d.changed


def test_list_items_are_named_by_value_and_more_regions_add_offers(tmp_path):
    old = write(tmp_path, "old.yaml", """
        providers: [aws]
        regions: [us-east-1, us-west-2]
        budget: {max_usd_per_hour: 100}
        """)
    new = write(tmp_path, "new.yaml", """
        providers: [aws]
        regions:
          - us-east-2
          - us-west-2
          - us-east-1
        budget: {max_usd_per_hour: 100}
        """)
    d = diff(old, new)
    assert settings(d) == [("add", "regions[us-east-2]", None, "us-east-2")]
    assert d.settings[0].at.line == 3 and d.settings[0].written
    sold = Counter((o.instance_type.gpu_model, o.market) for o in load_catalog()
                   if o.provider == "aws" and o.region == "us-east-2" and o.usd_per_hour > 0)
    assert sold and all(c.kind is ChangeKind.ADD and c.provider == "aws" for c in d.market)
    assert {(c.gpu_model, m): n for c in d.market for m, n in c.by_market} == dict(sold)
    assert "  + regions[us-east-2]" in render_text(d)


def test_an_allow_list_that_was_empty_is_shown_whole(tmp_path):
    """[] allows any provider: "+ providers[aws]" would read as a widening."""
    old = write(tmp_path, "old.yaml", "budget: {max_usd_per_hour: 100}\n")
    new = write(tmp_path, "new.yaml", "providers: [aws]\nbudget: {max_usd_per_hour: 100}\n")
    d = diff(old, new)
    assert settings(d) == [("change", "providers", [], ["aws"])]
    assert d.settings[0].written and d.settings[0].at.line == 1
    assert {c.provider for c in d.market} == {"gcp", "azure"}
    assert all(c.kind is ChangeKind.REMOVE and c.new_admitted == 0 for c in d.market)
    assert '  ~ providers: [] -> ["aws"]' in render_text(d)


def test_a_removed_section_is_removed_leaf_by_leaf(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(EXAMPLE)
    new = tmp_path / "new.yaml"
    new.write_text(EXAMPLE[:EXAMPLE.index("\ninfrastructure:")] + "\n")
    d = diff(old, new)
    assert d.settings and all(c.kind is ChangeKind.REMOVE and c.at is None for c in d.settings)
    paths = [c.field_path for c in d.settings]
    assert paths[0] == "infrastructure.cluster"
    assert "infrastructure.aws.us-east-1.subnet_ids[subnet-0aaaaaaaaaaaaaaa1]" in paths
    assert "infrastructure.gcp.regions[us-central1]" in paths
    assert "infrastructure.tags.cost-centre" in paths
    assert d.market == ()  # Terraform's section: the planner's filter does not read it


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "backward"])
def test_settings_come_in_the_order_of_the_policy_fields(tmp_path, reverse):
    a = write(tmp_path, "a.yaml", """
        gpu_models: [T4, L4]
        budget: {max_usd_per_hour: 100}
        teams: {x: {weight: 2}, y: {weight: 1}}
        scaling: {idle_timeout_minutes: 5}
        """)
    b = write(tmp_path, "b.yaml", """
        scaling: {idle_timeout_minutes: 6}
        teams: {y: {weight: 2}, x: {weight: 1}}
        budget: {max_usd_per_hour: 100}
        gpu_models: [A10G, L4]
        """)
    d = diff(b, a) if reverse else diff(a, b)
    assert [c.field_path for c in d.settings] == [
        "gpu_models[A10G]", "gpu_models[T4]", "teams.x.weight", "teams.y.weight", "scaling.idle_timeout_minutes"]
    assert [c.kind.value for c in d.settings[:2]] == (["remove", "add"] if reverse else ["add", "remove"])


def test_the_whole_text_of_a_settings_only_change(tmp_path):
    old = write(tmp_path, "old.yaml", """
        budget: {max_usd_per_hour: 100}
        teams: {a: {guaranteed_gpus: 1}}
        """)
    new = write(tmp_path, "new.yaml", """
        budget: {max_usd_per_hour: 120}
        teams:
          a:
            guaranteed_gpus: 1
            weight: 2
        interruptions: {count_interruptions: work_lost}
        """)
    assert render_text(diff(old, new)) == textwrap.dedent(f"""\
        Comparing {old} (old) with {new} (new).

        Settings:
          ~ budget.max_usd_per_hour: 100.0 -> 120.0                  # {new}:1
          ~ teams.a.weight: 1.0 -> 2.0                               # {new}:5
          ~ interruptions.count_interruptions: "all" -> "work_lost"  # {new}:6

        Policy diff: 3 settings differ (3 changed); offers admitted 3108 -> 3108 of the catalog's 3108.
        """)


def test_one_setting_differs_in_the_singular(tmp_path):
    """It said "Policy diff: 1 setting differ (1 changed)"."""
    old = write(tmp_path, "old.yaml", "budget: {max_usd_per_hour: 100}\n")
    new = write(tmp_path, "new.yaml", "budget: {max_usd_per_hour: 120}\n")
    assert render_text(diff(old, new)).splitlines()[-1] == \
        "Policy diff: 1 setting differs (1 changed); offers admitted 3108 -> 3108 of the catalog's 3108."
