"""Fixtures shared by the Terraform tests: the provider schemas and an
offline Terraform set-up (the schema-serving provider installed with
``dev_overrides``, see ``harness.install``), whose providers run once per
test process (``harness.SchemaProviders``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.tfprovider.harness import SchemaProviders, install
from tests.tfprovider.schemacheck import load_schemas


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    return load_schemas()


@pytest.fixture(scope="session")
def schema_providers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaProviders]:
    """Started once per test process: terraform reattaches to them (they keep no state between calls)."""
    providers = SchemaProviders(tmp_path_factory.mktemp("tf-providers"))
    yield providers
    providers.stop()


@pytest.fixture
def tf_env(tmp_path: Path, schema_providers: SchemaProviders) -> dict[str, str]:
    assert shutil.which("terraform"), "the terraform binary must be installed (CI has /usr/local/bin/terraform)"
    return install(tmp_path / "tf-harness", schema_providers)
