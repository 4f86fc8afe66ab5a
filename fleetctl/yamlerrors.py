"""Read YAML (and JSON) documents with positions; report every problem as
``FILE:LINE:COLUMN: field.path: message``.

The shared machinery of ``fleetctl.policy`` and ``fleetctl.jobspec``:

* :func:`read_document` reads a file, parses it with ruamel.yaml's round-trip
  loader (which records the line and column of every mapping key, mapping value
  and sequence item), and converts it to plain Python (``dict``, ``list``,
  ``str``, ``int``, ``float``, ``bool``, ``None``) plus a table of positions.
* :meth:`Document.validate` runs a pydantic model over part of the document and
  turns each pydantic error into a :class:`ValidationIssue` pointing at the
  offending key or value (or the nearest existing parent when a field is
  missing).
* Anything that goes wrong - unreadable file, non-UTF-8 bytes, YAML syntax
  error, empty file, duplicate keys, non-string keys, unknown tags - is a
  :class:`ValidationIssue` too; loaders raise one :class:`SpecError` carrying
  all of them. Callers never see a parser traceback.

Lines and columns are 1-based, as editors and compilers print them. Field paths
read like ``teams.ml-research.guaranteed_gpus`` or ``jobs[2].workers``; the
document itself is ``(root)``. A problem in content reached through an alias
(``*name``) is reported at the alias (at its key for ``key: *name``), where the
path leads, and the message names the anchor (``&name``) where the content is
written: the same text reached twice is two problems, at two places. A key
merged into a mapping by ``<<: *name`` (or ``<<: [*a, *b]``) is likewise
reported at that ``<<`` key, naming the alias that supplied it and its anchor.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError, YAMLFutureWarning, YAMLWarning
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

__all__ = [
    "MAX_FILE_BYTES",
    "Alias",
    "Document",
    "FieldPath",
    "Located",
    "Position",
    "SpecError",
    "ValidationIssue",
    "describe_value",
    "did_you_mean",
    "format_path",
    "parse_document",
    "read_document",
]

#: A path into a document: mapping keys and sequence indexes, outermost first.
FieldPath = tuple[Union[str, int], ...]

#: Refuse files above this size: policies and job files are small, and a
#: multi-megabyte "YAML" file is almost certainly the wrong file.
MAX_FILE_BYTES = 8 * 1024 * 1024

#: How many values aliases may add to a document: each use of an alias (``*name``
#: or ``<<: *name``) copies the anchored content, and every value of every copy
#: counts. Design choice: aliases are allowed (they are handy for shared team
#: settings), so this cap keeps an alias bomb ("billion laughs", a few lines
#: that expand to billions of values) from eating the machine. Values written
#: out in the file do not count: ``MAX_FILE_BYTES`` already bounds them, and a
#: big alias-free policy (150,000 teams) is not a bomb.
MAX_ALIAS_VALUES = 200_000

#: How deeply values may nest. Real policies nest four levels.
MAX_DEPTH = 64

ROOT_LABEL = "(root)"

_YAML_CORE_TAG_PREFIX = "tag:yaml.org,2002:"


# --------------------------------------------------------------------------- issues


@dataclass(frozen=True, slots=True, order=True)
class ValidationIssue:
    """One problem in one file, at a 1-based line and column.

    ``field_path`` is the rendered path (``jobs[2].workers``); it is ``""``
    for problems of the document as a whole (syntax errors, empty file),
    rendered as ``(root)``.
    """

    file: str
    line: int
    column: int
    field_path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.field_path or ROOT_LABEL}: {self.message}"


class SpecError(Exception):
    """A policy or job file is invalid; ``issues`` holds every problem found,
    sorted by file, line and column."""

    issues: tuple[ValidationIssue, ...]

    def __init__(self, issues: Iterable[ValidationIssue]) -> None:
        unique = tuple(sorted(set(issues)))
        if not unique:
            raise ValueError("SpecError needs at least one issue")
        self.issues = unique
        super().__init__("\n".join(str(i) for i in unique))


@dataclass(frozen=True, slots=True)
class Position:
    """A 1-based line and column."""

    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Alias:
    """An alias (``*name``) through which a value was reached: where the alias
    is (its key for ``key: *name``), and where its anchor (``&name``) is."""

    name: str
    position: Position
    anchor: Position
    #: Reached through a merge key (``<<: *name``): ``position`` is the ``<<``.
    merged: bool = False

    def note(self) -> str:
        if self.merged:
            return f"(merged in by <<: *{self.name}; the anchor &{self.name} is at line {self.anchor.line})"
        return f"(reached through the alias *{self.name}; the anchor &{self.name} is at line {self.anchor.line})"


@dataclass(frozen=True, slots=True)
class Located:
    """Where one value sits: its key (``None`` for sequence items and the
    root) and the value itself; ``via`` is the alias it was reached through,
    if any (both positions are then the alias's)."""

    key: Position | None
    value: Position
    via: Alias | None = None


# --------------------------------------------------------------------------- paths and values


_PLAIN_KEY = re.compile(r"[^.\[\]\s\"']+")  # fullmatch: "$" would let a key end in a newline


def format_path(path: Iterable[str | int]) -> str:
    """Render ``("jobs", 2, "workers")`` as ``jobs[2].workers``.

    Keys that would make the path ambiguous (dots, brackets, spaces, empty)
    are quoted: ``teams["a.b"]``.
    """
    out = ""
    for elem in path:
        if isinstance(elem, int):
            out += f"[{elem}]"
        elif _PLAIN_KEY.fullmatch(elem):
            out += f".{elem}" if out else elem
        else:
            out += "[" + _quote(elem) + "]"
    return out


def _quote(text: str) -> str:
    """``text`` double-quoted, with backslashes, quotes and line breaks escaped
    (a message stays one line)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


def describe_value(value: Any, limit: int = 40) -> str:
    """A short, YAML-flavoured description of an input value for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        try:
            text = repr(value)
        except ValueError:  # an int above Python's digit limit for str()
            return "a very large number"
    elif isinstance(value, str):
        text = repr(value)
    elif isinstance(value, Mapping):
        return "a mapping"
    elif isinstance(value, (list, tuple)):
        return "a list"
    else:
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``word`` (case-insensitive, or a name that
    contains it or is contained in it), or ``None``."""
    options = list(choices)
    folded = {c.casefold(): c for c in options}
    if word.casefold() in folded:
        return folded[word.casefold()]
    # A name the word begins (A100 -> A100-40GB), before a near spelling (A100 -> A10).
    starts = [c for c in options if len(word) >= 2 and c.casefold().startswith(word.casefold())]
    if starts:
        return starts[0]
    close = difflib.get_close_matches(word.casefold(), list(folded), n=1, cutoff=0.6)
    if close:
        return folded[close[0]]
    w = word.casefold()
    contained = [c for c in options if len(w) >= 2 and (w in c.casefold() or c.casefold() in w)]
    return contained[0] if len(contained) == 1 else None


# --------------------------------------------------------------------------- the document


@dataclass(frozen=True)
class Document:
    """A parsed file: plain data, where each value sits, and the problems found
    while reading that do not stop validation (duplicate keys, non-string keys,
    unsupported tags)."""

    file: str
    data: Any
    positions: Mapping[FieldPath, Located]
    issues: tuple[ValidationIssue, ...] = ()
    #: Paths already reported while reading; validation errors at or below
    #: them are dropped so one mistake is reported once.
    reported: frozenset[FieldPath] = field(default_factory=frozenset)

    # ------------------------------------------------------------- positions

    def position(self, path: FieldPath, *, at: Literal["key", "value"] = "value") -> Position:
        """Where ``path`` is. ``at="key"`` prefers the key of a mapping entry.

        A path that does not exist (a missing field) resolves to its nearest
        existing parent, at that parent's key when it has one: a missing
        ``budget.max_usd_per_hour`` points at ``budget:``.
        """
        located = self.positions.get(path)
        if located is not None:
            if at == "key" and located.key is not None:
                return located.key
            return located.value
        for cut in range(len(path) - 1, -1, -1):
            parent = self.positions.get(path[:cut])
            if parent is not None:
                return parent.key or parent.value
        return Position(1, 1)

    def issue(self, path: FieldPath, message: str, *, at: Literal["key", "value"] = "value",
              anchor: FieldPath | None = None) -> ValidationIssue:
        """An issue about ``path``, positioned at ``anchor`` if given (for a
        field that is absent but whose problem is visible elsewhere)."""
        where = path if anchor is None else anchor
        pos = self.position(where, at=at)
        via = self._via(where)
        if via is not None:
            message = f"{message} {via.note()}"
        return ValidationIssue(self.file, pos.line, pos.column, format_path(path), message)

    def _via(self, path: FieldPath) -> Alias | None:
        """The alias through which ``path`` (or, if it is absent, its nearest
        existing parent) was reached."""
        for cut in range(len(path), -1, -1):
            located = self.positions.get(path[:cut])
            if located is not None:
                return located.via
        return None

    def exists(self, path: FieldPath) -> bool:
        return path in self.positions

    # ------------------------------------------------------------- validation

    def validate(self, model: type[BaseModel], data: Any, prefix: FieldPath = ()) -> tuple[Any, list[ValidationIssue]]:
        """Validate ``data`` (the part of this document at ``prefix``) with
        ``model``. Returns ``(instance, [])`` or ``(None, issues)``; the
        issues leave out errors at paths in ``reported``."""
        try:
            return model.model_validate(data), []
        except ValidationError as exc:
            issues = []
            for err in exc.errors(include_url=False):
                issue = self._translate(err, prefix, model)
                if issue is not None:
                    issues.append(issue)
            # ``issues`` may be empty when every error sits at a path already
            # reported while reading (``self.issues``), which callers raise.
            return None, issues

    def _translate(self, err: Mapping[str, Any], prefix: FieldPath, model: type[BaseModel]) -> ValidationIssue | None:
        loc: FieldPath = prefix + tuple(err["loc"])
        kind: str = err["type"]
        at: Literal["key", "value"] = "value"
        if loc and loc[-1] == "[key]":  # a dict key failed its own validation
            loc = loc[:-1]
            at = "key"
        if any(loc[:cut] in self.reported for cut in range(len(loc) + 1)):
            return None
        value = err.get("input")
        if kind == "missing":
            message = "required field is missing"
        elif kind == "extra_forbidden":
            at = "key"
            message = _unknown_field_message(str(loc[-1]), _allowed_keys(model, tuple(err["loc"])[:-1]))
        elif kind == "invalid_key":
            at = "key"
            message = f"keys must be strings (got {describe_value(value)}); quote the key"
        else:
            message = humanize(err["msg"], kind, value)
        return self.issue(loc, message, at=at)


def humanize(msg: str, kind: str, value: Any) -> str:
    """Turn a pydantic message into this project's voice: ``must be ...
    (got X)``; our own ``ValueError`` messages pass through unchanged."""
    if kind == "value_error":
        return re.sub(r"^Value error, ", "", msg)
    if kind == "assertion_error":
        return re.sub(r"^Assertion failed, ", "", msg)
    if kind in ("model_type", "model_attributes_type", "dict_type", "mapping_type"):
        text = "must be a mapping"
    elif kind in ("list_type", "tuple_type", "iterable_type"):
        text = "must be a list"
    elif kind == "bool_type" and isinstance(value, str):
        return f"must be true or false (got {describe_value(value)}; YAML 1.2 reads yes/no/on/off as strings)"
    elif kind == "int_type" and isinstance(value, float) and not isinstance(value, bool):
        if value.is_integer():
            # The JSON Schema calls 8.0 an integer (see policy.note_integers); say why it is refused.
            return (f"must be an integer written without a decimal point (got {describe_value(value)}; "
                    f"write {int(value)})")
        return f"must be an integer (got {describe_value(value)})"
    else:
        text = re.sub(r"^(Input|String|List|Dictionary|Value|Tuple|Number|Float|Integer) should ", "must ", msg)
        text = text[:1].lower() + text[1:]
    return f"{text} (got {describe_value(value)})"


def _unknown_field_message(name: str, allowed: list[str] | None) -> str:
    message = f"unknown field {name!r}"
    if allowed:
        hint = did_you_mean(name, allowed)
        if hint:
            message += f" (did you mean {hint!r}?)"
        message += "; allowed: " + ", ".join(allowed)
    return message


def _unwrap(tp: Any) -> Any:
    """Strip ``Annotated`` and ``Optional`` from a type annotation."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _allowed_keys(model: Any, path: FieldPath) -> list[str] | None:
    """The field names of the model found at ``path`` under ``model``, or
    ``None`` when that is not a model (so no list can be offered)."""
    tp = model
    for elem in path:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if not isinstance(elem, str) or elem not in tp.model_fields:
                return None
            tp = tp.model_fields[elem].annotation
            continue
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (list, tuple) and args:
            tp = args[0]
        elif origin is dict and len(args) == 2:
            tp = args[1]
        else:
            return None
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return list(tp.model_fields)
    return None


# --------------------------------------------------------------------------- reading


def read_document(path: str | os.PathLike[str]) -> Document:
    """Read and parse one YAML or JSON file; raise :class:`SpecError` if it
    cannot be read or parsed at all."""
    return read_document_and_bytes(path)[0]


def read_document_and_bytes(path: str | os.PathLike[str]) -> tuple[Document, bytes]:
    """:func:`read_document`, and the bytes it was parsed from (a reader that
    reports which version of a file it runs hashes exactly what it read)."""
    file = os.fspath(path)
    try:
        with open(file, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SpecError([ValidationIssue(file, 1, 1, "", f"cannot read the file: {reason}")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError([ValidationIssue(file, 1, 1, "", f"file is larger than {MAX_FILE_BYTES} bytes")])
    return parse_document(decode_utf8(file, raw), file), raw


def decode_utf8(file: str, raw: bytes) -> str:
    """``raw`` as UTF-8 text (a byte-order mark dropped), or :class:`SpecError`
    at the line and column of the first byte that is not UTF-8 (``file`` names it)."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", errors="replace")) + 1
        bad = raw[exc.start : exc.start + 1].hex()
        raise SpecError(
            [ValidationIssue(file, line, column, "", f"file is not UTF-8 text (byte 0x{bad}); save it as UTF-8")]
        ) from None


class _Constructor(RoundTripConstructor):
    """Round-trip constructor that keeps timestamps as the text written.

    Design choice: YAML would turn ``2030-01-01T00:00:00Z`` into a datetime but
    leave the quoted form, or the same value in JSON, a string. Keeping all
    timestamps as strings gives one parser (ours) and one error message for
    both, and lets us reject naive timestamps that YAML would silently accept.
    """


def _timestamp_as_text(constructor: RoundTripConstructor, node: ScalarNode) -> Any:
    return constructor.construct_scalar(node)


_Constructor.add_constructor(_YAML_CORE_TAG_PREFIX + "timestamp", _timestamp_as_text)


class _Composer(Composer):
    """Composer that records where each alias is: ruamel returns the anchored
    node itself for an alias, and forgets the alias's position."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: ``(id(parent node), index or id(key node))`` -> (alias name, alias mark)
        self.alias_marks: dict[tuple[int, int], tuple[str, Any]] = {}

        #: ``(id(mapping node), id(key node))`` -> (alias name, alias mark), for aliases written as keys
        self.key_alias_marks: dict[tuple[int, int], tuple[str, Any]] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if parent is None or not self.parser.check_event(AliasEvent):
            return super().compose_node(parent, index)
        event = self.parser.peek_event()
        alias = (str(event.anchor), event.start_mark)
        if index is not None:
            slot = index if isinstance(index, int) else id(index)
            self.alias_marks[(id(parent), slot)] = alias
            return super().compose_node(parent, index)
        node = super().compose_node(parent, index)  # a key: its node is known only now
        self.key_alias_marks[(id(parent), id(node))] = alias
        return node


def _yaml() -> YAML:
    # A fresh instance per document: YAML objects carry parser state.
    yaml = YAML(typ="rt", pure=True)
    yaml.Constructor = _Constructor
    yaml.Composer = _Composer
    # Duplicates are found by our own walk (all of them, with field paths),
    # instead of ruamel stopping at the first.
    yaml.allow_duplicate_keys = True
    return yaml


def parse_document(text: str, file: str = "<string>", *, max_alias_values: int = MAX_ALIAS_VALUES) -> Document:
    """Parse YAML/JSON ``text`` (named ``file`` in messages) into a
    :class:`Document`; raise :class:`SpecError` if it has no usable content,
    or if aliases copy more than ``max_alias_values`` values into it."""
    converter = _Converter(file, max_alias_values=max_alias_values)
    issues: list[ValidationIssue] = []
    try:
        with warnings.catch_warnings():
            # ruamel warns about re-used anchors, which YAML allows (the later
            # one wins); nothing for a person to fix, so no stderr noise. Its
            # own warnings only: another library's still reach Python's filters.
            warnings.simplefilter("ignore", YAMLWarning)
            warnings.simplefilter("ignore", YAMLFutureWarning)
            # One parse: the node tree gives the positions of aliases and
            # duplicate keys, then becomes the data. The tables are read first,
            # since constructing the data removes the merge keys (<<) from it.
            yaml = _yaml()
            node = yaml.compose(text)
            if node is not None:
                loops = _loops(file, node, yaml.composer)
                if loops:  # ruamel would make each a null, or fail on a merged one (<<: *a inside &a)
                    raise SpecError(loops + _duplicate_keys(file, node))
                issues.extend(_duplicate_keys(file, node))
                converter.reported.update(_duplicate_paths(node))
                converter.aliases = _alias_sites(node, yaml.composer.alias_marks)
                converter.merges = _merge_sites(node, yaml.composer.alias_marks)
            data = None if node is None else yaml.constructor.construct_document(node)
    except SpecError:
        raise
    except MarkedYAMLError as exc:
        raise SpecError([_syntax_issue(file, exc)]) from None
    except ReaderError as exc:
        pos = _offset_position(text, exc.position)
        raise SpecError(
            [ValidationIssue(file, pos.line, pos.column, "", f"unacceptable character {_char(exc.character)} "
                             "(binary data or control characters are not YAML)")]
        ) from None
    except YAMLError as exc:
        raise SpecError([ValidationIssue(file, 1, 1, "", f"YAML error: {_one_line(str(exc))}")]) from None
    except RecursionError:
        raise SpecError([ValidationIssue(file, 1, 1, "", "the document is nested too deeply")]) from None
    except Exception as exc:  # noqa: BLE001
        # Design choice: the promise is "every problem is an issue, never a
        # traceback"; a parser bug on hostile input must not break it.
        raise SpecError(
            [ValidationIssue(file, 1, 1, "", f"could not parse the file as YAML ({type(exc).__name__}: "
                             f"{_one_line(str(exc))})")]
        ) from None

    if data is None:
        message = "file is empty" if node is None else "the document is null; expected content"
        raise SpecError([ValidationIssue(file, 1, 1, "", message)])

    try:
        plain = converter.convert(data, (), _root_position(data))
    except _TooLarge as exc:
        raise SpecError([exc.issue]) from None
    issues.extend(converter.issues)
    return Document(
        file=file,
        data=plain,
        positions=converter.positions,
        issues=tuple(issues),
        reported=frozenset(converter.reported),
    )


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _char(character: Any) -> str:
    if isinstance(character, int):
        return f"#x{character:04x}"
    if isinstance(character, str) and len(character) == 1:
        return f"#x{ord(character):04x}"
    return repr(character)


def _offset_position(text: str, offset: Any) -> Position:
    if not isinstance(offset, int) or offset < 0:
        return Position(1, 1)
    before = text[:offset]
    return Position(before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1)


def _syntax_issue(file: str, exc: MarkedYAMLError) -> ValidationIssue:
    mark = exc.problem_mark or exc.context_mark
    line = (mark.line + 1) if mark is not None else 1
    column = (mark.column + 1) if mark is not None else 1
    problem = exc.problem or exc.context or "invalid YAML"
    message = f"YAML syntax error: {_one_line(problem)}"
    if exc.context and exc.problem and exc.context_mark is not None and exc.context_mark is not mark:
        where = exc.context_mark
        message += f" ({_one_line(exc.context)} at line {where.line + 1}, column {where.column + 1})"
    return ValidationIssue(file, line, column, "", message)


# --------------------------------------------------------------------------- duplicate keys


def _walk_mappings(node: Node, path: FieldPath, seen: set[int]) -> Iterable[tuple[FieldPath, ScalarNode, ScalarNode]]:
    """Yield ``(path, duplicate_key_node, first_key_node)`` for every repeated
    scalar key. Aliased nodes are visited once (at their anchor); a mapping
    merged in inline (``<<: {...}``) is walked at the mapping it is merged into."""
    stack: list[tuple[Node, FieldPath]] = [(node, path)]
    while stack:
        current, where = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        children: list[tuple[Node, FieldPath]] = []
        if isinstance(current, MappingNode):
            first: dict[tuple[str, str], ScalarNode] = {}
            for key, value in current.value:
                if str(key.tag) == _YAML_CORE_TAG_PREFIX + "merge":
                    # mappings merged in (<<: {...}, <<: [...]): their keys become this mapping's
                    sources = value.value if isinstance(value, SequenceNode) else [value]
                    children.extend((source, where) for source in sources)
                    continue
                if isinstance(key, ScalarNode):
                    ident = (str(key.tag), str(key.value))
                    child = where + (str(key.value),)
                    if ident in first:
                        yield child, key, first[ident]
                    else:
                        first[ident] = key
                    children.append((value, child))
        elif isinstance(current, SequenceNode):
            children = [(item, where + (index,)) for index, item in enumerate(current.value)]
        # the first child on top: nodes are visited in document order, so an
        # anchor's content before any alias of it
        stack.extend(reversed(children))


def _duplicate_keys(file: str, node: Node) -> list[ValidationIssue]:
    issues = []
    for path, key, original in _walk_mappings(node, (), set()):
        issues.append(
            ValidationIssue(
                file,
                key.start_mark.line + 1,
                key.start_mark.column + 1,
                format_path(path),
                f"duplicate key {str(key.value)!r} (first defined at line {original.start_mark.line + 1}); "
                "a key may appear once per mapping",
            )
        )
    return issues


def _duplicate_paths(node: Node) -> set[FieldPath]:
    return {path for path, _, _ in _walk_mappings(node, (), set())}


# --------------------------------------------------------------------------- aliases


def _loops(file: str, root: Node, composer: _Composer) -> list[ValidationIssue]:
    """An issue at every alias written inside the value its anchor names
    (``a: &a {b: *a}``, ``a: &a {<<: *a}``): a document that contains itself.
    Depth first over the node graph, each node once (an alias bomb is walked
    in linear time); an alias to a node still being walked is a loop."""
    walking, done = 1, 2
    state: dict[int, int] = {}
    issues: list[ValidationIssue] = []

    def children(node: Node, path: FieldPath, merged: bool) -> Iterable[tuple[Node, FieldPath, Any]]:
        if isinstance(node, MappingNode):
            for key, value in node.value:
                yield key, path, composer.key_alias_marks.get((id(node), id(key)))
                if _is_merge(key):  # merged content becomes this mapping's, a list of sources included
                    yield value, path + ("<<",), composer.alias_marks.get((id(node), id(key)))
                else:
                    yield value, path + (str(key.value) if isinstance(key, ScalarNode) else "?",), \
                        composer.alias_marks.get((id(node), id(key)))
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                yield item, path if merged else path + (index,), composer.alias_marks.get((id(node), index))

    stack = [(root, children(root, (), False))]
    state[id(root)] = walking
    while stack:
        node, pending = stack[-1]
        step = next(pending, None)
        if step is None:
            state[id(node)] = done
            stack.pop()
            continue
        child, path, alias = step
        seen = state.get(id(child))
        if seen == walking:
            name, mark = alias if alias is not None else ("", child.start_mark)
            anchor = child.start_mark.line + 1
            issues.append(ValidationIssue(
                file, mark.line + 1, mark.column + 1, format_path(tuple(e for e in path if e != "<<")),
                f"an alias refers to a value that contains it (a loop): *{name} is inside &{name} "
                f"(line {anchor}); a document cannot contain itself, so write the values out"))
        elif seen is None:
            state[id(child)] = walking
            stack.append((child, children(child, path, path[-1:] == ("<<",))))
    return issues


def _alias_sites(node: Node, marks: Mapping[tuple[int, int], tuple[str, Any]]) -> dict[FieldPath, Alias]:
    """The path of every alias outside aliased content, with where the alias
    and its anchor are. Aliased content is not entered (its own aliases are
    reached through the outer one), so each node is visited once."""
    sites: dict[FieldPath, Alias] = {}
    memo: dict[int, dict[str, _Merged]] = {}
    stack: list[tuple[Node, FieldPath]] = [(node, ())]
    while stack:
        current, where = stack.pop()
        for elem, child, slot in _children(current, _merged_here(current, marks, memo)):
            path = where + (elem,)
            alias = marks.get(slot)
            if alias is None:
                stack.append((child, path))
                continue
            name, mark = alias
            anchor = child.start_mark
            sites.setdefault(path, Alias(name, Position(mark.line + 1, mark.column + 1),
                                         Position(anchor.line + 1, anchor.column + 1)))
    return sites


@dataclass(frozen=True, slots=True)
class _Merged:
    """Where a key merged into a mapping by ``<<`` is reported: at the ``<<``
    key with the alias that supplied it (``via``), or, for an inline mapping
    (``<<: {k: v}``), at the key and value as written."""

    key: Position
    value: Position
    via: Alias | None
    #: For a key written inline: its value node, and the ``alias_marks`` slot
    #: of that value (so a walk can go on into it, or find it is an alias).
    node: Node | None = None
    slot: tuple[int, int] | None = None


def _is_merge(key: Node) -> bool:
    return str(key.tag) == _YAML_CORE_TAG_PREFIX + "merge"


def _mark(node: Node) -> Position:
    return Position(node.start_mark.line + 1, node.start_mark.column + 1)


def _merge_sources(mapping: MappingNode, marks: Mapping[tuple[int, int], tuple[str, Any]]
                   ) -> list[tuple[Node, Node, tuple[str, Any] | None, Node]]:
    """``(merge key, source, alias or None, the anchored node the alias
    names)`` for every mapping merged into ``mapping``, earliest (winning)
    first, as YAML's merge rules order them."""
    sources = []
    for key, value in mapping.value:
        if not _is_merge(key):
            continue
        alias = marks.get((id(mapping), id(key)))
        if isinstance(value, SequenceNode):
            for index, item in enumerate(value.value):
                if alias is not None:  # ``<<: *s`` of an anchored list: every item comes through *s
                    sources.append((key, item, alias, value))
                else:  # ``<<: [*a, {...}]``
                    sources.append((key, item, marks.get((id(value), index)), item))
        else:
            sources.append((key, value, alias, value))
    return [source for source in sources if isinstance(source[1], MappingNode)]


def _merged_keys(mapping: MappingNode, marks: Mapping[tuple[int, int], tuple[str, Any]],
                 memo: dict[int, dict[str, _Merged]]) -> dict[str, _Merged]:
    """The keys ``mapping`` gets through its merge keys (not its own), each
    with where to report it. ``memo`` holds the answers so far, so a chain of
    merges (``<<: [*a, *a]``, then ``<<: [*b, *b]``, ...) is walked once per
    mapping, not once per path through it."""
    if id(mapping) in memo:  # answered (merge loops were refused before: _loops)
        return memo[id(mapping)]
    memo[id(mapping)] = {}
    own = {str(k.value) for k, _ in mapping.value if isinstance(k, ScalarNode) and not _is_merge(k)}
    merged: dict[str, _Merged] = {}
    for merge_key, source, alias, anchored in _merge_sources(mapping, marks):
        at = _mark(merge_key)
        if alias is not None:
            via = Alias(alias[0], at, _mark(anchored), merged=True)
            names = [str(k.value) for k, _ in source.value if isinstance(k, ScalarNode) and not _is_merge(k)]
            names += list(_merged_keys(source, marks, memo))
            for name in names:
                if name not in own:
                    merged.setdefault(name, _Merged(at, at, via))
            continue
        for k, v in source.value:
            if isinstance(k, ScalarNode) and not _is_merge(k) and str(k.value) not in own:
                value = _mark(v)
                if str(v.tag) == _YAML_CORE_TAG_PREFIX + "null" and value.line != _mark(k).line:
                    value = _mark(k)  # an empty value (`k:`) is marked where whatever follows is, as in _entry
                merged.setdefault(str(k.value), _Merged(_mark(k), value, None, v, (id(source), id(k))))
        for name, where in _merged_keys(source, marks, memo).items():
            if name not in own:
                merged.setdefault(name, where)
    memo[id(mapping)] = merged
    return merged


def _merged_here(node: Node, marks: Mapping[tuple[int, int], tuple[str, Any]],
                 memo: dict[int, dict[str, _Merged]]) -> dict[str, _Merged]:
    """The keys merged into ``node`` by ``<<`` (:func:`_merged_keys`); none unless it is a mapping with one."""
    if isinstance(node, MappingNode) and any(_is_merge(key) for key, _ in node.value):
        return _merged_keys(node, marks, memo)
    return {}


def _children(node: Node, merged: Mapping[str, _Merged]) -> list[tuple[str | int, Node, tuple[int, int]]]:
    """``(path element, child, its alias_marks slot)`` for the walks outside aliased content: a mapping's
    own keys but ``<<``, then the values written in its inline merged mappings (``<<: {k: v}``, ``merged``)
    at the keys they become; a list's items."""
    if isinstance(node, MappingNode):
        children: list[tuple[str | int, Node, tuple[int, int]]] = [
            (str(key.value), value, (id(node), id(key))) for key, value in node.value
            if isinstance(key, ScalarNode) and not _is_merge(key)]
        return children + [(name, m.node, m.slot) for name, m in merged.items()
                           if m.node is not None and m.slot is not None]
    if isinstance(node, SequenceNode):
        return [(index, item, (id(node), index)) for index, item in enumerate(node.value)]
    return []


def _merge_sites(node: Node, marks: Mapping[tuple[int, int], tuple[str, Any]]) -> dict[FieldPath, dict[str, _Merged]]:
    """For every mapping outside aliased content that has merge keys (``<<``),
    its merged keys and where to report each (see :func:`_merged_keys`). The
    walk is that of :func:`_alias_sites`: content reached through an alias is
    reported at the alias, merges inside it included; a value written in an
    inline merged mapping (``<<: {k: v}``) is walked at the key it becomes."""
    sites: dict[FieldPath, dict[str, _Merged]] = {}
    memo: dict[int, dict[str, _Merged]] = {}
    stack: list[tuple[Node, FieldPath]] = [(node, ())]
    while stack:
        current, where = stack.pop()
        merged = _merged_here(current, marks, memo)
        if merged:
            sites[where] = merged
        for elem, child, slot in _children(current, merged):
            if slot not in marks:
                stack.append((child, where + (elem,)))
    return sites


# --------------------------------------------------------------------------- ruamel -> plain python


class _TooLarge(Exception):
    """Aliases copy too many values into the document; ``issue`` says where."""

    def __init__(self, issue: ValidationIssue) -> None:
        super().__init__(str(issue))
        self.issue = issue


def _lc_position(obj: Any) -> Position | None:
    lc = getattr(obj, "lc", None)
    line = getattr(lc, "line", None)
    col = getattr(lc, "col", None)
    if isinstance(line, int) and isinstance(col, int):
        return Position(line + 1, col + 1)
    return None


def _root_position(data: Any) -> Position:
    return _lc_position(data) or Position(1, 1)


def _tag_of(obj: Any) -> str | None:
    """The explicit application tag of a collection (``!foo``), if any."""
    tag = getattr(obj, "tag", None)
    value = getattr(tag, "value", None)
    if isinstance(value, str) and not value.startswith(_YAML_CORE_TAG_PREFIX):
        return value
    return None


@dataclass
class _Converter:
    """Turns ruamel's Commented* objects into plain Python, recording the
    position of every key and value and the problems that do not stop
    validation."""

    file: str
    positions: dict[FieldPath, Located] = field(default_factory=dict)
    issues: list[ValidationIssue] = field(default_factory=list)
    reported: set[FieldPath] = field(default_factory=set)
    #: Values copied in through aliases so far, and the most allowed.
    alias_values: int = 0
    max_alias_values: int = MAX_ALIAS_VALUES
    #: The aliases outside aliased content, by path (see ``_alias_sites``).
    aliases: dict[FieldPath, Alias] = field(default_factory=dict)
    #: Keys merged in by ``<<``, by the path of their mapping (see ``_merge_sites``).
    merges: dict[FieldPath, dict[str, _Merged]] = field(default_factory=dict)
    #: The alias through which the value being converted was reached: every
    #: position below it is the alias's.
    via: Alias | None = None
    #: Where that alias is (the path of the value it stands for).
    via_path: FieldPath = ()

    def _issue(self, path: FieldPath, pos: Position, message: str) -> None:
        if self.via is not None:
            message = f"{message} {self.via.note()}"
        self.issues.append(ValidationIssue(self.file, pos.line, pos.column, format_path(path), message))
        self.reported.add(path)

    def convert(self, obj: Any, path: FieldPath, pos: Position, key: Position | None = None,
                merged: Alias | None = None) -> Any:
        alias = self.aliases.get(path) if self.via is None else None
        if merged is not None and self.via is None:
            alias = merged  # positioned at the ``<<`` key already
        if alias is None:
            return self._convert(obj, path, pos, key)
        # ``key: *name`` points at the key (on the alias's line), as a key's
        # value does; a sequence item at the alias itself.
        self.via = Alias(alias.name, key or alias.position, alias.anchor, alias.merged)
        self.via_path = path
        try:
            return self._convert(obj, path, self.via.position, key)
        finally:
            self.via = None

    def _convert(self, obj: Any, path: FieldPath, pos: Position, key: Position | None = None) -> Any:
        if self.via is not None:
            self.alias_values += 1
            if self.alias_values > self.max_alias_values:
                message = (f"aliases copy more than {self.max_alias_values} values into the document (each use of "
                           "an alias copies its anchored content; an alias bomb?); use fewer aliases or write the "
                           f"values out {self.via.note()}")
                at = self.via.position
                raise _TooLarge(ValidationIssue(self.file, at.line, at.column, format_path(self.via_path), message))
        self.positions.setdefault(path, Located(key=key, value=pos, via=self.via))
        if len(path) > MAX_DEPTH:
            self._issue(path, pos, f"nested more than {MAX_DEPTH} levels deep")
            return None
        if isinstance(obj, (CommentedMap, CommentedSeq)):
            tag = _tag_of(obj)
            if tag is not None:
                self._issue(path, pos, f"unsupported YAML tag {tag!r}; remove it")
                return None
            # no loops here: parse_document refused them (_loops)
            if isinstance(obj, CommentedMap):
                return self._mapping(obj, path, pos)
            return self._sequence(obj, path, pos)
        # bool before int: ruamel's ScalarBoolean (anchored booleans) is an int.
        if isinstance(obj, bool) or type(obj).__name__ == "ScalarBoolean":
            return bool(obj)
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, str):
            return str(obj)
        if obj is None:
            return None
        if isinstance(obj, TaggedScalar):
            tag = getattr(getattr(obj, "tag", None), "value", None) or "?"
            self._issue(path, pos, f"unsupported YAML tag {tag!r}; remove it")
            return None
        self._issue(path, pos, f"unsupported YAML value ({type(obj).__name__}); use a string, number, "
                               "boolean, list or mapping")
        return None

    def _mapping(self, obj: CommentedMap, path: FieldPath, pos: Position) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merges = self.merges.get(path, {}) if self.via is None else {}
        for k in list(obj.keys()):
            key_pos, value_pos = (pos, pos) if self.via is not None else self._entry(obj, k, pos)
            # the merge table names keys by their text (7 as "7"): a key that is not a string is found there too
            merged = merges.get(k if isinstance(k, str) else str(k))
            if merged is not None:
                key_pos, value_pos = merged.key, merged.value
            if not isinstance(k, str):
                note = f" {merged.via.note()}" if merged is not None and merged.via is not None else ""
                self._issue(path + (describe_value(k),), key_pos,
                            f"mapping keys must be strings (got {describe_value(k)}); quote the key{note}")
                continue
            key = str(k)
            out[key] = self.convert(obj[k], path + (key,), value_pos, key=key_pos,
                                    merged=merged.via if merged is not None else None)
        return out

    def _entry(self, obj: CommentedMap, k: Any, fallback: Position) -> tuple[Position, Position]:
        try:
            kl, kc = obj.lc.key(k)
            key_pos = Position(kl + 1, kc + 1)
        except (KeyError, TypeError, AttributeError, IndexError):  # merged (<<) keys have no position
            return fallback, fallback
        try:
            vl, vc = obj.lc.value(k)
            value_pos = Position(vl + 1, vc + 1)
        except (KeyError, TypeError, AttributeError, IndexError):
            value_pos = key_pos
        # An empty value (`key:`) is null; ruamel then reports the position of
        # whatever comes next, often on a later line. An alias (`key: *x`)
        # reports the position of its anchor, often on an earlier line. Point
        # at the key in both cases.
        if obj.get(k) is None and value_pos.line != key_pos.line:
            value_pos = key_pos
        if (value_pos.line, value_pos.column) < (key_pos.line, key_pos.column):
            value_pos = key_pos
        return key_pos, value_pos

    def _sequence(self, obj: CommentedSeq, path: FieldPath, pos: Position) -> list[Any]:
        out = []
        last = pos
        for index, item in enumerate(obj):
            try:
                il, ic = obj.lc.item(index)
                item_pos = Position(il + 1, ic + 1)
            except (KeyError, TypeError, AttributeError, IndexError):
                item_pos = last
            if (item_pos.line, item_pos.column) < (last.line, last.column):
                item_pos = last  # an alias: ruamel gives its anchor's position
            if self.via is not None:
                item_pos = pos
            out.append(self.convert(item, path + (index,), item_pos))
            last = item_pos
        return out
