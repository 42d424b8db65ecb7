"""Metadata reads give up in well under two minutes by default (issue 27 item 6): a 60 s command
deadline with the retries inside it; downloads keep their stall timer instead."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from club3090.edges import hub as H
from club3090.edges.request_budget import current
from club3090.errors import HubUnreachable
from club3090.settings import Settings
from tests.hostilehub import HostileHub, serve


@pytest.fixture
def hostile_hub() -> Iterator[HostileHub]:
    yield from serve()


def test_the_default_command_deadline_is_60_s_with_room_for_a_retry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings.from_env({"HF_HOME": str(tmp_path)})
    assert settings.hub_command_deadline_s == 60.0
    assert 2 * settings.hub_deadline_s <= settings.hub_command_deadline_s
    assert settings.download_stall_s == 60.0


def test_a_hub_that_never_answers_ends_within_the_default_command_deadline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Simulated time: every attempt uses its whole budget (a one-byte-a-second Hub); with the
    defaults the command gives up by 60 s (under the 90 s the issue allows), after a retry."""
    now = [0.0]
    attempts: list[float] = []

    def trickle() -> None:
        budget = current()
        assert budget is not None and budget.deadline is not None
        attempts.append(now[0])
        now[0] = budget.deadline
        raise TimeoutError("the request deadline passed")

    def sleep(seconds: float) -> None:
        now[0] += seconds

    client = H.HubClient(Settings.from_env({"HF_HOME": str(tmp_path)}), sleep=sleep, clock=lambda: now[0])
    with pytest.raises(HubUnreachable, match="attempts"):
        client._call("acme/small", trickle)
    assert len(attempts) >= 2 and now[0] <= 60.0


def test_inspect_against_a_trickling_hub_ends_by_the_command_deadline(hostile_hub: HostileHub) -> None:
    """The real client against a Hub sending one byte a second: exit 69's error within the
    (shortened) command deadline plus slack, not each request's deadline times the retries."""
    hostile_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/small")
    hostile_hub.misbehave("trickle", "/api/models/")
    settings = replace(hostile_hub.settings(), hub_deadline_s=1.0, hub_command_deadline_s=2.5)
    started = time.monotonic()
    with pytest.raises(HubUnreachable):
        H.HubClient(settings, backoff=0.01).repo_info("acme/small", None)
    assert time.monotonic() - started < 2.5 + 3.0
