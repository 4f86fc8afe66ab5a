"""fleetctl.yamlerrors' small helpers, on their own: how a field path, a
value and a hint are written in a message. (The reading of documents and
the positions of their problems are tested through the policy and job
loaders, in test_policy.py and test_jobspec.py.)"""

from __future__ import annotations

import pytest
from ruamel.yaml.error import MarkedYAMLError, StreamMark

from fleetctl.yamlerrors import (
    _char,
    _offset_position,
    _one_line,
    _syntax_issue,
    describe_value,
    did_you_mean,
    format_path,
)


# --------------------------------------------------------------------------- format_path


@pytest.mark.parametrize(("path", "expected"), [
    pytest.param((), "", id="the-root-is-empty"),
    pytest.param(("jobs", 2, "workers"), "jobs[2].workers", id="plain"),
    pytest.param((0, "a"), "[0].a", id="an-index-first"),
    pytest.param(("teams", "a.b"), 'teams["a.b"]', id="a-dot"),
    pytest.param(("", "x"), '[""].x', id="an-empty-key-first"),
    # each escape on its own: a backslash (alone no reason to quote), a quote, CR, tab, newline
    pytest.param(("t", "a\\b"), "t.a\\b", id="a-backslash-alone-is-plain"),
    pytest.param(("t", "a.b\\c"), 't["a.b\\\\c"]', id="a-backslash-doubled-when-quoted"),
    pytest.param(("t", 'say "hi"'), 't["say \\"hi\\""]', id="quotes-escaped"),
    pytest.param(("t", "a\rb"), 't["a\\rb"]', id="a-carriage-return"),
    pytest.param(("t", "a\tb"), 't["a\\tb"]', id="a-tab"),
    pytest.param(("t", "a\nb"), 't["a\\nb"]', id="a-newline"),
    # the backslash is escaped first: an escaped quote is \" and not \\"
    pytest.param(("t", '\\"'), 't["\\\\\\""]', id="a-backslash-before-a-quote"),
])
def test_format_path_quotes_keys_that_would_be_ambiguous_and_escapes_them_on_one_line(path, expected) -> None:
    assert format_path(path) == expected


# --------------------------------------------------------------------------- describe_value


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param(None, "null", id="null"),
    pytest.param(True, "true", id="true"),
    pytest.param(False, "false", id="false"),
    pytest.param(7, "7", id="int"),
    pytest.param(2.5, "2.5", id="float"),
    pytest.param("x", "'x'", id="string"),
    pytest.param({"a": 1}, "a mapping", id="mapping"),
    pytest.param([1], "a list", id="list"),
    pytest.param((1,), "a list", id="tuple"),
    pytest.param({1}, "a set", id="set-by-its-type"),
    # a repr of exactly 40 characters is whole; of 41, cut to 37 and "..."
    pytest.param("x" * 38, "'" + "x" * 38 + "'", id="forty-characters"),
    pytest.param("x" * 39, "'" + "x" * 36 + "...", id="forty-one-characters"),
    pytest.param(10 ** 39, "1" + "0" * 39, id="a-forty-digit-number"),
    pytest.param(10 ** 40, "1" + "0" * 36 + "...", id="a-forty-one-digit-number"),
])
def test_describe_value(value, expected) -> None:
    assert describe_value(value) == expected


def test_describe_value_cuts_at_the_limit_given() -> None:
    assert describe_value("abcd", limit=6) == "'abcd'"
    assert describe_value("abcde", limit=6) == "'ab..."


# --------------------------------------------------------------------------- did_you_mean


@pytest.mark.parametrize(("word", "choices", "expected"), [
    # the same name in another case, before a longer name it begins
    pytest.param("a100", ["A100-80GB", "A100"], "A100", id="same-but-case-before-a-name-it-begins"),
    pytest.param("A100", ["a100-80gb", "a100"], "a100", id="upper-case-word"),
    pytest.param("A100", ["A100"], "A100", id="exact"),
    pytest.param("x", ["X"], "X", id="one-letter-in-another-case"),
    # a name the word begins (two letters are enough), not one that only contains it
    pytest.param("ab", ["xabyyyyy", "abzzzzzz"], "abzzzzzz", id="two-letters-begin-a-name"),
    # one letter begins no name, is no near spelling (2*1/6) and is in no name
    pytest.param("a", ["apple"], None, id="one-letter-begins-nothing"),
    pytest.param("a", ["xxxxxxa"], None, id="one-letter-is-in-nothing"),
    # a near spelling, case-insensitively: tean/team share 'tea', 2*3/8 = 0.75
    pytest.param("TEAN", ["team"], "team", id="near-spelling-in-another-case"),
    # nothing alike
    pytest.param("zzz", ["abcdef"], None, id="nothing-alike"),
    # in one name only, too far for a near spelling (2*8/33 < 0.6)
    pytest.param("research", ["big-ML-RESEARCH-team-2024"], "big-ML-RESEARCH-team-2024", id="in-a-name"),
    pytest.param("Research", ["big-ml-research-team-2024"], "big-ml-research-team-2024", id="in-a-name-word-in-case"),
    pytest.param("ab", ["xxxxabxxxx"], "xxxxabxxxx", id="two-letters-in-a-name"),
    # a name inside the word (2*8/31 < 0.6)
    pytest.param("big-research-team-2024x", ["RESEARCH"], "RESEARCH", id="a-name-in-the-word"),
    pytest.param("big-research-team-2024x", ["research"], "research", id="a-name-in-the-word-same-case"),
    # in two names: no guess
    pytest.param("research", ["big-ml-research-team-2024", "old-cv-research-team-2019"], None, id="in-two-names"),
])
def test_did_you_mean(word, choices, expected) -> None:
    assert did_you_mean(word, choices) == expected


# --------------------------------------------------------------------------- _one_line, _char


def test_one_line_joins_whitespace_and_cuts_at_the_limit() -> None:
    assert _one_line("a\n  b\tc \r\n") == "a b c"
    assert _one_line("x" * 200) == "x" * 200
    assert _one_line("x" * 201) == "x" * 197 + "..."
    assert _one_line("abcdef", limit=5) == "ab..."
    assert _one_line("abcde", limit=5) == "abcde"


@pytest.mark.parametrize(("character", "expected"), [
    pytest.param(0, "#x0000", id="a-code-point"),
    pytest.param(0x1F600, "#x1f600", id="a-code-point-above-ffff"),
    pytest.param("\x7f", "#x007f", id="a-character"),
    pytest.param("ab", "'ab'", id="two-characters"),
    pytest.param(None, "None", id="nothing"),
])
def test_char_names_a_character_by_its_code_point(character, expected) -> None:
    assert _char(character) == expected


# --------------------------------------------------------------------------- _offset_position, _syntax_issue


@pytest.mark.parametrize(("offset", "expected"), [
    pytest.param(0, (1, 1), id="the-start"),
    pytest.param(2, (1, 3), id="on-the-first-line"),
    pytest.param(3, (2, 1), id="just-after-a-newline"),
    pytest.param(5, (2, 3), id="on-the-second-line"),
    pytest.param(-1, (1, 1), id="negative"),
    pytest.param(None, (1, 1), id="none"),
    pytest.param("3", (1, 1), id="not-a-number"),
])
def test_offset_position_counts_lines_and_columns_from_one(offset, expected) -> None:
    pos = _offset_position("ab\ncd\n", offset)
    assert (pos.line, pos.column) == expected


def test_a_syntax_error_without_a_problem_is_at_its_context_or_at_the_start() -> None:
    """ruamel's parser errors come with a problem and its mark; one without
    is at its context's mark, its context the message, or at 1:1 as
    'invalid YAML'."""
    at_2_4 = StreamMark("f", 10, 1, 3)
    issue = _syntax_issue("f.yaml", MarkedYAMLError(context="while parsing a block", context_mark=at_2_4))
    assert str(issue) == "f.yaml:2:4: (root): YAML syntax error: while parsing a block"
    issue = _syntax_issue("f.yaml", MarkedYAMLError())
    assert str(issue) == "f.yaml:1:1: (root): YAML syntax error: invalid YAML"
    # a problem without any mark: at 1:1
    issue = _syntax_issue("f.yaml", MarkedYAMLError(problem="found x"))
    assert str(issue) == "f.yaml:1:1: (root): YAML syntax error: found x"
    # where the context starts is added only beside a problem at another mark
    at_3_2 = StreamMark("f", 20, 2, 1)
    issue = _syntax_issue("f.yaml", MarkedYAMLError(context="while c", context_mark=at_2_4, problem="found x"))
    assert str(issue) == "f.yaml:2:4: (root): YAML syntax error: found x"
    issue = _syntax_issue("f.yaml", MarkedYAMLError(context_mark=at_2_4, problem="found x", problem_mark=at_3_2))
    assert str(issue) == "f.yaml:3:2: (root): YAML syntax error: found x"
    issue = _syntax_issue("f.yaml", MarkedYAMLError(context="while c", context_mark=at_2_4, problem_mark=at_3_2))
    assert str(issue) == "f.yaml:3:2: (root): YAML syntax error: while c"
    issue = _syntax_issue("f.yaml", MarkedYAMLError(context="while c", context_mark=at_2_4, problem="found x",
                                                    problem_mark=at_3_2))
    assert str(issue) == "f.yaml:3:2: (root): YAML syntax error: found x (while c at line 2, column 4)"
