"""Azure credentials that give no token, or a token Resource Manager refuses,
are azure-core's ClientAuthenticationError of one line (what the CLI reports
as a credentials error), not a ProviderError "the cloud refused a call"."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import CredentialUnavailableError

from providers.azure import AzureConfig, AzureProvider, AzureRegion
from tests.providers.azure_server import ArmServer, FakeArm

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)
SUB = "00000000-0000-0000-0000-000000000001"


class NoToken:
    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        raise CredentialUnavailableError("EnvironmentCredential authentication unavailable.\nAttempted: ...")


class WrongToken:
    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        return AccessToken("not-the-token", 4102444800)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ArmServer]:
    with ArmServer(FakeArm(SUB), tmp_path) as s:
        yield s


def provider(server: ArmServer, credential: Any) -> AzureProvider:
    config = AzureConfig(cluster="research", subscription_id=SUB, resource_group="fleet",
                         regions=(AzureRegion("eastus", "subnet", "image"),))
    return AzureProvider.from_sdk(config, credential, base_url=server.endpoint,
                                  connection_verify=str(server.ca_file))


@pytest.mark.parametrize(("credential", "start"), [
    (NoToken(), "no credential gave a token: set FLEETCTL_AZURE_ACCESS_TOKEN"),
    (WrongToken(), "Resource Manager refused the token (AuthenticationFailed: missing or wrong bearer token); "
                   "set FLEETCTL_AZURE_ACCESS_TOKEN"),
], ids=["no-token", "refused-token"])
def test_credential_failures_are_one_line_authentication_errors(server: ArmServer, credential: Any,
                                                                start: str) -> None:
    with pytest.raises(ClientAuthenticationError) as caught:
        provider(server, credential).nodes(NOW)
    message = caught.value.message
    assert message.startswith(start) and "\n" not in message, message
    assert "AZURE_CLIENT_SECRET" in message and "`az login`" in message
    assert isinstance(caught.value.__cause__, ClientAuthenticationError)  # azure-identity's detail, for debugging
