"""Shared sandboxes for the sandbox tests: one per isolation mode, short limits, started once."""

from __future__ import annotations

import pytest
from sandbox_helpers import make_sandbox


@pytest.fixture(scope="session", params=["bwrap", "none"])
def sandbox(request):
    sb = make_sandbox(request.param)
    yield sb
    sb.close()


@pytest.fixture(scope="session")
def bwrap_sandbox():
    sb = make_sandbox("bwrap")
    yield sb
    sb.close()
