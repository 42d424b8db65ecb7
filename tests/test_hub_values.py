"""Values the Hub lists are validated at the edge before they name anything (hardening round 3,
SEC-1 / BUG-8), and failures that are not network outages get their own headline (issue 27 item 3).

A hostile ``HF_ENDPOINT`` lists an LFS oid, a file name or a commit that is not well-formed: the
command ends with exit 69 (a Hub fault, the value shown escaped) and nothing outside the HF cache
is created, written or deleted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from club3090 import cli
from club3090.edges import download as dl
from club3090.edges import hub as H
from club3090.edges.files import inside
from club3090.edges.hf_cache import PARTIAL, fetch_into_cache
from club3090.errors import UnsafePath
from club3090.model.repo_id import commit_problem, file_name_problem, oid_problem
from club3090.model.spec import RepoFile
from tests.fakehub import FakeHub

REPO = "acme/small"


@pytest.fixture(autouse=True)
def _endpoint(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setattr(H, "DEFAULT_BACKOFF_S", 0.0)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _small(hub: FakeHub, **kwargs: object) -> object:
    return hub.add_fixture("Qwen--Qwen3-0.6B", repo_id=REPO, **kwargs)  # type: ignore[arg-type]


# --- the validators ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../x", "a/../../b", "/etc/passwd", "a//b", "./a", "a/.", "C:x", "a\\b",
                                  "a\x1b[2Jb", "a\nb", "", "x" * 2000])
def test_unsafe_file_names_are_refused(name: str) -> None:
    assert file_name_problem(name) is not None
    with pytest.raises(UnsafePath):
        inside(Path("/tmp/root"), name)


@pytest.mark.parametrize("name", ["config.json", "sub/dir/model.safetensors", "a..b", ".hidden", "é.json"])
def test_plain_relative_names_pass(name: str, tmp_path: Path) -> None:
    assert file_name_problem(name) is None
    assert inside(tmp_path, name) == tmp_path / name


def test_inside_refuses_a_symlink_that_leaves_the_root(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafePath, match="outside"):
        inside(tmp_path / "root", "link/victim")


def test_oids_and_commits_are_exact_hex() -> None:
    assert oid_problem("a" * 64) is None and commit_problem("0" * 40) is None
    for bad in ["../../victim", "A" * 64, "a" * 63, "a" * 65, None, 7]:
        assert oid_problem(bad) is not None
    for bad in ["main", "../x", "0" * 39, "g" * 40, None]:
        assert commit_problem(bad) is not None


# --- a hostile listing: exit 69, the value escaped -------------------------------------------
def test_a_listed_oid_with_dotdot_is_a_hub_fault(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _small(fake_hub)
    repo.files["model.safetensors"]._sha256 = "../../../../victim"  # type: ignore[attr-defined]
    code, out, err = _run(capsys, "inspect", REPO, "--json")
    assert code == 69, err
    assert "refuses to use" in err and "'../../../../victim'" in err
    assert json.loads(out)["exit_code"] == 69


def test_a_listed_file_name_with_dotdot_is_a_hub_fault(fake_hub: FakeHub,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _small(fake_hub, extra_files={"../../escape.json": b"{}"})
    code, _out, err = _run(capsys, "inspect", REPO)
    assert code == 69, err
    assert "'../../escape.json'" in err and "Traceback" not in err


def test_a_control_character_in_a_listed_name_is_shown_escaped(fake_hub: FakeHub,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _small(fake_hub, extra_files={"a\x1b]0;pwned\x07.json": b"{}"})
    code, _out, err = _run(capsys, "inspect", REPO)
    assert code == 69 and "\x1b" not in err and "\\x1b" in err


def test_a_malformed_commit_is_a_hub_fault_not_a_bad_revision(fake_hub: FakeHub,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """BUG-8: the Hub's commit id is its fault (69), never the user's revision (64)."""
    _small(fake_hub, commit="../../not-a-commit")
    code, _out, err = _run(capsys, "pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090",
                           "--dry-run")
    assert code == 69, err
    assert "commit '../../not-a-commit' is not 40 hex" in err


# --- the cache writer never leaves the HF cache ------------------------------------------------
def test_fetch_into_cache_never_deletes_or_writes_outside_the_cache(fake_hub: FakeHub, tmp_path: Path) -> None:
    """SEC-1: ``blobs/<oid>`` with a hostile oid used to delete the victim and leave
    ``<victim>.club3090-partial`` with the server's bytes."""
    repo = _small(fake_hub)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    settings = fake_hub.settings(hf_home=tmp_path / "hf")
    weights = repo.files["model.safetensors"]  # type: ignore[attr-defined]
    blobs = settings.hub_cache / ("models--" + REPO.replace("/", "--")) / "blobs"
    hostile = Path("../" * (len(blobs.relative_to(tmp_path).parts)) + "victim").as_posix()
    assert (blobs / hostile).resolve() == victim.resolve()
    listed = RepoFile(name="model.safetensors", size_bytes=weights.size, sha256=hostile)
    report = fetch_into_cache(settings, REPO, repo.commit, [listed], bar=False)  # type: ignore[attr-defined]
    assert (report.ok, report.failure) == (False, dl.UNSAFE_NAME)
    assert victim.read_text() == "precious"
    assert not list(tmp_path.glob("*" + PARTIAL)) and not fake_hub.requests("GET", "/cdn/")


def test_fetch_into_cache_refuses_a_file_name_outside_the_snapshot(fake_hub: FakeHub, tmp_path: Path) -> None:
    repo = _small(fake_hub)
    settings = fake_hub.settings(hf_home=tmp_path / "hf")
    listed = RepoFile(name="../../../../outside.json", size_bytes=2, sha256=None)
    report = fetch_into_cache(settings, REPO, repo.commit, [listed], bar=False)  # type: ignore[attr-defined]
    assert (report.ok, report.failure) == (False, dl.UNSAFE_NAME)
    assert not (tmp_path / "outside.json").exists()


def test_download_checks_every_name_before_it_writes(fake_hub: FakeHub, tmp_path: Path) -> None:
    repo = _small(fake_hub)
    settings = fake_hub.settings(hf_home=tmp_path / "hf")
    files = [RepoFile("config.json", 2, None), RepoFile("../../../evil.json", 2, None)]
    report = fetch_into_cache(settings, REPO, repo.commit, files, bar=False)  # type: ignore[attr-defined]
    assert (report.ok, report.failure) == (False, dl.UNSAFE_NAME) and not (tmp_path / "evil.json").exists()
    assert fake_hub.requests("GET", "/resolve/") == [] and not list((tmp_path / "hf").rglob("config.json"))


# --- issue 27 item 3: three causes, three headlines -------------------------------------------
def _raise(report: dl.DownloadReport) -> tuple[int, str]:
    from club3090.cli import ERRORS

    try:
        dl.raise_for(report, REPO)
    except Exception as exc:
        _kind, code, render = next(row for row in ERRORS if isinstance(exc, row[0]))
        return code, render(exc)
    raise AssertionError("no error raised")


def test_unverifiable_weights_have_their_own_headline(tmp_path: Path) -> None:
    code, text = _raise(dl.DownloadReport(False, tmp_path, failure=dl.NO_ETAG, failed_file="model.safetensors",
                                          detail="the Hub lists no LFS sha256 for model.safetensors"))
    assert code == 65 and text.startswith("unverifiable weights in acme/small") and "network" not in text


def test_offline_has_its_own_headline_with_the_download_line(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _small(fake_hub)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _out, err = _run(capsys, "inspect", REPO)
    assert code == 69, err
    assert err.startswith("offline (HF_HUB_OFFLINE is set)") and f"hf download {REPO}" in err
    assert "check the network" not in err and not fake_hub.log


def test_the_upstream_file_server_has_its_own_headline(monkeypatch: pytest.MonkeyPatch) -> None:
    from club3090.cli import ERRORS
    from club3090.edges import payloads
    from club3090.errors import UpstreamUnreachable

    with pytest.raises(UpstreamUnreachable) as caught:
        payloads._get("http://alice:pw@127.0.0.1:9/x/y", 10, 1.0)
    _kind, code, render = next(row for row in ERRORS if isinstance(caught.value, row[0]))
    text = render(caught.value)
    assert code == 69 and text.startswith("cannot reach the club-3090 file server at http://<credentials>@127.0.0.1:9")
    assert "CLUB3090_UPSTREAM_URL" in text and "Hub" not in text and "pw" not in text


def test_a_network_outage_keeps_the_network_headline(tmp_path: Path) -> None:
    code, text = _raise(dl.DownloadReport(False, tmp_path, failure=dl.FALLBACK_FAILED, detail="boom"))
    assert code == 69 and text.startswith("cannot reach the Hub for acme/small")


@pytest.mark.parametrize("name", ["../../../../evil.gguf", "deep/../../../../../evil/model-Q4_K_M.gguf"])
def test_a_gguf_name_with_dotdot_creates_no_folder_or_link_outside_the_cache(fake_hub: FakeHub, tmp_path: Path,
                                                                             name: str) -> None:
    """SEC-3: ``up``'s GGUF download made folders and a link outside the HF cache."""
    repo = fake_hub.add_repo("acme/gguf", {"model-Q4_K_M.gguf": b"GGUF" + bytes(60)})
    settings = fake_hub.settings(hf_home=tmp_path / "hf")
    listed = RepoFile(name=name, size_bytes=64, sha256=repo.files["model-Q4_K_M.gguf"].sha256)
    before = sorted(p for p in tmp_path.rglob("*"))
    report = fetch_into_cache(settings, "acme/gguf", repo.commit, [listed], bar=False)
    assert (report.ok, report.failure) == (False, dl.UNSAFE_NAME)
    assert sorted(p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "hf")) == \
        [p for p in before if not p.is_relative_to(tmp_path / "hf")]


def test_a_gguf_listing_with_dotdot_is_a_hub_fault(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.add_repo("acme/gguf", {"../evil-Q4_K_M.gguf": b"GGUF" + bytes(60)})
    code, _out, err = _run(capsys, "kv-calc", "acme/gguf", "--gpus", "1x3090")
    assert code == 69 and "'../evil-Q4_K_M.gguf'" in err
