"""The policy loader: the example loads, every broken policy is reported as
FILE:LINE:COLUMN: field.path: message at the right place, and no input at all
makes it raise anything but SpecError."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from fleetctl import model, yamlerrors
from fleetctl.policy import (
    GPU_MODELS,
    INTEGER_NOTE,
    PROVIDERS,
    close_named_maps,
    load_policy,
    note_integers,
    policy_json_schema,
)
from fleetctl.yamlerrors import SpecError, ValidationIssue

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_POLICY = ROOT / "policies" / "example.yaml"


def write(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def issues_of(path: Path) -> tuple[ValidationIssue, ...]:
    with pytest.raises(SpecError) as info:
        load_policy(path)
    return info.value.issues


# --------------------------------------------------------------------------- the example


def test_example_policy_loads() -> None:
    policy = load_policy(EXAMPLE_POLICY)
    assert isinstance(policy, model.Policy)
    assert policy.providers == ("aws", "azure", "gcp")
    # no region pin: the example serves backtests on any market
    assert policy.regions == ()
    assert set(policy.gpu_models) == {"A100-40GB", "A100-80GB", "H100-80GB", "A10G", "L4", "T4", "V100-16GB"}
    assert policy.max_usd_per_hour == 400
    assert [t.name for t in policy.teams] == ["ml-product", "ml-research"]
    assert all(t.burst_gpus is not None and t.guaranteed_gpus <= t.burst_gpus for t in policy.teams)
    assert sum(t.guaranteed_gpus for t in policy.teams) <= (policy.max_gpus or 0)
    production = policy.priority_class("production")
    batch = policy.priority_class("batch")
    assert (production.value, production.preemptible, production.spot_eligible) == (1000, False, True)
    assert (batch.value, batch.preemptible, batch.spot_eligible) == (100, True, True)
    assert policy.default_priority_class == "batch"


def test_every_field_of_the_example_is_documented_by_a_comment_above_it() -> None:
    lines = EXAMPLE_POLICY.read_text().splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "- ")) or ":" not in stripped:
            continue
        assert lines[index - 1].strip().startswith("#"), f"line {index + 1} has no comment above: {line!r}"


def test_json_schema_describes_every_field() -> None:
    schema = policy_json_schema()
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["additionalProperties"] is False
    models = [schema, *schema["$defs"].values()]
    for m in models:
        assert m.get("additionalProperties") is False
        for name, prop in m["properties"].items():
            assert prop.get("description"), name
    assert schema["properties"]["gpu_models"]["items"]["enum"] == list(GPU_MODELS)
    assert schema["properties"]["providers"]["items"]["enum"] == list(PROVIDERS)
    json.dumps(schema)  # serialisable


def test_conversion_is_sorted_and_deterministic(tmp_path: Path) -> None:
    a = write(tmp_path, """
        providers: [gcp, aws]
        budget: {max_usd_per_hour: 10}
        teams: {zeta: {guaranteed_gpus: 1}, alpha: {}}
        priority_classes: {low: {value: 1}, high: {value: 9}}
        default_priority_class: low
    """, "a.yaml")
    b = write(tmp_path, """
        default_priority_class: low
        priority_classes: {high: {value: 9}, low: {value: 1}}
        teams: {alpha: {}, zeta: {guaranteed_gpus: 1}}
        budget: {max_usd_per_hour: 10.0}
        providers: [aws, gcp]
    """, "b.yaml")
    pa, pb = load_policy(a), load_policy(b)
    assert pa == pb
    assert pa.providers == ("aws", "gcp")
    assert [t.name for t in pa.teams] == ["alpha", "zeta"]
    assert [c.name for c in pa.priority_classes] == ["high", "low"]


def test_minimal_policy_takes_the_core_defaults(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, "budget:\n  max_usd_per_hour: 50\n"))
    defaults = model.Policy()
    assert policy == model.Policy(max_usd_per_hour=50.0)
    assert policy.priority_classes == defaults.priority_classes


def test_json_policy_with_positions(tmp_path: Path) -> None:
    path = write(tmp_path, """
        {
          "budget": {
            "max_usd_per_hour": -1
          }
        }
    """, "policy.json")
    (issue,) = issues_of(path)
    assert str(issue) == f"{path}:3:25: budget.max_usd_per_hour: must be greater than 0 (got -1)"


def test_anchors_and_aliases_are_allowed(tmp_path: Path) -> None:
    path = write(tmp_path, """
        budget: {max_usd_per_hour: 100, max_gpus: 64}
        teams:
          a: &team {guaranteed_gpus: 8, burst_gpus: 32}
          b: *team
          c:
            <<: *team
            weight: 3
    """)
    teams = {t.name: t for t in load_policy(path).teams}
    assert teams["b"] == model.Team("b", 8, 32, 1.0)
    assert teams["c"] == model.Team("c", 8, 32, 3.0)


def test_an_error_merged_in_with_a_merge_key_is_reported_at_the_merge_key(tmp_path: Path) -> None:
    """A bad value pulled in by ``<<: *name`` is reported at that ``<<`` line
    (the place that brought it into this mapping), naming the anchor's line;
    with a list of aliases, the one that supplied the key is named."""
    path = write(tmp_path, """
        budget: {max_usd_per_hour: 100, max_gpus: 64}
        teams:
          a: &team {guaranteed_gpus: 8, burst_gpus: -1}
          base: &base {weight: 2}
          c:
            weight: 3
            <<: *team
          d:
            weight: 1
            <<: [*base, *team]
          e:
            burst_gpus: 16
            <<: *team
    """)
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "3:45: teams.a.burst_gpus: must be greater than or equal to 0 (got -1)",
        "7:5: teams.c.burst_gpus: must be greater than or equal to 0 (got -1) (merged in by <<: *team; the "
        "anchor &team is at line 3)",
        "10:5: teams.d.burst_gpus: must be greater than or equal to 0 (got -1) (merged in by <<: *team; the "
        "anchor &team is at line 3)",
    ]


def test_a_cross_field_error_from_a_merged_value_is_reported_at_the_merge_key(tmp_path: Path) -> None:
    path = write(tmp_path, """
        budget: {max_usd_per_hour: 100, max_gpus: 64}
        teams:
          a: &defaults {guaranteed_gpus: 8}
          c:
            burst_gpus: 4
            <<: *defaults
    """)
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "6:5: teams.c.guaranteed_gpus: guaranteed_gpus 8 is above burst_gpus 4: a team cannot be guaranteed more "
        "than it may use (merged in by <<: *defaults; the anchor &defaults is at line 3)",
    ]


def test_an_alias_bomb_is_refused_at_the_alias_that_expands_it(tmp_path: Path) -> None:
    """Seven lines that expand to over a million values ("billion laughs")
    are refused once aliases have copied MAX_ALIAS_VALUES values, at the alias
    doing it, in words that say aliases are the cause."""
    lines = ["budget: {max_usd_per_hour: 100}", "l0: &l0 [" + ", ".join(["x"] * 10) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 7)]
    path = tmp_path / "policy.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (issue,) = issues_of(path)
    assert (issue.line, issue.column, issue.field_path) == (7, 10, "l5[0]"), issue
    assert issue.message.startswith(
        f"aliases copy more than {yamlerrors.MAX_ALIAS_VALUES} values into the document (each use of an alias copies its "
        "anchored content; an alias bomb?); use fewer aliases or write the values out (reached through the alias "
        "*l4; the anchor &l4 is at line 6)"), issue


@pytest.mark.parametrize(("text", "where"), [
    pytest.param("a: &a {b: *a}", [(1, 11, "a.b")], id="a-mapping-value"),
    pytest.param("&r [1, *r]", [(1, 8, "[1]")], id="the-root-list"),
    pytest.param("a: &a [1, [*a]]", [(1, 12, "a[1][0]")], id="two-levels-down"),
    pytest.param("x: &x\n  y: *x\n  z: *x\n", [(2, 6, "x.y"), (3, 6, "x.z")], id="every-alias-of-the-loop"),
    # ruamel failed on these with "AttributeError: 'NoneType' object has no attribute 'add_referent'"
    pytest.param("a: &a {<<: *a}", [(1, 12, "a")], id="merged-into-itself"),
    pytest.param("a: &a {b: {<<: *a}}", [(1, 16, "a.b")], id="merged-below-itself"),
    pytest.param("a: &a {<<: [{x: 1}, *a]}", [(1, 21, "a")], id="in-a-list-of-merges"),
    pytest.param("a: &a {? *a : 1}", [(1, 10, "a")], id="as-a-key"),
])
def test_an_alias_inside_its_own_anchor_is_a_loop_reported_at_the_alias(text: str, where: list) -> None:
    """A document that contains itself: each alias that closes a loop is an
    issue at the alias, naming the anchor. ruamel made each such alias a
    silent null below the root (``{'a': {'b': None}}``, so a loop in a policy
    read as "not set"), and crashed on a merge of the anchor."""
    with pytest.raises(SpecError) as info:
        yamlerrors.parse_document(text, "loop.yaml")
    assert [(i.line, i.column, i.field_path) for i in info.value.issues] == where
    name = text.split("&")[1][0]
    assert all(i.message == f"an alias refers to a value that contains it (a loop): *{name} is inside &{name} "
               "(line 1); a document cannot contain itself, so write the values out" for i in info.value.issues)


def test_aliases_that_share_content_without_a_loop_are_read() -> None:
    """The same anchor used twice, merged and aliased, in and beside each
    other, is no loop (the walk marks what it finished, not what it saw)."""
    doc = yamlerrors.parse_document("a: &a {b: 1}\nc: &c [*a, *a]\nd: {<<: *a, e: *c}\nf: [*c, *c]\n", "ok.yaml")
    assert doc.data == {"a": {"b": 1}, "c": [{"b": 1}, {"b": 1}], "d": {"b": 1, "e": [{"b": 1}, {"b": 1}]},
                        "f": [[{"b": 1}, {"b": 1}], [{"b": 1}, {"b": 1}]]}
    assert doc.issues == ()


def test_a_loop_in_a_policy_is_one_issue_at_its_alias_beside_duplicate_keys(tmp_path: Path) -> None:
    path = write(tmp_path, """
        budget: {max_usd_per_hour: 100}
        teams:
          ml: &ml
            burst_gpus: 8
            burst_gpus: 4
            extra:
              <<: *ml
    """)
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "5:5: teams.ml.burst_gpus: duplicate key 'burst_gpus' (first defined at line 4); a key may appear once per "
        "mapping",
        "7:11: teams.ml.extra: an alias refers to a value that contains it (a loop): *ml is inside &ml (line 3); "
        "a document cannot contain itself, so write the values out",
    ]


def test_a_path_in_a_document_without_positions_is_at_its_start() -> None:
    """Document.position's last resort (a document built by hand, without
    positions): line 1, column 1, for the key as for the value."""
    doc = yamlerrors.Document("hand.yaml", {"a": 1}, {})
    assert doc.position(("a",)) == yamlerrors.Position(1, 1)
    assert doc.position(("a", "b"), at="key") == yamlerrors.Position(1, 1)
    assert str(doc.issue(("a",), "bad")) == "hand.yaml:1:1: a: bad"


def test_a_missing_path_is_at_its_nearest_existing_parent_however_deep() -> None:
    """Two levels missing below ``a`` (reached through an alias): at ``a``'s
    key, with the alias named; a missing key of the root is at the root."""
    P, Located = yamlerrors.Position, yamlerrors.Located
    alias = yamlerrors.Alias("shared", P(2, 4), P(7, 1))
    doc = yamlerrors.Document("hand.yaml", {"a": {}}, {
        (): Located(None, P(3, 1)),
        ("a",): Located(P(2, 1), P(2, 4), via=alias),
    })
    assert doc.position(("a", "b", "c")) == P(2, 1)
    listed = yamlerrors.Document("hand.yaml", [1], {(): Located(None, P(1, 1)), (0,): Located(None, P(1, 3))})
    assert listed.position((0,), at="key") == P(1, 3)  # a list item has no key: at its value
    assert str(doc.issue(("a", "b", "c"), "bad")) == (
        "hand.yaml:2:1: a.b.c: bad (reached through the alias *shared; the anchor &shared is at line 7)")
    assert str(doc.issue(("a", "b", "c", "d"), "bad")) == (
        "hand.yaml:2:1: a.b.c.d: bad (reached through the alias *shared; the anchor &shared is at line 7)")
    assert str(doc.issue(("z", "y"), "bad")) == "hand.yaml:3:1: z.y: bad"


def test_a_document_that_is_not_a_mapping_is_refused_by_a_model_at_its_root() -> None:
    from fleetctl.policy import TeamSpec

    doc = yamlerrors.parse_document("# a team\n- 8\n", "team.yaml")
    spec, issues = doc.validate(TeamSpec, doc.data)
    assert spec is None
    assert [str(i) for i in issues] == ["team.yaml:2:1: (root): must be a mapping (got a list)"]


def test_values_written_out_do_not_count_toward_the_alias_limit() -> None:
    """Only copies made by aliases count: a big alias-free document (a policy
    of 150,000 teams) is not an alias bomb, however many values it has."""
    teams = "".join(f"  t{i}: {{burst_gpus: 4, weight: 1}}\n" for i in range(100))
    text = "budget: {max_usd_per_hour: 100}\nteams:\n" + teams
    assert len(yamlerrors.parse_document(text, "big.yaml", max_alias_values=50).data["teams"]) == 100

    aliased = "budget: {max_usd_per_hour: 100}\nteams:\n  a: &t {burst_gpus: 4, weight: 1}\n" + "".join(
        f"  t{i}: *t\n" for i in range(20))
    assert len(yamlerrors.parse_document(aliased, "ok.yaml", max_alias_values=60).data["teams"]) == 21
    with pytest.raises(SpecError) as info:
        yamlerrors.parse_document(aliased, "bomb.yaml", max_alias_values=50)
    (issue,) = info.value.issues
    assert str(issue).startswith("bomb.yaml:20:3: teams.t16: aliases copy more than 50 values into the document"), issue


def test_an_error_reached_through_an_alias_is_reported_at_the_alias(tmp_path: Path) -> None:
    path = write(tmp_path, """
        budget: {max_usd_per_hour: 100, max_gpus: 64}
        teams:
          a: &team {guaranteed_gpus: 8, burst_gpus: -1}
          b: *team
    """)
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "3:45: teams.a.burst_gpus: must be greater than or equal to 0 (got -1)",
        "4:3: teams.b.burst_gpus: must be greater than or equal to 0 (got -1) (reached through the alias *team; the "
        "anchor &team is at line 3)",
    ]


def test_a_reading_problem_reached_through_an_alias_is_reported_at_the_alias_too(tmp_path: Path) -> None:
    """Problems found while reading (here a key that is not a string), not by
    validation, also name the alias and its anchor."""
    path = write(tmp_path, """
        budget: {max_usd_per_hour: 100}
        teams:
          a: &t {7: 1, weight: 2}
          b: *t
    """)
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "3:10: teams.a.7: mapping keys must be strings (got 7); quote the key",
        "4:3: teams.b.7: mapping keys must be strings (got 7); quote the key (reached through the alias *t; the "
        "anchor &t is at line 3)",
    ]


def test_a_reading_problem_merged_in_is_reported_at_the_merge_key(tmp_path: Path) -> None:
    """_Converter._mapping looked merged keys up only when they were strings: a key 7 merged in was
    reported at the mapping's first key (5:5, 'weight: 3'), without the merge note."""
    path = write(tmp_path, """
        budget: {max_usd_per_hour: 100}
        teams:
          a: &t {7: 1, weight: 2}
          d:
            weight: 3
            <<: *t
    """)
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "3:10: teams.a.7: mapping keys must be strings (got 7); quote the key",
        "6:5: teams.d.7: mapping keys must be strings (got 7); quote the key (merged in by <<: *t; the anchor &t "
        "is at line 3)",
    ]


def _where(doc: yamlerrors.Document) -> dict:
    """A document's positions as ``path: (key, value, alias)``, each
    position a ``(line, column)`` pair and the alias ``(name, line, column,
    anchor line, anchor column, merged)``."""
    def pair(pos: yamlerrors.Position | None) -> tuple[int, int] | None:
        return None if pos is None else (pos.line, pos.column)

    def alias(via: yamlerrors.Alias | None) -> tuple | None:
        return None if via is None else (via.name, *pair(via.position), *pair(via.anchor), via.merged)

    return {path: (pair(at.key), pair(at.value), alias(at.via)) for path, at in doc.positions.items()}


def test_every_key_value_and_item_is_positioned_where_it_is_written() -> None:
    """An empty value (``a:``, null) is at its key, not on the next line
    ruamel gives; a value on the line after its key (a block list) is where
    it starts; an anchored value is at its ``&``; an alias (``*y``) in a list
    is at the alias, and ``key: *y`` at its key, with everything below at the
    same place; keys merged in by ``<<: *z`` are at that ``<<``."""
    text = ("a:\n"              # 1
            "b: 1\n"            # 2
            "c:\n"              # 3
            "  - x\n"           # 4
            "  - &y {k: 1}\n"   # 5
            "  - *y\n"          # 6
            "d: *y\n"           # 7
            "e: &z\n"           # 8
            "  f: 2\n"          # 9
            "g:\n"              # 10
            "  <<: *z\n"        # 11
            "  h: 3\n")         # 12
    doc = yamlerrors.parse_document(text, "t.yaml")
    y_at_6 = ("y", 6, 5, 5, 5, False)
    y_at_7 = ("y", 7, 1, 5, 5, False)
    assert _where(doc) == {
        (): (None, (1, 1), None),
        ("a",): ((1, 1), (1, 1), None),
        ("b",): ((2, 1), (2, 4), None),
        ("c",): ((3, 1), (4, 3), None),
        ("c", 0): (None, (4, 5), None),
        ("c", 1): (None, (5, 5), None),
        ("c", 1, "k"): ((5, 9), (5, 12), None),
        ("c", 2): (None, (6, 5), y_at_6),
        ("c", 2, "k"): ((6, 5), (6, 5), y_at_6),
        ("d",): ((7, 1), (7, 1), y_at_7),
        ("d", "k"): ((7, 1), (7, 1), y_at_7),
        ("e",): ((8, 1), (8, 4), None),
        ("e", "f"): ((9, 3), (9, 6), None),
        ("g",): ((10, 1), (11, 3), None),
        ("g", "f"): ((11, 3), (11, 3), ("z", 11, 3, 8, 4, True)),
        ("g", "h"): ((12, 3), (12, 6), None),
    }
    assert doc.data == {"a": None, "b": 1, "c": ["x", {"k": 1}, {"k": 1}], "d": {"k": 1}, "e": {"f": 2},
                        "g": {"f": 2, "h": 3}}


def test_a_null_reached_through_an_alias_is_at_its_key_even_after_its_anchor_on_the_same_line() -> None:
    """ruamel gives ``b: *n``'s value the anchor's position (column 5, before
    the key ``b`` at column 11); a null reached through an alias is at its
    key, naming the alias (*n at 1:11) and its anchor (&n at 1:5), as any
    other value reached through an alias."""
    doc = yamlerrors.parse_document("{a: &n ~, b: *n}\n", "t.yaml")
    assert _where(doc) == {
        (): (None, (1, 1), None),
        ("a",): ((1, 2), (1, 5), None),
        ("b",): ((1, 11), (1, 11), ("n", 1, 11, 1, 5, False)),
    }


def test_merged_keys_are_at_the_merge_key_of_the_alias_that_supplied_them_or_where_written_inline() -> None:
    """Merge tables: own keys win over merged ones and earlier sources over
    later ones; a key written in an inline mapping (``<<: [{y: 5}, ...]``) is
    reported where it is written; a key ``*b`` got by its own ``<<: *a`` is
    reported at the ``<<`` that merges ``*b`` (naming b); an alias inside an
    inline merged mapping (``<<: {<<: *a}``) at its own ``<<``; and a mapping
    reached through an alias (``[*b]``) has all its keys, merged ones too, at
    that alias."""
    text = ("a: &a {x: 1, y: 2}\n"                  # 1
            "b: &b\n"                               # 2
            "  <<: *a\n"                            # 3
            "  z: 3\n"                              # 4
            "c:\n"                                  # 5
            "  w: 0\n"                              # 6
            "  <<: [{y: 5, v: 6}, *b]\n"            # 7
            "  x: 7\n"                              # 8
            "d:\n"                                  # 9
            "  - <<: {<<: *a, u: 8}\n"              # 10
            "e: [*b]\n")                            # 11
    doc = yamlerrors.parse_document(text, "t.yaml")
    a_at_3 = ("a", 3, 3, 1, 4, True)
    a_at_10 = ("a", 10, 10, 1, 4, True)
    b_at_11 = ("b", 11, 5, 2, 4, False)
    assert _where(doc) == {
        (): (None, (1, 1), None),
        ("a",): ((1, 1), (1, 4), None),
        ("a", "x"): ((1, 8), (1, 11), None),
        ("a", "y"): ((1, 14), (1, 17), None),
        ("b",): ((2, 1), (2, 4), None),
        ("b", "x"): ((3, 3), (3, 3), a_at_3),
        ("b", "y"): ((3, 3), (3, 3), a_at_3),
        ("b", "z"): ((4, 3), (4, 6), None),
        ("c",): ((5, 1), (6, 3), None),
        ("c", "w"): ((6, 3), (6, 6), None),
        ("c", "y"): ((7, 9), (7, 12), None),
        ("c", "v"): ((7, 15), (7, 18), None),
        ("c", "z"): ((7, 3), (7, 3), ("b", 7, 3, 2, 4, True)),
        ("c", "x"): ((8, 3), (8, 6), None),
        ("d",): ((9, 1), (10, 3), None),
        ("d", 0): (None, (10, 5), None),
        ("d", 0, "x"): ((10, 10), (10, 10), a_at_10),
        ("d", 0, "y"): ((10, 10), (10, 10), a_at_10),
        ("d", 0, "u"): ((10, 18), (10, 21), None),
        ("e",): ((11, 1), (11, 4), None),
        ("e", 0): (None, (11, 5), b_at_11),
        ("e", 0, "x"): ((11, 5), (11, 5), b_at_11),
        ("e", 0, "y"): ((11, 5), (11, 5), b_at_11),
        ("e", 0, "z"): ((11, 5), (11, 5), b_at_11),
    }
    assert doc.data["c"] == {"w": 0, "x": 7, "y": 5, "v": 6, "z": 3}
    assert doc.data["d"] == [{"x": 1, "y": 2, "u": 8}]
    assert doc.data["e"] == [{"x": 1, "y": 2, "z": 3}]


def test_only_merge_keys_merge_and_own_keys_win_over_nested_merges() -> None:
    """A mapping beside a ``<<`` is not merged (c.x is the inline ``<<``'s,
    at 2:21, not n's x at 2:9); a key of the mapping's own wins over one a
    nested ``<<: {<<: *a}`` (f.x) or an inline ``<<: {x: 1}`` (i.x) brings;
    a key that is not a string is reported where it is written, merged in
    inline (g) or not (h), and the keys after it are still read."""
    text = ("a: &a {x: 1}\n"                 # 1
            "c: {n: {x: 9}, <<: {x: 1}}\n"   # 2
            "f: {x: 0, <<: {<<: *a}}\n"      # 3
            "g: {<<: {7: 1}, b: 2}\n"        # 4
            "h: {7: 1, b: 2}\n"              # 5
            "i: {x: 0, <<: {x: 1}}\n")       # 6
    doc = yamlerrors.parse_document(text, "t.yaml")
    assert _where(doc) == {
        (): (None, (1, 1), None),
        ("a",): ((1, 1), (1, 4), None),
        ("a", "x"): ((1, 8), (1, 11), None),
        ("c",): ((2, 1), (2, 4), None),
        ("c", "n"): ((2, 5), (2, 8), None),
        ("c", "n", "x"): ((2, 9), (2, 12), None),
        ("c", "x"): ((2, 21), (2, 24), None),
        ("f",): ((3, 1), (3, 4), None),
        ("f", "x"): ((3, 5), (3, 8), None),
        ("g",): ((4, 1), (4, 4), None),
        ("g", "b"): ((4, 17), (4, 20), None),
        ("h",): ((5, 1), (5, 4), None),
        ("h", "b"): ((5, 11), (5, 14), None),
        ("i",): ((6, 1), (6, 4), None),
        ("i", "x"): ((6, 5), (6, 8), None),
    }
    assert doc.data == {"a": {"x": 1}, "c": {"n": {"x": 9}, "x": 1}, "f": {"x": 0}, "g": {"b": 2}, "h": {"b": 2},
                        "i": {"x": 0}}
    assert [str(i) for i in doc.issues] == [
        "t.yaml:4:10: g.7: mapping keys must be strings (got 7); quote the key",
        "t.yaml:5:5: h.7: mapping keys must be strings (got 7); quote the key",
    ]


def test_a_long_chain_of_merges_is_walked_once_per_mapping() -> None:
    """``<<: [*l39, *l39]`` forty levels deep is 2**40 paths through the
    merges; _merged_keys remembers each mapping's answer, so this reads at
    once. l40.x is at l40's ``<<`` (41:12), naming l39 (anchored at 40:6)."""
    text = "l0: &l0 {x: 1}\n" + "".join(f"l{i}: &l{i} {{<<: [*l{i - 1}, *l{i - 1}]}}\n" for i in range(1, 41))
    doc = yamlerrors.parse_document(text, "t.yaml")
    assert doc.data["l40"] == {"x": 1}
    assert _where(doc)[("l40", "x")] == ((41, 12), (41, 12), ("l39", 41, 12, 40, 6, True))


def test_keys_merged_from_an_anchored_list_of_mappings_are_at_the_merge_key_naming_the_list() -> None:
    """``<<: *s`` of an anchored list (``&s [{x: 1}, *a]``) merges every
    mapping in it through *s: its keys are at that ``<<`` (3:3), naming s and
    its anchor (2:4). x was reported where written in the list (2:9), as if
    merged inline, with no alias named, and y named *a, an alias inside the
    anchored list, not the *s written at the ``<<``."""
    text = ("a: &a {y: 2}\n"
            "s: &s [{x: 1}, *a]\n"
            "c:\n"
            "  <<: *s\n"
            "  q: 1\n")
    doc = yamlerrors.parse_document(text, "t.yaml")
    s_at_4 = ("s", 4, 3, 2, 4, True)
    assert {path: at for path, at in _where(doc).items() if path[:1] == ("c",)} == {
        ("c",): ((3, 1), (4, 3), None),
        ("c", "x"): ((4, 3), (4, 3), s_at_4),
        ("c", "y"): ((4, 3), (4, 3), s_at_4),
        ("c", "q"): ((5, 3), (5, 6), None),
    }
    assert doc.data["c"] == {"x": 1, "y": 2, "q": 1}
    assert str(doc.issue(("c", "x"), "bad")) == "t.yaml:4:3: c.x: bad (merged in by <<: *s; the anchor &s is at line 2)"


def test_merging_a_scalar_is_the_parser_s_error_not_a_crash() -> None:
    with pytest.raises(SpecError) as info:
        yamlerrors.parse_document("a: &s 1\nb:\n  <<: *s\n", "t.yaml")
    (issue,) = info.value.issues
    assert issue.message.startswith("YAML syntax error: expected a mapping or list of mappings for merging, but found "
                                    "scalar"), issue


def test_a_key_merged_into_a_mapping_inside_an_inline_merge_is_at_its_merge_key() -> None:
    """The module docstring: a key merged by ``<<: *name`` is reported at
    that ``<<``, naming the alias. c.n.x comes from the inner ``<<: *a``
    (3:12); it was reported at n's value (3:11) with no alias named, as
    _merge_sites did not walk into inline merge sources."""
    text = ("a: &a {x: 1}\n"
            "c:\n"
            "  <<: {n: {<<: *a, q: 2}}\n")
    doc = yamlerrors.parse_document(text, "t.yaml")
    assert _where(doc) == {
        (): (None, (1, 1), None),
        ("a",): ((1, 1), (1, 4), None),
        ("a", "x"): ((1, 8), (1, 11), None),
        ("c",): ((2, 1), (3, 3), None),
        ("c", "n"): ((3, 8), (3, 11), None),
        ("c", "n", "q"): ((3, 20), (3, 23), None),
        ("c", "n", "x"): ((3, 12), (3, 12), ("a", 3, 12, 1, 4, True)),
    }
    assert doc.data["c"] == {"n": {"x": 1, "q": 2}}
    # two inline merges deep: c.n is written in the inner one, n.x at its << (2:19)
    doc = yamlerrors.parse_document("a: &a {x: 1}\nc: {<<: {<<: {n: {<<: *a}}}}\n", "t.yaml")
    assert _where(doc)[("c", "n", "x")] == ((2, 19), (2, 19), ("a", 2, 19, 1, 4, True))


def test_an_alias_written_in_an_inline_merge_source_is_at_the_alias() -> None:
    """The module docstring: content reached through an alias is reported at
    the alias (at its key for ``key: *name``). ``<<: {n: *a}`` makes c.n an
    alias written at 3:8 (key) / 3:11 (``*a``); it was at the anchor (1:4,
    before its key) and c.n.x at a.x (1:8), naming no alias, as _alias_sites
    did not walk into inline merge sources. A list item alias there
    (``[1, *a]``) is at the ``*`` (2:17)."""
    text = ("a: &a {x: 1}\n"
            "c:\n"
            "  <<: {n: *a, q: 2}\n")
    doc = yamlerrors.parse_document(text, "t.yaml")
    a_at_3 = ("a", 3, 8, 1, 4, False)
    assert _where(doc) == {
        (): (None, (1, 1), None),
        ("a",): ((1, 1), (1, 4), None),
        ("a", "x"): ((1, 8), (1, 11), None),
        ("c",): ((2, 1), (3, 3), None),
        ("c", "n"): ((3, 8), (3, 8), a_at_3),
        ("c", "n", "x"): ((3, 8), (3, 8), a_at_3),
        ("c", "q"): ((3, 15), (3, 18), None),
    }
    assert doc.data["c"] == {"n": {"x": 1}, "q": 2}
    doc = yamlerrors.parse_document("a: &a {x: 1}\nc: {<<: {l: [1, *a]}}\n", "t.yaml")
    a_at_2 = ("a", 2, 17, 1, 4, False)
    assert {path: at for path, at in _where(doc).items() if path[:1] == ("c",)} == {
        ("c",): ((2, 1), (2, 4), None),
        ("c", "l"): ((2, 10), (2, 13), None),
        ("c", "l", 0): (None, (2, 14), None),
        ("c", "l", 1): (None, (2, 17), a_at_2),
        ("c", "l", 1, "x"): ((2, 17), (2, 17), a_at_2),
    }
    assert doc.issue(("c", "l", 1, "x"), "bad").message == \
        "bad (reached through the alias *a; the anchor &a is at line 1)"
    # beside a key of the merging mapping's own
    doc = yamlerrors.parse_document("a: &a {x: 1}\nc: {q: 2, <<: {n: *a}}\n", "t.yaml")
    assert _where(doc)[("c", "n")] == ((2, 16), (2, 16), ("a", 2, 16, 1, 4, False))


def test_an_empty_value_in_an_inline_merge_source_is_at_its_key() -> None:
    """An empty value (``n:``, null) written in a block mapping merged inline
    is at its key (3:5), as one written in the mapping itself: ruamel marks
    it where whatever follows is (the next key, 4:3 or 6:5 past blank
    lines), and the merge table took that mark."""
    doc = yamlerrors.parse_document("c:\n  <<:\n    n:\n  q: 1\n", "t.yaml")
    assert _where(doc) == {
        (): (None, (1, 1), None),
        ("c",): ((1, 1), (2, 3), None),
        ("c", "n"): ((3, 5), (3, 5), None),
        ("c", "q"): ((4, 3), (4, 6), None),
    }
    assert doc.data == {"c": {"n": None, "q": 1}}
    doc = yamlerrors.parse_document("c:\n  <<:\n    n:\n\n\n    m: 2\n", "t.yaml")
    assert _where(doc)[("c", "n")] == ((3, 5), (3, 5), None)
    assert _where(doc)[("c", "m")] == ((6, 5), (6, 8), None)
    # a list on the line after its key is where it starts (4:7), as in the mapping itself
    doc = yamlerrors.parse_document("c:\n  <<:\n    n:\n      - 1\n", "t.yaml")
    assert _where(doc)[("c", "n")] == ((3, 5), (4, 7), None)
    assert _where(doc)[("c", "n", 0)] == (None, (4, 9), None)
    # a null written on its key's line keeps its own place
    doc = yamlerrors.parse_document("c: {<<: {n: ~, m: 1}}\n", "t.yaml")
    assert _where(doc)[("c", "n")] == ((1, 10), (1, 13), None)


def test_a_duplicate_key_in_anchored_content_is_reported_once_at_its_anchor() -> None:
    """_walk_mappings visits aliased content once, at its anchor (the key
    is written there). It walked the document last key first, so it visited
    the content at its last alias: the issue named b.k (l[1].k), the alias's
    path, at the anchor's line, with no alias note."""
    doc = yamlerrors.parse_document("a: &x {k: 1, k: 2}\nb: *x\n", "t.yaml")
    assert [str(i) for i in doc.issues] == [
        "t.yaml:1:14: a.k: duplicate key 'k' (first defined at line 1); a key may appear once per mapping"]
    assert doc.reported == {("a", "k")}
    doc = yamlerrors.parse_document("l:\n- &x {k: 1, k: 2}\n- *x\n", "t.yaml")
    assert [str(i) for i in doc.issues] == [
        "t.yaml:2:13: l[0].k: duplicate key 'k' (first defined at line 2); a key may appear once per mapping"]
    assert doc.reported == {("l", 0, "k")}


def test_duplicate_keys_are_found_before_and_after_content_met_again_through_an_alias() -> None:
    """Meeting content already walked (at an alias) skips it, and the walk
    goes on: the duplicate d is found written before the anchor and after
    the alias."""
    for text, line in [("c: {d: 1, d: 2}\na: &x {k: 1}\nb: *x\n", 1),
                       ("a: &x {k: 1}\nb: *x\nc: {d: 1, d: 2}\n", 3)]:
        doc = yamlerrors.parse_document(text, "t.yaml")
        assert [str(i) for i in doc.issues] == [
            f"t.yaml:{line}:11: c.d: duplicate key 'd' (first defined at line {line}); a key may appear once per "
            "mapping"], text


def test_a_duplicate_key_in_a_mapping_merged_in_inline_is_reported_under_the_merging_mapping() -> None:
    """A mapping written at a ``<<`` (alone, in a list, or two deep) is a
    mapping too: a key twice in it is a duplicate, named by the key it
    becomes (c.x) where the second is written. These were not reported at
    all (the walk skipped ``<<``) and the first value silently won. One in
    content merged through an alias is reported once, at its anchor, and a
    duplicate after ``<<: *a`` as any other."""
    for text, where in [("c: {<<: {x: 1, x: 2}}\n", "1:16"),
                        ("c:\n  <<: [{x: 1, x: 2}]\n", "2:15"),
                        ("c: {<<: {<<: {x: 1, x: 2}}}\n", "1:21")]:
        doc = yamlerrors.parse_document(text, "t.yaml")
        line = where.split(":")[0]
        assert [str(i) for i in doc.issues] == [
            f"t.yaml:{where}: c.x: duplicate key 'x' (first defined at line {line}); a key may appear once per "
            "mapping"], text
        assert doc.reported == {("c", "x")}
        assert doc.data == {"c": {"x": 1}}
    doc = yamlerrors.parse_document("a: &a {x: 1, x: 2}\nc: {<<: *a}\n", "t.yaml")
    assert [str(i) for i in doc.issues] == [
        "t.yaml:1:14: a.x: duplicate key 'x' (first defined at line 1); a key may appear once per mapping"]
    doc = yamlerrors.parse_document("a: &a {k: 1}\nc: {<<: *a, x: 1, x: 2}\n", "t.yaml")
    assert [str(i) for i in doc.issues] == [
        "t.yaml:2:19: c.x: duplicate key 'x' (first defined at line 2); a key may appear once per mapping"]


def test_keys_that_are_not_strings_are_no_duplicates_but_each_mapping_key_issue() -> None:
    """Two equal list keys (``? [a]``) are one key that is not a string, so
    one issue at the first (1:4), not also a duplicate key."""
    doc = yamlerrors.parse_document("{? [a] : 1, ? [a] : 2}\n", "t.yaml")
    assert [str(i) for i in doc.issues] == [
        't.yaml:1:4: ["a list"]: mapping keys must be strings (got a list); quote the key']


def test_a_merge_loop_is_walked_once_not_taken_for_deep_nesting() -> None:
    """``&a {<<: *a}`` merges a mapping into itself: one loop issue at the
    alias, not recursed into until Python's limit ('the document is nested
    too deeply'). (Until 2026-11-28 the parser failed on it, an issue at 1:1
    naming ruamel's AttributeError.)"""
    with pytest.raises(SpecError) as info:
        yamlerrors.parse_document("a: &a {<<: *a, x: 1}\n", "t.yaml")
    (issue,) = info.value.issues
    assert (issue.line, issue.column) == (1, 12)
    assert issue.message.startswith("an alias refers to a value that contains it (a loop)"), issue


def test_a_null_list_item_reached_through_an_alias_is_at_the_alias() -> None:
    """The module docstring: content reached through an alias is reported
    at the alias. ``- *n`` (4:5) of a null anchor was put at the item before
    it (3:5), naming no alias: ruamel gives the anchor's position (1:4),
    earlier than the last item, and _sequence then kept the last item's
    position. The anchor &n is at 1:4."""
    doc = yamlerrors.parse_document("a: &n\nl:\n  - 1\n  - *n\n", "t.yaml")
    assert doc.data == {"a": None, "l": [1, None]}
    assert _where(doc)[("l", 1)] == (None, (4, 5), ("n", 4, 5, 1, 4, False))


def test_a_policy_can_name_every_gpu_model_the_catalog_sells(tmp_path: Path) -> None:
    """The planner buys from the catalog; a model it may buy that the policy
    cannot name (K520, L40 and P4 were refused) cannot be allowed on its own."""
    from providers.catalog import GPU_MEMORY_GIB, instance_types, load_catalog

    sold = sorted({offer.instance_type.gpu_model for offer in load_catalog()})
    assert {"K520", "M60"} <= set(sold)
    path = write(tmp_path, _OK + f"gpu_models: [{', '.join(sold)}]\n")
    assert load_policy(path).gpu_models == tuple(sold)
    every = {t.gpu_model for t in instance_types().values()} | set(GPU_MEMORY_GIB)
    assert set(GPU_MODELS) == every
    assert set(policy_json_schema()["properties"]["gpu_models"]["items"]["enum"]) == every


# --------------------------------------------------------------------------- broken policies

_OK = "budget:\n  max_usd_per_hour: 100\n"

BROKEN = [
    pytest.param(
        """
        budget:
          max_usd_per_hour: 100
        teams:
          ml-research:
            guaranteed_gpus: 8
            wieght: 2
        """,
        6, 5, "teams.ml-research.wieght", "unknown field 'wieght' (did you mean 'weight'?)",
        id="unknown-key",
    ),
    pytest.param(
        """
        budget:
          max_usd_per_hour: 100
        colour: blue
        """,
        3, 1, "colour", "unknown field 'colour'; allowed: providers, regions",
        id="unknown-top-level-key",
    ),
    pytest.param(
        _OK + "markets:\n  on_demand_base_gpus: ten\n",
        4, 24, "markets.on_demand_base_gpus", "must be a valid integer (got 'ten')",
        id="wrong-type-string-for-int",
    ),
    pytest.param(
        _OK + "markets:\n  on_demand_base_gpus: 8.0\n",
        4, 24, "markets.on_demand_base_gpus", "must be an integer written without a decimal point (got 8.0; write 8)",
        id="wrong-type-float-for-int",
    ),
    pytest.param(
        _OK + "priority_classes:\n  batch:\n    value: 1\n    preemptible: yes\ndefault_priority_class: batch\n",
        6, 18, "priority_classes.batch.preemptible", "must be true or false (got 'yes'",
        id="wrong-type-yes-for-bool",
    ),
    pytest.param(
        _OK + "priority_classes:\n  batch: {value: 1, spot_eligible: 1}\ndefault_priority_class: batch\n",
        4, 36, "priority_classes.batch.spot_eligible", "must be a valid boolean (got 1)",
        id="wrong-type-int-for-bool",
    ),
    pytest.param(
        "budget:\n  max_usd_per_hour: -400\n",
        2, 21, "budget.max_usd_per_hour", "must be greater than 0 (got -400)",
        id="negative-budget",
    ),
    pytest.param(
        "budget:\n  max_usd_per_hour: .nan\n",
        2, 21, "budget.max_usd_per_hour", "must be a finite number",
        id="nan-budget",
    ),
    pytest.param(
        "budget:\n  max_gpus: 8\n",
        1, 1, "budget.max_usd_per_hour", "required field is missing",
        id="missing-budget-field-points-at-parent",
    ),
    pytest.param(
        "providers: [aws]\n",
        1, 1, "budget", "required field is missing",
        id="missing-budget",
    ),
    pytest.param(
        "# the fleet's policy\n\nproviders: [aws]\n",
        3, 1, "budget", "required field is missing",
        id="missing-budget-after-comments-points-at-the-first-key",
    ),
    pytest.param(
        _OK + "markets:\n  max_spot_share: 1.5\n",
        4, 19, "markets.max_spot_share", "must be less than or equal to 1 (got 1.5)",
        id="share-above-one",
    ),
    pytest.param(
        _OK + "diversification:\n  max_share_per_zone: 0\n",
        4, 23, "diversification.max_share_per_zone", "must be greater than 0 (got 0)",
        id="zero-zone-share",
    ),
    pytest.param(
        _OK + "providers:\n  - aws\n  - gpc\n",
        5, 5, "providers[1]", "unknown provider 'gpc' (did you mean 'gcp'?); allowed: aws, gcp, azure",
        id="unknown-provider",
    ),
    pytest.param(
        _OK + "providers: [oracle]\n",
        3, 13, "providers[0]", "unknown provider 'oracle'; allowed: aws, gcp, azure",  # no near name: no hint
        id="unknown-provider-without-a-hint",
    ),
    pytest.param(
        _OK + "gpu_models: [A100-80GB, a100-40gb]\n",
        3, 25, "gpu_models[1]", "unknown GPU model 'a100-40gb' (did you mean 'A100-40GB'?); allowed: A10, A100-40GB,",
        id="unknown-gpu-model",
    ),
    pytest.param(
        _OK + "gpu_models: [A100]\n",
        3, 14, "gpu_models[0]", "unknown GPU model 'A100' (did you mean 'A100-40GB'?)",  # not 'A10'
        id="gpu-model-prefix",
    ),
    pytest.param(
        _OK + "regions: [us-east-1, us-east-1]\n",
        3, 22, "regions[1]", "'us-east-1' is listed twice (first at line 3)",
        id="duplicate-region",
    ),
    pytest.param(
        """
        markets:
          on_demand_base_gpus: 32
        budget:
          max_usd_per_hour: 100
          max_gpus: 16
        """,
        2, 24, "markets.on_demand_base_gpus", "on_demand_base_gpus 32 is above budget.max_gpus 16",
        id="on-demand-base-above-max-gpus",
    ),
    pytest.param(
        _OK + "teams:\n  ml-research:\n    guaranteed_gpus: 40\n    burst_gpus: 20\n",
        5, 22, "teams.ml-research.guaranteed_gpus", "guaranteed_gpus 40 is above burst_gpus 20",
        id="guaranteed-above-burst",
    ),
    pytest.param(
        """
        budget:
          max_usd_per_hour: 100
          max_gpus: 16
        teams:
          a: {guaranteed_gpus: 10}
          b: {guaranteed_gpus: 10}
        """,
        4, 1, "teams", "guaranteed GPUs add up to 20 (a 10, b 10), above budget.max_gpus 16",
        id="guarantees-above-max-gpus",
    ),
    pytest.param(
        """
        budget:
          max_usd_per_hour: 100
          max_gpus: 4
        teams:
          b: {guaranteed_gpus: 3}
          c: {burst_gpus: 8}
          a: {guaranteed_gpus: 2}
        """,
        4, 1, "teams", "guaranteed GPUs add up to 5 (a 2, b 3), above budget.max_gpus 4:",
        id="guarantees-above-max-gpus-name-the-teams-with-a-guarantee-by-name",
    ),
    pytest.param(
        _OK + "priority_classes:\n  batch: {value: 1}\ndefault_priority_class: prod\n",
        5, 25, "default_priority_class", "default_priority_class 'prod' is not one of the priority_classes (batch)",
        id="unknown-default-class",
    ),
    pytest.param(
        _OK + "priority_classes:\n  batch: {value: 1}\n",
        3, 1, "default_priority_class", "default_priority_class 'default' is not one of the priority_classes",
        id="default-class-absent-points-at-classes",
    ),
    pytest.param(
        _OK + "teams:\n  \"ml research\": {}\n",
        4, 3, 'teams["ml research"]', "invalid name 'ml research'",
        id="bad-team-name",
    ),
    pytest.param(
        _OK + "teams:\n  7: {}\n",
        4, 3, "teams.7", "mapping keys must be strings (got 7)",
        id="non-string-key",
    ),
    pytest.param(
        _OK + "scaling:\n  scale_down_cooldown_minutes: 5e9\n",
        4, 32, "scaling.scale_down_cooldown_minutes", "less than or equal to 525600",
        id="duration-beyond-a-year",  # crashed plan and reconcile with an OverflowError before
    ),
    pytest.param(
        _OK + "scaling: [1, 2]\n",
        3, 10, "scaling", "must be a mapping (got a list)",
        id="section-not-a-mapping",
    ),
    pytest.param(
        _OK + "providers: aws\n",
        3, 12, "providers", "must be a list (got 'aws')",
        id="scalar-instead-of-list",
    ),
    pytest.param(
        "budget:\n  max_usd_per_hour: [100\n",
        3, 1, "", "YAML syntax error: expected ',' or ']'",
        id="yaml-syntax-error",
    ),
    pytest.param(
        "budget:\n\tmax_usd_per_hour: 100\n",
        2, 1, "", "YAML syntax error",
        id="tab-indentation",
    ),
    pytest.param("", 1, 1, "", "file is empty", id="empty-file"),
    pytest.param("# only a comment\n\n", 1, 1, "", "file is empty", id="comments-only"),
    pytest.param("- aws\n- gcp\n", 1, 1, "", "a policy must be a mapping", id="top-level-list"),
    pytest.param("just words\n", 1, 1, "", "a policy must be a mapping", id="top-level-scalar"),
    pytest.param(
        "budget:\n  max_usd_per_hour: 100\n  max_usd_per_hour: 200\n",
        3, 3, "budget.max_usd_per_hour", "duplicate key 'max_usd_per_hour' (first defined at line 2)",
        id="duplicate-key",
    ),
    pytest.param(
        _OK + "teams: !custom {}\n",
        3, 8, "teams", "unsupported YAML tag '!custom'",
        id="unknown-tag",
    ),
    pytest.param(
        "!custom\n" + _OK,
        1, 1, "", "unsupported YAML tag '!custom'",
        # spec_from_document's mapping check added a second issue, '(root): a policy must be a mapping of
        # sections', for the null the tagged document was read as
        id="unknown-tag-on-the-document",
    ),
    pytest.param(
        _OK + "teams: &t\n  a: *t\n",
        # ruamel builds a self-referencing alias as null, which read as "must be a mapping (got null)"
        # at the key (4:3) until 2026-11-28; now it is a loop, at the alias
        4, 6, "teams.a", "an alias refers to a value that contains it (a loop): *t is inside &t (line 3)",
        id="recursive-alias",
    ),
]


@pytest.mark.parametrize(("text", "line", "column", "field_path", "message"), BROKEN)
def test_broken_policy_is_reported_at_the_right_place(
    tmp_path: Path, text: str, line: int, column: int, field_path: str, message: str
) -> None:
    path = write(tmp_path, text)
    issues = issues_of(path)
    assert len(issues) == 1, "\n".join(map(str, issues))
    issue = issues[0]
    assert (issue.file, issue.line, issue.column, issue.field_path) == (str(path), line, column, field_path)
    assert message in issue.message
    rendered = f"{path}:{line}:{column}: {field_path or '(root)'}: "
    assert str(issue).startswith(rendered)


# Every kind of name or id checked by a pattern, in the example policy: the
# text to change, the name or id in it, the field path (the parent's, for a
# mapping key) and the start of the message. Python's ``$`` also matches
# before a final newline, so each of them accepted "NAME\\n".
_AZURE_SUBNET = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/network/providers/"
                 "Microsoft.Network/virtualNetworks/ml/subnets/gpu")
TRAILING_NEWLINE = [
    pytest.param("  ml-product:", "ml-product", "teams", "invalid name", id="team"),
    pytest.param("  production:", "production", "priority_classes", "invalid name",
                 id="priority-class"),
    pytest.param("default_priority_class: batch", "batch", "default_priority_class", "invalid name",
                 id="default-priority-class"),
    pytest.param("regions: [us-central1]", "us-central1", "infrastructure.gcp.regions[0]", "invalid region",
                 id="region"),
    pytest.param("    us-east-1:", "us-east-1", "infrastructure.aws", "invalid region",
                 id="region-key"),
    pytest.param("cluster: ml-platform", "ml-platform", "infrastructure.cluster", "invalid cluster name",
                 id="cluster"),
    pytest.param("controller_url: http://10.0.0.5:9109", "http://10.0.0.5:9109", "infrastructure.controller_url",
                 "invalid controller URL", id="controller-url"),
    pytest.param("image_id: ami-0123456789abcdef0", "ami-0123456789abcdef0", 'infrastructure.aws.us-east-1.image_id',
                 "invalid AMI id", id="ami"),
    pytest.param("subnet_ids: [subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa1",
                 "infrastructure.aws.us-east-1.subnet_ids[0]", "invalid subnet id", id="subnet"),
    pytest.param("security_group_ids: [sg-0ccccccccccccccc3]", "sg-0ccccccccccccccc3",
                 "infrastructure.aws.us-east-1.security_group_ids[0]", "invalid security group id",
                 id="security-group"),
    pytest.param("project: ml-platform-prod", "ml-platform-prod", "infrastructure.gcp.project",
                 "invalid GCP project id", id="gcp-project"),
    pytest.param("network: global/networks/default", "global/networks/default", "infrastructure.gcp.network",
                 "invalid GCP resource path", id="gcp-path"),
    pytest.param("service_account_email: fleetctl-nodes@ml-platform-prod.iam.gserviceaccount.com",
                 "fleetctl-nodes@ml-platform-prod.iam.gserviceaccount.com",
                 "infrastructure.gcp.service_account_email", "invalid service account email", id="service-account"),
    pytest.param("subscription_id: 00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000",
                 "infrastructure.azure.subscription_id", "invalid subscription id", id="azure-subscription"),
    pytest.param("resource_group: fleetctl-ml-platform", "fleetctl-ml-platform",
                 "infrastructure.azure.resource_group", "invalid resource group", id="azure-resource-group"),
    pytest.param("admin_ssh_public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyForTheExamplePolicyOnly "
                 "fleetctl", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyForTheExamplePolicyOnly fleetctl",
                 "infrastructure.azure.admin_ssh_public_key", "invalid SSH public key", id="ssh-key"),
    pytest.param(f"subnet_id: {_AZURE_SUBNET}", _AZURE_SUBNET, "infrastructure.azure.regions.eastus.subnet_id",
                 "invalid Azure resource id", id="azure-resource-id"),
]


def integer_fields(schema: dict) -> list[tuple[str, ...]]:
    """The paths of every field a JSON Schema types as integer; ``*`` stands
    for any name (``teams.*.guaranteed_gpus``)."""
    defs = schema.get("$defs", {})
    found: list[tuple[str, ...]] = []

    def walk(node: dict, path: tuple[str, ...]) -> None:
        if "$ref" in node:
            return walk(defs[node["$ref"].rsplit("/", 1)[-1]], path)
        if node.get("type") == "integer" or any(alt.get("type") == "integer" for alt in node.get("anyOf", [])):
            found.append(path)
        for name, prop in node.get("properties", {}).items():
            walk(prop, path + (name,))
        for prop in node.get("patternProperties", {}).values():
            walk(prop, path + ("*",))
        for alt in node.get("anyOf", []):
            walk(alt, path)

    walk(schema, ())
    return found


POLICY_INTEGERS = integer_fields(policy_json_schema())


def test_the_schema_types_every_count_as_an_integer() -> None:
    assert {".".join(p) for p in POLICY_INTEGERS} >= {
        "markets.on_demand_base_gpus", "budget.max_gpus", "teams.*.guaranteed_gpus", "teams.*.burst_gpus",
        "priority_classes.*.value", "diversification.min_distinct_offers"}


@pytest.mark.parametrize(("value", "message"), [
    ("8.0", "must be an integer written without a decimal point (got 8.0; write 8)"),
    ("8.5", "must be an integer (got 8.5)"),
])
@pytest.mark.parametrize("field", POLICY_INTEGERS, ids=[".".join(p) for p in POLICY_INTEGERS])
def test_every_integer_field_of_the_schema_refuses_a_decimal(
    tmp_path: Path, field: tuple[str, ...], value: str, message: str
) -> None:
    """The schema says "integer", and a JSON Schema validator takes 8.0 for
    one; the loader refuses 8.0 (and 8.5) for every such field, saying where
    and why, and the schema's description says so for editors."""
    keys = [("a" if k == "*" else k) for k in field]
    lines = [] if keys[0] == "budget" else ["budget: {max_usd_per_hour: 100}"]
    for depth, key in enumerate(keys[:-1]):
        lines.append("  " * depth + f"{key}:")
        if key == "budget":
            lines.append("  max_usd_per_hour: 100")
    lines.append("  " * (len(keys) - 1) + f"{keys[-1]}: {value}")
    path = tmp_path / "policy.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    column = 2 * (len(keys) - 1) + len(keys[-1]) + 3
    assert [str(i) for i in issues_of(path)] == [f"{path}:{len(lines)}:{column}: {'.'.join(keys)}: {message}"]
    schema = policy_json_schema()
    node: dict = schema
    for key in field:
        node = node["properties"][key] if key != "*" else node["patternProperties"]
        if key == "*":
            node = next(iter(node.values()))
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    assert node["description"].endswith("Written without a decimal point: 8, not 8.0."), node


@pytest.mark.parametrize(("text", "value", "field_path", "message"), TRAILING_NEWLINE)
def test_a_trailing_newline_in_a_name_or_id_is_refused(
    tmp_path: Path, text: str, value: str, field_path: str, message: str
) -> None:
    original = EXAMPLE_POLICY.read_text()
    assert original.count(text) == 1 and text.count(value) == 1, text
    before = original[: original.index(text) + text.index(value)]
    line = before.count("\n") + 1
    column = len(before) - before.rfind("\n")
    # in a double-quoted YAML scalar, \n is the newline character
    path = tmp_path / "policy.yaml"
    path.write_text(original.replace(text, text.replace(value, f'"{value}\\n"')), encoding="utf-8")
    issues = issues_of(path)
    assert len(issues) == 1, "\n".join(map(str, issues))
    (issue,) = issues
    assert (issue.line, issue.column) == (line, column), str(issue)
    if text.endswith(":"):
        # A key's issue is at the key, under its parent, the key quoted with its
        # newline escaped (the message stays one line; it broke in two before).
        assert issue.field_path.startswith(field_path) and issue.field_path.endswith('\\n"]'), str(issue)
        assert "\n" not in str(issue), str(issue)
    else:
        assert issue.field_path == field_path, str(issue)
    assert issue.message.startswith(message), issue.message
    assert str(issue).startswith(f"{path}:{line}:{column}: ")


@pytest.mark.parametrize(
    ("raw", "line", "column", "message"),
    [
        pytest.param(b"\xff\xfeb\x00u\x00", 1, 1, "not UTF-8", id="utf16"),
        pytest.param(b"budget:\n  max_usd_per_hour: 1\xe9\n", 2, 22, "not UTF-8", id="latin1-byte"),
        pytest.param(b"\x7fELF\x02\x01\x01\x00\x00", 1, 1, "unacceptable character", id="binary"),
        pytest.param(b"budget: \x00\n", 1, 9, "unacceptable character #x0000", id="nul-byte"),
        # columns count characters, not bytes (each \xc3\xa9 is one character: e-acute)
        pytest.param(b"budget: {max_usd_per_hour: 1}\n# \xc3\xa9\xc3\xa9 \xff\n", 2, 6,
                     "file is not UTF-8 text (byte 0xff); save it as UTF-8", id="bad-byte-after-two-byte-characters"),
        pytest.param(b"a: 1\nb: \xc3\xa9\xc3\xa9\x00\n", 2, 6, "unacceptable character #x0000",
                     id="nul-after-two-byte-characters"),
        pytest.param(b"\xef\xbb\xbfa: 1\n\xff", 2, 1, "file is not UTF-8 text (byte 0xff)",
                     id="bad-byte-after-a-byte-order-mark"),
        pytest.param(b"\xef\xbb\xbfa: \xff\n", 1, 4, "file is not UTF-8 text (byte 0xff)",
                     id="bad-byte-on-the-line-of-a-byte-order-mark"),  # the mark is no column
        pytest.param(b"a: 1\r\nb: \xc3\xa9\x01\n", 2, 5, "unacceptable character #x0001", id="control-character-after-crlf"),
    ],
)
def test_bytes_that_are_not_yaml(tmp_path: Path, raw: bytes, line: int, column: int, message: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(raw)
    (issue,) = issues_of(path)
    assert (issue.line, issue.column, issue.field_path) == (line, column, "")
    assert message in issue.message


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("budget:\n  max_usd_per_hour: [100\n",
                 "3:1: (root): YAML syntax error: expected ',' or ']', but got '<stream end>' (while parsing a flow "
                 "sequence at line 2, column 21)", id="with-where-the-context-starts"),
    pytest.param("budget: {max_usd_per_hour: 1}\nteams: b: c\n",
                 "2:9: (root): YAML syntax error: mapping values are not allowed here", id="without-a-context"),
    pytest.param("budget: {max_usd_per_hour: 1}\nteams: *nope\n",
                 "2:8: (root): YAML syntax error: found undefined alias 'nope'", id="undefined-alias"),
])
def test_a_yaml_syntax_error_says_where_and_what(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    (issue,) = issues_of(path)
    assert str(issue) == f"{path}:{expected}"


def test_a_null_document_and_one_nested_past_the_parser_are_one_issue_at_the_start() -> None:
    """An empty file, a null document, and one nested deeper than ruamel's
    composer can recurse (600 levels: it fails at about 330) are one issue
    each, at 1:1."""
    for text, message in [("# only a comment\n", "file is empty"),
                          ("null\n", "the document is null; expected content"),
                          ("--- ~\n", "the document is null; expected content"),
                          ("[" * 600 + "]" * 600, "the document is nested too deeply")]:
        with pytest.raises(SpecError) as info:
            yamlerrors.parse_document(text, "t.yaml")
        assert [str(i) for i in info.value.issues] == [f"t.yaml:1:1: (root): {message}"]


@pytest.mark.parametrize(("error", "message"), [
    pytest.param(YAMLError("bad\n  thing"), "YAML error: bad thing", id="a-yaml-error-without-a-mark"),
    pytest.param(ValueError("odd\nvalue"), "could not parse the file as YAML (ValueError: odd value)",
                 id="any-other-exception"),
])
def test_a_parser_failure_is_an_issue_at_the_start_not_a_traceback(monkeypatch, error, message) -> None:
    """The module's promise: callers never see a parser traceback. ruamel's
    errors without a mark, and anything else the parser raises (a bug on
    hostile input), are one issue at 1:1, on one line."""
    class Failing:
        def compose(self, text: str) -> None:
            raise error

    monkeypatch.setattr(yamlerrors, "_yaml", Failing)
    with pytest.raises(SpecError) as info:
        yamlerrors.parse_document("a: 1\n", "t.yaml")
    assert [str(i) for i in info.value.issues] == [f"t.yaml:1:1: (root): {message}"]


def test_validation_errors_at_a_duplicate_key_are_left_to_its_duplicate_issue() -> None:
    """The first of two values wins; its validation error (n is not an
    integer) is at a path reported while reading, so dropped: one mistake,
    one issue."""
    from pydantic import BaseModel

    class Model(BaseModel):
        n: int
        m: int

    doc = yamlerrors.parse_document("n: x\nn: 2\nm: y\n", "t.yaml")
    assert doc.data == {"n": "x", "m": "y"}
    assert [str(i) for i in doc.issues] == [
        "t.yaml:2:1: n: duplicate key 'n' (first defined at line 1); a key may appear once per mapping"]
    instance, issues = doc.validate(Model, doc.data)
    assert instance is None
    assert [str(i) for i in issues] == [
        "t.yaml:3:4: m: must be a valid integer, unable to parse string as an integer (got 'y')"]


def test_unreadable_files(tmp_path: Path) -> None:
    (missing,) = issues_of(tmp_path / "nope.yaml")
    assert str(missing).startswith(f"{tmp_path / 'nope.yaml'}:1:1: (root): cannot read the file")
    (directory,) = issues_of(tmp_path)
    assert "cannot read the file" in directory.message


def test_utf8_byte_order_mark_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + _OK.encode())
    assert load_policy(path).max_usd_per_hour == 100


def test_several_errors_in_one_file_are_all_reported_in_line_order(tmp_path: Path) -> None:
    path = write(tmp_path, """
        providers: [aws, oracle]
        markets:
          max_spot_share: lots
        budget:
          max_usd_per_hour: -1
          max_gpus: 0
        teams:
          ml-research:
            guaranteed_gpus: -2
            colour: red
        scaling:
          idle_timeout_minutes: true
    """)
    rendered = [str(i) for i in issues_of(path)]
    assert [r.split(": ")[0] for r in rendered] == [
        f"{path}:1:18",
        f"{path}:3:19",
        f"{path}:5:21",
        f"{path}:6:13",
        f"{path}:9:22",
        f"{path}:10:5",
        f"{path}:12:25",
    ]
    assert [r.split(": ")[1] for r in rendered] == [
        "providers[1]",
        "markets.max_spot_share",
        "budget.max_usd_per_hour",
        "budget.max_gpus",
        "teams.ml-research.guaranteed_gpus",
        "teams.ml-research.colour",
        "scaling.idle_timeout_minutes",
    ]


def test_several_contradictions_are_all_reported(tmp_path: Path) -> None:
    path = write(tmp_path, """
        markets:
          on_demand_base_gpus: 20
        budget:
          max_usd_per_hour: 100
          max_gpus: 16
        teams:
          a:
            guaranteed_gpus: 12
            burst_gpus: 4
          b:
            guaranteed_gpus: 12
        priority_classes:
          batch: {value: 1}
        default_priority_class: urgent
    """)
    found = [(i.line, i.column, i.field_path) for i in issues_of(path)]
    assert found == [
        (2, 24, "markets.on_demand_base_gpus"),
        (6, 1, "teams"),
        (8, 22, "teams.a.guaranteed_gpus"),
        (14, 25, "default_priority_class"),
    ]


_INFRA = """
    infrastructure:
      cluster: ml-platform
      controller_url: http://10.0.0.5:9109
      aws:
        us-east-1: {image_id: ami-0123456789abcdef0, subnet_ids: [subnet-0aaaaaaaaaaaaaaa1]}
        us-west-2: {image_id: ami-0123456789abcdef0, subnet_ids: [subnet-0aaaaaaaaaaaaaaa1]}
      gcp:
        project: ml-platform-prod
        regions: [us-east-1, us-central1]
        image: projects/x/global/images/family/f
      azure:
        subscription_id: 00000000-0000-0000-0000-000000000000
        resource_group: rg
        admin_ssh_public_key: ssh-ed25519 AAAA
        regions:
          eastus: {subnet_id: /subscriptions/s, image_id: /subscriptions/i}
"""


def test_infrastructure_outside_the_allowed_providers_and_regions_is_reported_where_it_is_declared(
    tmp_path: Path,
) -> None:
    """A cloud's pools declared while providers leaves the cloud out are
    reported at the cloud's key; a region outside regions at the region (the
    key of an aws or azure region, the item of gcp's list)."""
    path = write(tmp_path, "budget: {max_usd_per_hour: 100}\nproviders: [aws]\nregions: [us-east-1]\n"
                 + textwrap.dedent(_INFRA).lstrip("\n"))
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "9:5: infrastructure.aws.us-west-2: region 'us-west-2' is not in regions (us-east-1)",
        "10:3: infrastructure.gcp: gcp pools are declared but 'gcp' is not in providers (aws)",
        "12:26: infrastructure.gcp.regions[1]: region 'us-central1' is not in regions (us-east-1)",
        "14:3: infrastructure.azure: azure pools are declared but 'azure' is not in providers (aws)",
        "19:7: infrastructure.azure.regions.eastus: region 'eastus' is not in regions (us-east-1)",
    ]


@pytest.mark.parametrize("pins", [
    pytest.param("", id="no-pins"),
    pytest.param("providers: [aws, gcp, azure]\nregions: [eastus, us-central1, us-east-1, us-west-2]\n",
                 id="every-cloud-and-region-allowed"),
])
def test_infrastructure_inside_the_allowed_providers_and_regions_is_fine(tmp_path: Path, pins: str) -> None:
    """Empty allow-lists allow any cloud and region."""
    policy = load_policy(write(tmp_path, "budget: {max_usd_per_hour: 100}\n" + pins
                               + textwrap.dedent(_INFRA).lstrip("\n")))
    assert policy.infrastructure is not None
    assert [r.region for r in policy.infrastructure.aws] == ["us-east-1", "us-west-2"]


def test_a_bad_gcp_subnetwork_is_one_issue_at_its_value(tmp_path: Path) -> None:
    """subnetwork was typed GcpPath | Literal[''], and pydantic names the union's members in each error's
    location: two issues at the key, with paths ending ["function-after[check(), str]"] and ["literal['']"]."""
    path = write(tmp_path, """
        budget: {max_usd_per_hour: 100}
        infrastructure:
          cluster: ml-platform
          controller_url: http://10.0.0.5:9109
          gcp:
            project: ml-platform-prod
            regions: [us-central1]
            image: projects/x/global/images/family/f
            subnetwork: "bad subnet"
    """)
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "9:17: infrastructure.gcp.subnetwork: invalid GCP resource path 'bad subnet': empty (the network's auto "
        "subnet) or a path such as regions/R/subnetworks/S",
    ]
    empty = path.read_text().replace('subnetwork: "bad subnet"', 'subnetwork: ""')
    path.write_text(empty)
    assert load_policy(path).infrastructure.gcp.subnetwork == ""  # empty: the network's auto subnet


def test_only_declared_clouds_need_to_be_allowed(tmp_path: Path) -> None:
    """A policy allowing aws alone may declare aws pools: gcp and azure,
    absent, need nothing."""
    policy = load_policy(write(tmp_path, """
        budget: {max_usd_per_hour: 100}
        providers: [aws]
        regions: [us-east-1]
        infrastructure:
          cluster: ml-platform
          controller_url: http://10.0.0.5:9109
          aws:
            us-east-1: {image_id: ami-0123456789abcdef0, subnet_ids: [subnet-0aaaaaaaaaaaaaaa1]}
    """))
    assert policy.infrastructure is not None and policy.infrastructure.gcp is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(_OK + "markets:\n  max_spot_share: 0\n  default_spot_interruption_probability_per_hour: 0.2\n",
                     id="no-spot-with-probability"),
        pytest.param(_OK + "diversification:\n  max_share_per_instance_type: 1\n  min_distinct_offers: 4\n",
                     id="share-one-many-offers"),
        pytest.param(_OK + "diversification:\n  max_share_per_instance_type: 0.2\n  min_distinct_offers: 1\n",
                     id="small-share-one-offer"),
        pytest.param("budget: {max_usd_per_hour: 1, max_gpus: 8}\nteams: {a: {guaranteed_gpus: 8, burst_gpus: 64}}\n",
                     id="burst-above-max-gpus"),
        pytest.param("budget: {max_usd_per_hour: 1, max_gpus: 8}\nmarkets: {on_demand_base_gpus: 8}\n",
                     id="base-equal-to-max"),
        pytest.param(_OK + "teams: {a: {guaranteed_gpus: 8, burst_gpus: 8}}\n", id="guaranteed-equal-to-burst"),
    ],
)
def test_settings_that_look_odd_but_are_not_contradictions(tmp_path: Path, text: str) -> None:
    assert isinstance(load_policy(write(tmp_path, text)), model.Policy)


# --------------------------------------------------------------------------- never anything but SpecError

TOP_KEYS = ["providers", "regions", "gpu_models", "markets", "diversification", "budget", "teams",
            "priority_classes", "default_priority_class", "scaling", "interruptions"]
SECTION_KEYS = {
    "markets": ["max_spot_share", "on_demand_base_gpus", "default_spot_interruption_probability_per_hour"],
    "diversification": ["max_share_per_instance_type", "max_share_per_zone", "min_distinct_offers"],
    "budget": ["max_usd_per_hour", "max_gpus"],
    "scaling": ["idle_timeout_minutes", "scale_up_cooldown_seconds", "scale_down_cooldown_minutes"],
    "interruptions": ["checkpoint_grace_seconds", "max_interruptions_before_on_demand", "reclaimed_offer_ttl_minutes"],
}
TEAM_KEYS = ["guaranteed_gpus", "burst_gpus", "weight"]
CLASS_KEYS = ["value", "preemptible", "spot_eligible"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=200),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from([*GPU_MODELS, *PROVIDERS, "us-east-1", "batch", "yes", "ten", "-1", "1e400", "~"]),
)
garbage = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6) | st.integers(), children, max_size=4),
    max_leaves=12,
)


def mixed_keys(valid: list[str]) -> st.SearchStrategy:
    return st.sampled_from(valid) | st.text(max_size=8)


def section(valid: list[str]) -> st.SearchStrategy:
    return st.dictionaries(mixed_keys(valid), scalars | garbage, max_size=len(valid) + 1) | garbage


names = st.sampled_from(["ml-research", "ml-product", "batch", "production", "default"]) | st.text(max_size=8)
sections = {
    **{name: section(keys) for name, keys in SECTION_KEYS.items()},
    "teams": st.dictionaries(names, section(TEAM_KEYS), max_size=3) | garbage,
    "priority_classes": st.dictionaries(names, section(CLASS_KEYS), max_size=3) | garbage,
    "providers": st.lists(st.sampled_from(PROVIDERS) | scalars, max_size=4) | garbage,
    "regions": st.lists(st.sampled_from(["us-east-1", "eastus", "Bad Region"]) | scalars, max_size=4) | garbage,
    "gpu_models": st.lists(st.sampled_from(GPU_MODELS) | scalars, max_size=4) | garbage,
    "default_priority_class": names | garbage,
}


@st.composite
def policy_documents(draw: st.DrawFn) -> object:
    doc = {}
    for key in draw(st.lists(st.sampled_from(TOP_KEYS), unique=True, max_size=len(TOP_KEYS))):
        doc[key] = draw(sections[key])
    if draw(st.booleans()):
        doc[draw(st.text(max_size=8))] = draw(garbage)
    return doc if draw(st.integers(0, 9)) else draw(garbage)


def corrupt(draw: st.DrawFn, document: object) -> object:
    """Maybe replace one value somewhere in ``document`` with garbage."""
    slots: list[tuple[object, object]] = []

    def collect(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                slots.append((node, key))
                collect(value)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                slots.append((node, index))
                collect(value)

    collect(document)
    if slots and draw(st.booleans()):
        container, key = draw(st.sampled_from(slots))
        container[key] = draw(garbage)  # type: ignore[index]
    return document


fractions = st.floats(min_value=0, max_value=1)
counts = st.integers(min_value=0, max_value=200)


@st.composite
def near_valid_policies(draw: st.DrawFn) -> object:
    """Policies that are valid or one value away from valid, so the
    conversion and the cross-field rules are exercised too."""
    classes = draw(st.dictionaries(
        st.sampled_from(["batch", "production", "default"]),
        st.fixed_dictionaries({"value": st.integers(-10, 1000)},
                              optional={"preemptible": st.booleans(), "spot_eligible": st.booleans()}),
        min_size=1, max_size=3,
    ))
    document = draw(st.fixed_dictionaries(
        {"budget": st.fixed_dictionaries({"max_usd_per_hour": st.floats(min_value=0.01, max_value=1000)},
                                         optional={"max_gpus": st.none() | st.integers(1, 200)})},
        optional={
            "providers": st.lists(st.sampled_from(PROVIDERS), max_size=3),
            "regions": st.lists(st.sampled_from(["us-east-1", "us-central1", "eastus"]), max_size=3),
            "gpu_models": st.lists(st.sampled_from(GPU_MODELS), max_size=4),
            "markets": st.fixed_dictionaries({}, optional={
                "max_spot_share": fractions, "on_demand_base_gpus": counts,
                "default_spot_interruption_probability_per_hour": fractions}),
            "diversification": st.fixed_dictionaries({}, optional={
                "max_share_per_instance_type": st.floats(min_value=0.01, max_value=1),
                "max_share_per_zone": st.floats(min_value=0.01, max_value=1),
                "min_distinct_offers": st.integers(1, 10)}),
            "teams": st.dictionaries(
                st.sampled_from(["ml-research", "ml-product", "infra"]),
                st.fixed_dictionaries({}, optional={"guaranteed_gpus": counts,
                                                    "burst_gpus": st.none() | counts,
                                                    "weight": st.floats(min_value=0.1, max_value=10)}),
                max_size=3),
            "priority_classes": st.just(classes),
            "default_priority_class": st.sampled_from([*classes, "default"]),
            "scaling": st.fixed_dictionaries({}, optional={k: st.floats(0, 600) for k in SECTION_KEYS["scaling"]}),
            "interruptions": st.fixed_dictionaries({}, optional={
                "checkpoint_grace_seconds": st.floats(0, 600),
                "max_interruptions_before_on_demand": st.integers(0, 5),
                "reclaimed_offer_ttl_minutes": st.floats(0, 600)}),
        },
    ))
    return corrupt(draw, document)


def dump(document: object, as_json: bool) -> str:
    if as_json:
        return json.dumps(document, default=str)
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(document, out)
    return out.getvalue()


EXAMPLE_TEXT = EXAMPLE_POLICY.read_text()
SNIPPETS = [":", "- ", "\t", "[", "]", "{", "}", "&a ", "*a", "*b", "!!str ", "!x ", "'", '"', "\n  ", "---\n",
            "<<: *a", "? ", "%YAML 1.1\n", "\x00", "\ufeff", "\u2028", ": -1", ": .nan", ": 1e999"]


@st.composite
def mutated_text(draw: st.DrawFn, base: str) -> str:
    text = base
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        text = text[:i] + draw(st.text(max_size=8) | st.sampled_from(SNIPPETS)) + text[j:]
    return text


def line_breaks(text: str) -> int:
    return sum(text.count(c) for c in "\n\r\x85\u2028\u2029")


def check_policy_file(path: Path, text: str) -> None:
    try:
        result = load_policy(path)
    except SpecError as exc:
        assert exc.issues
        for issue in exc.issues:
            assert issue.file == str(path)
            assert 1 <= issue.line <= line_breaks(text) + 1, str(issue)
            assert issue.column >= 1
            assert issue.message
            assert str(issue).startswith(f"{path}:{issue.line}:{issue.column}: ")
    else:
        assert isinstance(result, model.Policy)


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("policy-fuzz") / "policy.yaml"


@SETTINGS
@given(document=policy_documents() | near_valid_policies(), as_json=st.booleans())
def test_random_documents_give_a_policy_or_spec_error(scratch: Path, document: object, as_json: bool) -> None:
    text = dump(document, as_json)
    scratch.write_text(text, encoding="utf-8")
    check_policy_file(scratch, text)


@SETTINGS
@given(text=mutated_text(EXAMPLE_TEXT) | st.text(max_size=200))
def test_malformed_text_gives_a_policy_or_spec_error(scratch: Path, text: str) -> None:
    scratch.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    check_policy_file(scratch, text)


@SETTINGS
@given(raw=st.binary(max_size=300) | mutated_text(EXAMPLE_TEXT).map(lambda t: t.encode("utf-8")[:-7] + b"\xc3"))
def test_random_bytes_give_a_policy_or_spec_error(scratch: Path, raw: bytes) -> None:
    scratch.write_bytes(raw)
    check_policy_file(scratch, raw.decode("utf-8", errors="replace"))


def test_committed_schema_is_current():
    """policies/schema.json is what `fleetctl policy schema` writes; regenerate it after a policy change."""
    import json
    from pathlib import Path

    from fleetctl.policy import policy_json_schema

    committed = json.loads((Path(__file__).resolve().parents[1] / "policies" / "schema.json").read_text())
    assert committed == json.loads(json.dumps(policy_json_schema()))


def test_the_integer_note_is_added_once_to_each_integer_field() -> None:
    """Also for a nullable integer (``anyOf``), and again on a schema that has
    it already (no second copy); a field of another type keeps its words."""
    schema = {"properties": {
        "gpus": {"type": "integer", "description": "GPUs."},
        "cap": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "share": {"type": "number", "description": "A share."},
    }}
    assert note_integers(note_integers(schema)) is schema
    assert schema["properties"] == {
        "gpus": {"type": "integer", "description": f"GPUs. {INTEGER_NOTE}"},
        "cap": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": INTEGER_NOTE},
        "share": {"type": "number", "description": "A share."},
    }


def test_only_maps_keyed_by_names_are_closed() -> None:
    """A map of names only (patternProperties, no properties) is closed, also
    inside an ``anyOf``; one with named properties too, or one that already
    says what other keys may be, is left as it is."""
    names = {"^[a-z]+$": {"type": "integer"}}
    schema = {"properties": {
        "teams": {"type": "object", "patternProperties": names},
        "maybe": {"anyOf": [{"type": "object", "patternProperties": names}, {"type": "null"}]},
        "mixed": {"type": "object", "properties": {"a": {}}, "patternProperties": names},
        "open": {"type": "object", "patternProperties": names, "additionalProperties": True},
    }}
    assert close_named_maps(schema) is schema
    props = schema["properties"]
    assert props["teams"]["additionalProperties"] is False
    assert props["maybe"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in props["mixed"]
    assert props["open"]["additionalProperties"] is True


@pytest.mark.parametrize("where", ["teams", "priority_classes"])
def test_the_editor_schema_refuses_a_name_the_loader_refuses(where):
    """A map keyed by names allows no other keys in the schema: an editor flags ``a.b`` as the loader does."""
    import json
    from pathlib import Path

    import jsonschema
    from ruamel.yaml import YAML

    repo = Path(__file__).resolve().parents[1]
    schema = json.loads((repo / "policies" / "schema.json").read_text())
    for shipped in ("example.yaml", "backtest-spot.yaml"):  # what is shipped still validates
        jsonschema.validate(json.loads(json.dumps(YAML(typ="safe").load(repo / "policies" / shipped))), schema)
    doc = json.loads(json.dumps(YAML(typ="safe").load(repo / "policies" / "example.yaml")))
    name = next(iter(doc[where]))
    doc[where]["a.b"] = doc[where][name]
    with pytest.raises(jsonschema.ValidationError, match="a.b"):
        jsonschema.validate(doc, schema)


def test_parsing_silences_ruamels_anchor_warning_and_nothing_else(monkeypatch):
    """A re-used anchor (YAML allows it; the later wins) is nothing to fix, so
    ruamel's warning is not shown; parsing used to silence every warning
    raised meanwhile, another library's deprecation too."""
    import warnings

    from fleetctl import yamlerrors

    text = "a: &x 1\nb: &x 2\nc: *x\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert yamlerrors.parse_document(text, "anchors.yaml").data == {"a": 1, "b": 2, "c": 2}
    assert caught == []

    plain = yamlerrors._yaml

    def deprecated():  # noqa: ANN202 - a library warning while the parser is made
        warnings.warn("a library deprecation", DeprecationWarning)
        return plain()

    monkeypatch.setattr(yamlerrors, "_yaml", deprecated)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yamlerrors.parse_document(text, "anchors.yaml")
    assert [w.category for w in caught] == [DeprecationWarning]
