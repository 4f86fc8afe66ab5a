"""A pure-Python check of fleetctl's Terraform against real provider schemas.

No terraform binary: the modules' HCL is parsed with python-hcl2, each
resource and data block is checked against the provider schema (the files in
``tests/tfprovider/schemas/``), and each module call of a rendered root
module (``main.tf.json``) is checked against the module's variables. Found:
unknown arguments and blocks, missing required arguments, computed-only
arguments that are set, literal values of the wrong type, and static block
counts outside ``min_items``/``max_items``. Expressions (``${...}``) are
not evaluated; their types are left to terraform itself (tests/tfprovider
runs ``terraform validate`` too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hcl2

from tests.tfprovider.harness import SCHEMAS

META_ARGUMENTS = frozenset({"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner",
                            "connection", "providers", "source", "version"})
_EXPRESSION = object()  # a value terraform computes: any type


def load_schemas(names: tuple[str, ...] = ("aws", "google", "azurerm")) -> dict[str, dict[str, Any]]:
    """Resource and data source schemas by type name (``aws_launch_template``; data as ``data.<type>``)."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        doc = json.loads(SCHEMAS[name].read_text())
        for provider in doc["provider_schemas"].values():
            for kind, entries in (("", provider.get("resource_schemas", {})),
                                  ("data.", provider.get("data_source_schemas", {}))):
                for type_name, entry in entries.items():
                    out[kind + type_name] = entry["block"]
    return out


# ---------------------------------------------------------------- hcl2 output -> plain bodies


def _unquote(key: str) -> str:
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == '"' else key


def _value(raw: Any) -> Any:
    """A literal Python value, or _EXPRESSION for anything terraform evaluates."""
    if isinstance(raw, str):
        if raw.startswith("${") and raw.endswith("}"):
            return _EXPRESSION
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            return raw[1:-1]  # a string literal (a template is still a string)
        return _EXPRESSION  # a bare reference or type expression
    if isinstance(raw, list):
        return [_value(v) for v in raw]
    if isinstance(raw, dict):
        return {_unquote(k): _value(v) for k, v in raw.items() if not k.startswith("__")}
    return raw


def _is_block_list(raw: Any) -> bool:
    return isinstance(raw, list) and bool(raw) and all(isinstance(b, dict) and b.get("__is_block__") for b in raw)


def hcl_body(raw: dict[str, Any]) -> dict[str, Any]:
    """One hcl2 block body as ``{"attributes": {...}, "blocks": {name: [body, ...]}, "dynamic": {...}}``."""
    attributes: dict[str, Any] = {}
    blocks: dict[str, list[dict[str, Any]]] = {}
    dynamic: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        if key.startswith("__"):
            continue
        name = _unquote(key)
        if name == "dynamic" and isinstance(value, list):
            for entry in value:
                for dyn_name, dyn in entry.items():
                    if not dyn_name.startswith("__"):
                        dynamic[_unquote(dyn_name)] = hcl_body(dyn["content"][0])
        elif _is_block_list(value):
            blocks[name] = [hcl_body(b) for b in value]
        else:
            attributes[name] = _value(value)
    return {"attributes": attributes, "blocks": blocks, "dynamic": dynamic}


def module_blocks(module_dir: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, type, body) of every resource and data block of a module directory."""
    found = []
    for path in sorted(module_dir.glob("*.tf")):
        doc = hcl2.load(path.open())
        for kind in ("resource", "data"):
            for entry in doc.get(kind, []):
                for type_key, named in entry.items():
                    for name_key, body in named.items():
                        if not name_key.startswith("__"):
                            prefix = "data." if kind == "data" else ""
                            found.append((f"{path.name}:{prefix}{_unquote(type_key)}.{_unquote(name_key)}",
                                          prefix + _unquote(type_key), hcl_body(body)))
    return found


def module_variables(module_dir: Path) -> dict[str, dict[str, Any]]:
    variables: dict[str, dict[str, Any]] = {}
    for path in sorted(module_dir.glob("*.tf")):
        for entry in hcl2.load(path.open()).get("variable", []):
            for key, body in entry.items():
                if not key.startswith("__"):
                    variables[_unquote(key)] = {"type": str(body.get("type", "any")),
                                                "required": "default" not in body}
    return variables


# ---------------------------------------------------------------- the checks


def _type_error(value: Any, type_: Any) -> str | None:
    """Why a literal does not fit a schema type (terraform's safe conversions allowed)."""
    if value is _EXPRESSION or value is None:
        return None
    if type_ == "string":
        return None if isinstance(value, (str, int, float, bool)) else f"expected a string, got {type(value).__name__}"
    if type_ == "number":
        if isinstance(value, bool):
            return "expected a number, got a bool"
        if isinstance(value, (int, float)):
            return None
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                return f"expected a number, got {value!r}"
            return None
        return f"expected a number, got {type(value).__name__}"
    if type_ == "bool":
        if isinstance(value, bool) or value in ("true", "false"):
            return None
        return f"expected a bool, got {value!r}"
    if isinstance(type_, list):
        kind, inner = type_[0], type_[1]
        if kind in ("list", "set"):
            if not isinstance(value, list):
                return f"expected a {kind}, got {type(value).__name__}"
            return next((e for e in (_type_error(v, inner) for v in value) if e), None)
        if kind == "map":
            if not isinstance(value, dict):
                return f"expected a map, got {type(value).__name__}"
            return next((e for e in (_type_error(v, inner) for v in value.values()) if e), None)
        if kind == "object":
            if not isinstance(value, dict):
                return f"expected an object, got {type(value).__name__}"
            unknown = sorted(set(value) - set(inner))
            return f"unknown object attributes {unknown}" if unknown else None
    return None


def check_body(address: str, body: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Errors of one block body against its schema block, with attribute paths."""
    errors = []
    attributes = schema.get("attributes", {})
    block_types = schema.get("block_types", {})
    for name, value in body["attributes"].items():
        if name in META_ARGUMENTS:
            continue
        spec = attributes.get(name)
        if spec is None:
            where = "a block" if name in block_types else "not an argument"
            errors.append(f"{address}: {name}: {where} of this type" if name in block_types
                          else f"{address}: unknown argument {name!r}")
            continue
        if spec.get("computed") and not spec.get("optional") and not spec.get("required"):
            errors.append(f"{address}: {name}: computed by the provider, cannot be set")
        problem = _type_error(value, spec["type"])
        if problem:
            errors.append(f"{address}: {name}: {problem}")
    for name, spec in attributes.items():
        if spec.get("required") and name not in body["attributes"]:
            errors.append(f"{address}: missing required argument {name!r}")
    for name, items in list(body["blocks"].items()) + [(n, [b]) for n, b in body["dynamic"].items()]:
        if name in META_ARGUMENTS:
            continue
        spec = block_types.get(name)
        if spec is None:
            errors.append(f"{address}: unknown block {name!r}")
            continue
        for index, item in enumerate(items):
            errors.extend(check_body(f"{address}.{name}[{index}]", item, spec["block"]))
    for name, spec in block_types.items():
        if name in body["dynamic"]:
            continue  # counted by terraform at plan time
        count = len(body["blocks"].get(name, []))
        low, high = int(spec.get("min_items", 0)), int(spec.get("max_items", 0))
        if count < low:
            errors.append(f"{address}: block {name!r} needs at least {low}, has {count}")
        if high and count > high:
            errors.append(f"{address}: block {name!r} allows at most {high}, has {count}")
    return errors


def check_module(module_dir: Path, schemas: dict[str, dict[str, Any]]) -> list[str]:
    errors = []
    for address, type_name, body in module_blocks(module_dir):
        schema = schemas.get(type_name)
        if schema is None:
            errors.append(f"{module_dir.name}/{address}: unknown resource type {type_name}")
            continue
        errors.extend(check_body(f"{module_dir.name}/{address}", body, schema))
    return errors


def check_root(document: dict[str, Any], directory: Path) -> list[str]:
    """Module calls of a rendered root module against the called modules' variables."""
    errors = []
    for name, call in document.get("module", {}).items():
        source = call.get("source", "")
        module_dir = (directory / source).resolve()
        if not source.startswith("./") or not module_dir.is_dir():
            errors.append(f"module.{name}: source {source!r} is not a local module directory")
            continue
        variables = module_variables(module_dir)
        for arg, value in call.items():
            if arg in META_ARGUMENTS:
                continue
            spec = variables.get(arg)
            if spec is None:
                errors.append(f"module.{name}: unknown argument {arg!r} (not a variable of {source})")
                continue
            declared = spec["type"]
            literal = value if not (isinstance(value, str) and "${" in value.replace("$${", "")) else _EXPRESSION
            expected = {"string": "string", "bool": "bool", "number": "number", "${list(string)}": ["list", "string"],
                        "${map(string)}": ["map", "string"]}.get(declared)
            if expected is not None:
                problem = _type_error(literal, expected)
                if problem is None and expected in ("string", "number") and isinstance(literal, bool):
                    problem = f"expected a {expected}, got a bool"
                if problem:
                    errors.append(f"module.{name}: {arg}: {problem}")
        for arg, spec in variables.items():
            if spec["required"] and arg not in call:
                errors.append(f"module.{name}: missing required argument {arg!r}")
    return errors
