"""`fleetctl policy init|validate|diff|schema`."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer

from fleetctl.cli.common import DEFAULT_POLICY, console, err_console, fail, one_of, output_file_or_exit, utcnow

if TYPE_CHECKING:
    from fleetctl.model import Policy
    from fleetctl.yamlerrors import Document, ValidationIssue

app = typer.Typer(help="Start, validate and diff policies; write their JSON Schema.", no_args_is_help=True)

#: The commented example policy, package data (in a source checkout a symlink to policies/example.yaml).
EXAMPLE_POLICY = "example_policy.yaml"


@app.command(short_help="Write the commented example policy to start from.")
def init(
    output_text: Annotated[
        str, typer.Option("-o", "--output", metavar="<path>",
                          help="The file to write ('-' for stdout); an existing file is refused, not replaced.")
    ] = str(DEFAULT_POLICY),
) -> None:
    """Write fleetctl's example policy, each field explained in a comment, to edit into your own
    (its infrastructure section, what `plan --terraform-dir` declares, holds placeholder ids to
    replace). The default path is the policy commands read when neither --policy nor
    FLEETCTL_POLICY names one."""
    from importlib import resources

    output = output_file_or_exit("-o", output_text, "policy.yaml")
    text = resources.files("fleetctl").joinpath(EXAMPLE_POLICY).read_text(encoding="utf-8")
    _write_output(output, text, what="the example policy", written_what="the policy",
                  refusal=lambda: "exists" if output.exists() or output.is_symlink() else None,
                  done=f"wrote {output}; edit it, then check it with: fleetctl policy validate {output}")


def _write_output(output: Path, text: str, *, what: str, written_what: str, refusal: Callable[[], str | None],
                  done: str) -> None:
    """``-o``'s end for `policy init` and `policy schema`: stdout for '-'; else refused (exit 2, nothing
    written) when ``refusal()`` says why the existing file must stay, else written atomically (missing
    parent directories created) and ``done`` said."""
    if str(output) == "-":
        print(text, end="")
        return
    why = refusal()
    if why is not None:
        fail(f"-o {output}: {why}; writing {what} would replace it. Give another output file, or "
             "remove this one first; nothing was written", 2)
    from fleetctl.files import write_text_atomic

    try:
        write_text_atomic(output, text)
    except OSError as exc:
        fail(f"-o {output}: cannot write {written_what}: {exc.strerror or exc}", 2)
    console.print(done, markup=False)


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Policy YAML files to check.", show_default=False)],
) -> None:
    """Check policy files. Every problem is printed as FILE:LINE:COLUMN: field.path: message;
    exits 2 if any file has one, 0 if all are valid. An allowed region where the shipped catalog
    sells nothing of the allowed providers (a typo?) is printed the same way as a warning."""
    from fleetctl.policy import policy_from_document
    from fleetctl.yamlerrors import SpecError, read_document

    bad = 0
    for path in files:
        try:
            doc = read_document(path)
            pol = policy_from_document(doc)
        except SpecError as exc:
            bad += 1
            for issue in exc.issues:
                err_console.print(str(issue), markup=False)
        else:
            for warning in _region_warnings(doc, pol):
                err_console.print(str(warning), markup=False)
            console.print(f"{path}: ok", markup=False)
    if bad:
        raise typer.Exit(2)


def _region_warnings(doc: Document, pol: Policy) -> list[ValidationIssue]:
    """Warnings (not errors) for allowed regions where the shipped catalog has no offer of an allowed
    provider: most likely a typo, which would otherwise show only as a note of `fleetctl plan` after the
    change is merged. Design choice: not an error, because a catalog snapshot can lag a cloud's new
    regions; the policy itself stays valid without the catalog (fleetctl/policy.py)."""
    from fleetctl.planner.breaches import unsold_regions
    from fleetctl.yamlerrors import did_you_mean
    from providers.catalog import load_catalog

    listed = doc.data.get("regions") if isinstance(doc.data, dict) else None
    if not isinstance(listed, list):
        return []
    offers = load_catalog()
    unsold = set(unsold_regions(offers, pol))
    sellers: dict[str, set[str]] = {}
    for o in offers:
        sellers.setdefault(o.region, set()).add(o.provider)
    warnings = []
    for i, region in enumerate(listed):
        if region not in unsold:
            continue
        if region in sellers:
            why = (f"region {region!r} is {' and '.join(sorted(sellers[region]))}'s, and providers allows only "
                   f"{', '.join(pol.providers)}")
        else:
            hint = did_you_mean(region, sorted(sellers))
            why = f"the shipped catalog has no offer in region {region!r}" + (
                f" (did you mean {hint!r}?)" if hint else "")
        warnings.append(doc.issue(("regions", i), f"warning: {why}; fleetctl would buy nothing there"))
    return warnings


class DiffFormat(str, enum.Enum):
    text = "text"
    json = "json"


@app.command(short_help="Show what a policy change means: settings and offers admitted.")
def diff(
    old: Annotated[Path, typer.Argument(help="The policy before the change (e.g. from git show).",
                                        show_default=False)],
    new: Annotated[Path, typer.Argument(help="The policy after the change; lines point into it.",
                                        show_default=False)],
    output: Annotated[DiffFormat, typer.Option("--format", help="text or json (docs/policy-diff.md).",
                                               **one_of(DiffFormat))] = DiffFormat.text,
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit 1 when the policies differ (as `git diff "
                                                                "--exit-code`), 0 when they do not.")] = False,
    jobs: Annotated[Optional[Path], typer.Option(
        "--jobs", metavar="<path>", show_default=False,
        help="A job file (like examples/jobs.yaml) to plan on an empty sandbox fleet under each policy: the cost "
             "in $/h under each, and the jobs one places and the other leaves queued, with why. The jobs are "
             "read without the policies' checks (a GPU model NEW drops is what this shows).")] = None,
) -> None:
    """Compare two policy files as validated: every setting that differs once defaults are filled in
    (+ added, - removed, ~ changed; teams and classes by name, list items by value) with the line of
    NEW that writes it, and the offers of the shipped catalog each policy admits, by provider, GPU model
    and market. Exits 0 whether or not they differ (with --exit-code: 1 when they do, as `git diff`),
    2 for a bad file, each problem printed as FILE:LINE:COLUMN: field.path: message as by `policy
    validate`, or a bad option."""
    from fleetctl.jobspec import load_jobs
    from fleetctl.policy import read_policy_file
    from fleetctl.policydiff import diff_policies, diff_to_document, render_text
    from fleetctl.yamlerrors import SpecError
    from providers.catalog import load_catalog

    loaded = []
    problems = []
    for path in (old, new):
        try:
            loaded.append(read_policy_file(path))
        except SpecError as exc:
            problems.extend(exc.issues)
    now = utcnow()
    queue = None
    if jobs is not None:
        try:
            queue = load_jobs(jobs, submitted_at_utc=now)
        except SpecError as exc:
            problems.extend(exc.issues)
    if problems:
        for issue in problems:
            err_console.print(str(issue), markup=False)
        raise typer.Exit(2)
    before, after = loaded
    result = diff_policies(old_doc=before.document, old=before.spec, new_doc=after.document, new=after.spec,
                           offers=load_catalog(),
                           queue=queue, queue_file=str(jobs or ""), now=now)
    if output is DiffFormat.json:
        print(json.dumps(diff_to_document(result), indent=2))
    else:
        print(render_text(result), end="")
    if exit_code and result.changed:
        raise typer.Exit(1)


@app.command(short_help="Write the policy's JSON Schema for editors.")
def schema(
    output_text: Annotated[
        str, typer.Option("-o", "--output", metavar="<path>",
                          help="The file to write the schema to ('-' for stdout); a directory, or a path ending in "
                               "'/', is refused, and so is an existing file that is not a policy schema fleetctl "
                               "wrote.")
    ] = "policies/schema.json",
) -> None:
    """Write the policy's JSON Schema (for editor completion and checks). An existing file is
    replaced only if it is empty or a policy schema fleetctl wrote (JSON with "$schema" and the
    title "fleetctl policy"), as editors' schema files are regenerated; any other file (a policy
    YAML given to -o by mistake) is refused with exit 2, and nothing is written."""
    from fleetctl.policy import policy_json_schema

    output = output_file_or_exit("-o", output_text, "schema.json")
    doc = policy_json_schema()
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    def refusal() -> str | None:
        why = _not_a_schema_reason(output, doc["title"])
        return None if why is None else f"exists and {why}"

    _write_output(output, text, what="the schema", written_what="the schema", refusal=refusal,
                  done=f"wrote {output}")


#: A policy schema is about 60 KB; a file much larger than that is something else, and is not read whole.
_SCHEMA_MAX_BYTES = 4 * 1024 * 1024


def _not_a_schema_reason(path: Path, title: str) -> str | None:
    """Why the existing file at ``path`` may not be replaced by the schema, or
    None: it does not exist, is empty, or is a policy schema fleetctl wrote (a
    JSON object with ``$schema`` and ``title``, the schema's title; every
    fleetctl so far wrote "fleetctl policy"). A path that is not a regular
    file is left to the writer, which refuses it (a FIFO is not read here).

    Design choice: the output has no input to compare with (as `trace import
    -o` has), so what may be replaced is decided by content: a schema file is
    regenerated over and over, and anything else under -o is a typo (`-o
    policies/prod.yaml`) that would cost the file."""
    if not path.is_file():
        return None
    ours = "a policy schema fleetctl wrote"
    try:
        with path.open("rb") as fh:
            data = fh.read(_SCHEMA_MAX_BYTES + 1)
    except OSError as exc:
        return f"cannot be read to check that it is {ours}: {exc.strerror or exc}"
    if not data.strip():
        return None
    if len(data) > _SCHEMA_MAX_BYTES:
        return f"is larger than {_SCHEMA_MAX_BYTES // (1024 * 1024)} MiB, so not {ours}"
    try:
        found = json.loads(data)
    except ValueError:  # UnicodeDecodeError too
        return f"is not JSON, so not {ours}"
    if not isinstance(found, dict) or "$schema" not in found or found.get("title") != title:
        return f'is JSON, but not {ours} (a JSON Schema titled "{title}")'
    return None
