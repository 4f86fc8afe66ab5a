"""A schema-serving Terraform provider, for tests: the real ``terraform``
binary validates, plans and applies against a real provider's schema with
no registry and no cloud.

    python schema_provider.py SCHEMA_JSON
    python schema_provider.py SCHEMA_JSON --reattach SOCKET

serves, over Terraform's plugin protocol 6 (gRPC, the generated stubs of the
``tf`` package), every resource and data source of ``SCHEMA_JSON`` (the shape
``terraform providers schema -json`` prints, one provider). The first form is
the plugin terraform starts itself (go-plugin's handshake line on stdout, TLS,
one process per provider and command); the second serves on ``SOCKET`` until
it is terminated (or its parent exits), for terraform to reattach to through
``TF_REATTACH_PROVIDERS`` (see ``harness.SchemaProviders``). Terraform itself
checks configurations against that schema (unknown arguments, missing
required ones, types, block counts). The provider's part:

* plan: configured values pass through; on create, every computed attribute
  the configuration leaves null becomes *unknown* (``(known after apply)``);
  on update the proposed state (Terraform merges the prior computed values in)
  is the plan;
* apply: unknown values become deterministic placeholders of the right type
  (strings ``<type>-<hash>``, numbers 0, bools false, empty collections);
* replace: a change to an attribute listed in ``FORCE_NEW`` (as the real
  provider marks it ForceNew) is answered with ``requires_replace``, so
  Terraform plans a replacement (``-/+``, or ``+/-`` with
  ``create_before_destroy``) exactly as with the real provider;
* read: the state as it is, so a second ``terraform plan`` shows no changes;
* data sources: computed attributes filled with placeholders.

It never talks to a cloud. It is test tooling, not product code.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import msgpack
from tf.gen import tfplugin_pb2 as pb
from tf.gen import tfplugin_pb2_grpc as rpc
from tf.types import Unknown
from tf.utils import read_dynamic_value, to_dynamic_value

_NESTING = {"single": pb.Schema.NestedBlock.SINGLE, "list": pb.Schema.NestedBlock.LIST,
            "set": pb.Schema.NestedBlock.SET, "map": pb.Schema.NestedBlock.MAP,
            "group": pb.Schema.NestedBlock.GROUP}
_NULL = pb.DynamicValue(msgpack=msgpack.packb(None))

#: Attributes whose change forces a new resource in the real providers (a few,
#: for the replacement tests); ``"*"``: every attribute (immutable resources).
FORCE_NEW: dict[str, tuple[str, ...]] = {
    "google_compute_region_instance_template": ("*",),  # instance templates are immutable
    "aws_sqs_queue": ("name", "fifo_queue"),
    "aws_launch_template": ("name",),
    "aws_placement_group": ("name", "strategy"),
    "azurerm_orchestrated_virtual_machine_scale_set": ("name", "location", "resource_group_name", "zones"),
}


# ---------------------------------------------------------------- schema -> protobuf


def block_pb(block: dict[str, Any]) -> pb.Schema.Block:
    attributes = [
        pb.Schema.Attribute(
            name=name,
            type=json.dumps(a["type"]).encode(),
            description=a.get("description", ""),
            required=bool(a.get("required")),
            optional=bool(a.get("optional")),
            computed=bool(a.get("computed")),
            sensitive=bool(a.get("sensitive")),
            deprecated=bool(a.get("deprecated")),
        )
        for name, a in sorted(block.get("attributes", {}).items())
    ]
    nested = [
        pb.Schema.NestedBlock(
            type_name=name,
            block=block_pb(b["block"]),
            nesting=_NESTING[b["nesting_mode"]],
            min_items=int(b.get("min_items", 0)),
            max_items=int(b.get("max_items", 0)),
        )
        for name, b in sorted(block.get("block_types", {}).items())
    ]
    return pb.Schema.Block(version=0, attributes=attributes, block_types=nested,
                           description=block.get("description", ""), deprecated=bool(block.get("deprecated")))


def schema_pb(entry: dict[str, Any]) -> pb.Schema:
    return pb.Schema(version=int(entry.get("version", 0)), block=block_pb(entry["block"]))


# ---------------------------------------------------------------- values


def placeholder(type_: Any, seed: str) -> Any:
    """A deterministic, well-typed stand-in for a value only the cloud would know."""
    if type_ == "string":
        return f"{seed.split('.')[-1]}-{hashlib.sha256(seed.encode()).hexdigest()[:12]}"
    if type_ == "number":
        return 0
    if type_ == "bool":
        return False
    if isinstance(type_, list):
        kind = type_[0]
        if kind in ("list", "set", "tuple"):
            return []
        if kind == "map":
            return {}
        if kind == "object":
            return {k: placeholder(t, f"{seed}.{k}") for k, t in sorted(type_[1].items())}
    return None


def _elements(value: Any, mode: str) -> list[tuple[Any, Any]]:
    if value is None or value is Unknown:
        return []
    if mode == "single" or mode == "group":
        return [(None, value)]
    if mode == "map":
        return list(value.items())
    return list(enumerate(value))


def mark_unknown(block: dict[str, Any], value: dict[str, Any] | None) -> dict[str, Any] | None:
    """On create: computed attributes left null become unknown, in nested blocks too."""
    if value is None:
        return None
    out = dict(value)
    for name, a in block.get("attributes", {}).items():
        if a.get("computed") and out.get(name) is None:
            out[name] = Unknown
    for name, b in block.get("block_types", {}).items():
        mode = b["nesting_mode"]
        items = _elements(out.get(name), mode)
        done = [(k, mark_unknown(b["block"], v)) for k, v in items]
        out[name] = _rebuild(out.get(name), mode, done)
    return out


def fill_unknown(block: dict[str, Any], value: dict[str, Any] | None, seed: str) -> dict[str, Any] | None:
    """On apply (and for data sources): unknown (or, for data, null computed) values get placeholders."""
    if value is None:
        return None
    out = dict(value)
    for name, a in block.get("attributes", {}).items():
        if out.get(name) is Unknown:
            out[name] = placeholder(a["type"], f"{seed}.{name}")
    for name, b in block.get("block_types", {}).items():
        mode = b["nesting_mode"]
        done = [(k, fill_unknown(b["block"], v, f"{seed}.{name}[{k}]")) for k, v in _elements(out.get(name), mode)]
        out[name] = _rebuild(out.get(name), mode, done)
    return out


def _rebuild(original: Any, mode: str, items: list[tuple[Any, Any]]) -> Any:
    if original is None or original is Unknown:
        return original
    if mode in ("single", "group"):
        return items[0][1]
    if mode == "map":
        return dict(items)
    return [v for _, v in items]


def _plain(value: Any) -> Any:
    """A value comparable across prior and proposed state (unknowns compare equal)."""
    return "<unknown>" if value is Unknown else json.loads(json.dumps(value, default=str, sort_keys=True))


# ---------------------------------------------------------------- the servicer


class SchemaProvider(rpc.ProviderServicer):
    def __init__(self, schema_file: Path) -> None:
        doc = json.loads(schema_file.read_text())
        [(self.source, provider)] = doc["provider_schemas"].items()
        self.provider = provider
        self.resources = provider.get("resource_schemas", {})
        self.data_sources = provider.get("data_source_schemas", {})
        self._schema_response: pb.GetProviderSchema.Response | None = None

    def GetMetadata(self, request, context):  # noqa: N802, ANN001, ANN201
        return pb.GetMetadata.Response(
            server_capabilities=pb.ServerCapabilities(plan_destroy=True),
            resources=[pb.GetMetadata.ResourceMetadata(type_name=n) for n in sorted(self.resources)],
            data_sources=[pb.GetMetadata.DataSourceMetadata(type_name=n) for n in sorted(self.data_sources)],
        )

    def GetProviderSchema(self, request, context):  # noqa: N802, ANN001, ANN201
        if self._schema_response is None:
            self._schema_response = pb.GetProviderSchema.Response(
                provider=schema_pb(self.provider["provider"]),
                resource_schemas={n: schema_pb(s) for n, s in self.resources.items()},
                data_source_schemas={n: schema_pb(s) for n, s in self.data_sources.items()},
                server_capabilities=pb.ServerCapabilities(plan_destroy=True),
            )
        return self._schema_response

    def ValidateProviderConfig(self, request, context):  # noqa: N802, ANN001, ANN201
        return pb.ValidateProviderConfig.Response()

    def ValidateResourceConfig(self, request, context):  # noqa: N802, ANN001, ANN201
        return pb.ValidateResourceConfig.Response()

    def ValidateDataResourceConfig(self, request, context):  # noqa: N802, ANN001, ANN201
        return pb.ValidateDataResourceConfig.Response()

    def ConfigureProvider(self, request, context):  # noqa: N802, ANN001, ANN201
        return pb.ConfigureProvider.Response()

    def UpgradeResourceState(self, request, context):  # noqa: N802, ANN001, ANN201
        state = json.loads(request.raw_state.json) if request.raw_state.json else None
        return pb.UpgradeResourceState.Response(upgraded_state=to_dynamic_value(state) if state else _NULL)

    def ReadResource(self, request, context):  # noqa: N802, ANN001, ANN201
        return pb.ReadResource.Response(new_state=request.current_state, private=request.private)

    def PlanResourceChange(self, request, context):  # noqa: N802, ANN001, ANN201
        proposed = read_dynamic_value(request.proposed_new_state)
        if proposed is None:  # destroy
            return pb.PlanResourceChange.Response(planned_state=_NULL)
        prior = read_dynamic_value(request.prior_state)
        block = self.resources[request.type_name]["block"]
        if prior is None:
            return pb.PlanResourceChange.Response(planned_state=to_dynamic_value(mark_unknown(block, proposed)))
        forced = FORCE_NEW.get(request.type_name, ())
        config = read_dynamic_value(request.config) or {}
        names = sorted(block.get("attributes", {})) + sorted(block.get("block_types", {}))
        replace = [n for n in names if ("*" in forced or n in forced) and n in config
                   and _plain(prior.get(n)) != _plain(proposed.get(n))]
        return pb.PlanResourceChange.Response(
            planned_state=to_dynamic_value(proposed),
            requires_replace=[pb.AttributePath(steps=[pb.AttributePath.Step(attribute_name=n)]) for n in replace])

    def ApplyResourceChange(self, request, context):  # noqa: N802, ANN001, ANN201
        planned = read_dynamic_value(request.planned_state)
        if planned is None:  # destroyed
            return pb.ApplyResourceChange.Response(new_state=_NULL)
        block = self.resources[request.type_name]["block"]
        config = read_dynamic_value(request.config)
        seed = f"{request.type_name}.{json.dumps(config, sort_keys=True, default=str)}"
        return pb.ApplyResourceChange.Response(new_state=to_dynamic_value(fill_unknown(block, planned, seed)))

    def ImportResourceState(self, request, context):  # noqa: N802, ANN001, ANN201
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "import is not supported by the schema-serving provider")

    def ReadDataSource(self, request, context):  # noqa: N802, ANN001, ANN201
        block = self.data_sources[request.type_name]["block"]
        config = read_dynamic_value(request.config)
        state = fill_unknown(block, mark_unknown(block, config), f"data.{request.type_name}")
        return pb.ReadDataSource.Response(state=to_dynamic_value(state))

    def StopProvider(self, request, context):  # noqa: N802, ANN001, ANN201
        return pb.StopProvider.Response()


def serve_plugin(schema: Path) -> None:
    """As the plugin terraform starts: the go-plugin handshake, TLS, and an exit when terraform shuts it down."""
    from tf.runner import _self_signed_cert, _ShutdownInterceptor  # cryptography: only this mode needs it

    stopper = _ShutdownInterceptor()  # terraform asks the plugin to shut down; without this it waits 2 s, then kills
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[stopper])
    rpc.add_ProviderServicer_to_server(SchemaProvider(schema), server)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        sock = f"{tmp}/plugin.sock"
        chain, credentials = _self_signed_cert()
        server.add_secure_port(f"unix://{sock}", credentials)
        server.start()
        # go-plugin handshake: core version | protocol version | network | address | protocol | server cert
        print(f"1|6|unix|{sock}|grpc|{base64.b64encode(chain).decode().rstrip('=')}", flush=True)
        while server.wait_for_termination(0.05):
            if stopper.stopped:
                break


def serve_reattach(schema: Path, sock: str) -> None:
    """For terraform to reattach to (``TF_REATTACH_PROVIDERS``, ``"Test": true``): plain gRPC on ``sock``, as
    go-plugin dials a reattached provider (its automatic TLS is only set up for a plugin it starts); ``ready``
    on stdout once it listens. Terraform neither starts nor stops it: it serves until terminated, or until its
    parent exits (no provider left behind by a test run that was killed)."""
    parent = os.getppid()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_ProviderServicer_to_server(SchemaProvider(schema), server)
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    print("ready", flush=True)
    while server.wait_for_termination(1.0) and os.getppid() == parent:
        pass


def main(argv: list[str]) -> None:
    if len(argv) == 2:
        serve_plugin(Path(argv[1]))
    elif len(argv) == 4 and argv[2] == "--reattach":
        serve_reattach(Path(argv[1]), argv[3])
    else:
        sys.exit("usage: schema_provider.py SCHEMA_JSON [--reattach SOCKET]")


if __name__ == "__main__":
    main(sys.argv)
