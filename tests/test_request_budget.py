"""The request budget under huggingface_hub's session, and the download path's redirects.

In-process checks with an injected clock where time matters; the end-to-end "it ends against a
1 byte/s server" checks are in ``test_hostile_hub.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from club3090.edges import hub as H
from club3090.edges.request_budget import MAX_REDIRECTS, Budget, bounded, current, install_policy, is_installed
from club3090.errors import HubUnreachable, InputError
from tests.fakehub import FakeHub
from tests.hostilehub import HostileHub, serve


@pytest.fixture
def hostile_hub() -> Iterator[HostileHub]:
    yield from serve()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_deadline_budget_clamps_then_stays_spent() -> None:
    clock = Clock()
    budget = Budget.for_request(5.0, clock=clock)
    assert budget.allowance(30.0) == pytest.approx(5.0)
    clock.now += 4.0
    assert budget.allowance(30.0) == pytest.approx(1.0)
    clock.now += 2.0
    with pytest.raises(Exception, match="deadline"):
        budget.allowance(30.0)
    clock.now -= 10.0                   # even if time ran backwards, a spent budget stays spent
    with pytest.raises(Exception, match="deadline"):
        budget.allowance(None)


def test_the_command_deadline_caps_each_request() -> None:
    clock = Clock()
    budget = Budget.for_request(60.0, not_after=clock.now + 2.0, clock=clock)
    assert budget.allowance(None) == pytest.approx(2.0)


def test_a_stream_budget_is_a_stall_detector() -> None:
    clock = Clock()
    budget = Budget.for_stream(10.0, 1000, clock=clock)
    for _ in range(50):                 # 100 bytes a second for a long time: progress every 10 s
        clock.now += 1.0
        budget.progress(100)
        budget.allowance(None)
    clock.now += 9.0
    budget.progress(10)                 # a trickle: 10 bytes in 10 s
    clock.now += 2.0
    with pytest.raises(Exception, match="stalled"):
        budget.allowance(None)


def test_budgets_are_per_thread_and_nest() -> None:
    outer, inner = Budget.for_request(1.0), Budget.for_request(2.0)
    assert current() is None
    with bounded(outer):
        with bounded(inner):
            assert current() is inner
        assert current() is outer
    assert current() is None


def test_the_shared_session_is_the_bounded_one(fake_hub: FakeHub) -> None:
    from huggingface_hub import get_session

    install_policy()
    assert is_installed() and get_session().max_redirects == MAX_REDIRECTS


def test_redirect_loop_and_html_are_hub_unreachable_in_process(hostile_hub: HostileHub) -> None:
    hostile_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/small")
    client = H.HubClient(hostile_hub.settings(), retries=0)
    hostile_hub.misbehave("redirect-loop", "/api/models/")
    with pytest.raises(HubUnreachable, match="redirect"):
        client.repo_info("acme/small", None)
    hostile_hub.misbehaviours.clear()
    hostile_hub.misbehave("html", "/api/models/")
    with pytest.raises(HubUnreachable, match="not what the API returns"):
        client.repo_info("acme/small", None)
    hostile_hub.misbehaviours.clear()
    hostile_hub.misbehave("html", "config.json")    # a repo file that is not JSON: malformed input
    with pytest.raises(InputError):
        client.fetch_json("acme/small", "config.json", None)


def test_a_trickled_answer_misses_the_request_deadline_in_process(hostile_hub: HostileHub) -> None:
    from dataclasses import replace

    hostile_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/small")
    hostile_hub.misbehave("trickle-body", "/api/models/")
    settings = replace(hostile_hub.settings(), hub_deadline_s=0.5, hub_command_deadline_s=1.5)
    with pytest.raises(HubUnreachable, match="deadline"):
        H.HubClient(settings, backoff=0.01).repo_info("acme/small", None)


def test_the_resumable_download_drops_authorization_across_origins(fake_hub: FakeHub, tmp_path: Path) -> None:
    from club3090.edges.hf_cache import fetch_into_cache
    from club3090.model.spec import RepoFile

    token = "hf_PlantedSecretToken0123456789"
    repo = fake_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/small", gated=True,
                                tensors={"model.embed_tokens.weight": ("BF16", [256, 64])})
    fake_hub.accept_token(token)
    shard = repo.files["model.safetensors"]
    report = fetch_into_cache(fake_hub.settings(token=token, hf_home=tmp_path / "hf"), "acme/small", repo.commit,
                              [RepoFile("model.safetensors", shard.size, shard.sha256)], bar=False)
    assert report.ok and report.sha_verified, report
    cdn = fake_hub.requests("GET", "/cdn/")
    assert cdn and all("authorization" not in r.headers for r in cdn)      # the CDN never saw the token
    assert any(r.headers.get("authorization") == f"Bearer {token}" for r in fake_hub.requests("GET", "/resolve/"))


@pytest.mark.parametrize("repo_id,revision", [("acme/small\n", None), ("acme/small", ".."), ("a/b", "x" * 300),
                                              ("../etc", None)])
def test_the_client_builds_no_url_from_an_inexact_reference(fake_hub: FakeHub, repo_id, revision) -> None:
    from club3090.errors import UsageError
    from club3090.model.spec import RepoFile

    client = H.HubClient(fake_hub.settings())
    for call in (lambda: client.repo_info(repo_id, revision),
                 lambda: client.fetch_json(repo_id, "config.json", revision),
                 lambda: client.read_header(repo_id, RepoFile("model.safetensors", 100, None), revision)):
        with pytest.raises(UsageError):
            call()
    assert fake_hub.requests() == []
