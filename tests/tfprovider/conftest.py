"""Fixtures shared by the Terraform tests: the provider schemas and an
offline Terraform set-up (the schema-serving provider installed in a
filesystem mirror, see ``harness.install``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.tfprovider.harness import install
from tests.tfprovider.schemacheck import load_schemas


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    return load_schemas()


@pytest.fixture
def tf_env(tmp_path: Path) -> dict[str, str]:
    assert shutil.which("terraform"), "the terraform binary must be installed (CI has /usr/local/bin/terraform)"
    return install(tmp_path / "tf-harness")
