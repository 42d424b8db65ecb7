"""Every exception club3090 raises: the tool failing, never a verdict. Verdicts are values
(``outcome.Stop``, ``fit.memory.Unpriceable``, ``fit.estimate.NoFit``, ``emit_derived.EReport``).
No exception carries a number: the CLI alone maps each class below to its exit code
(``club3090.cli.ERRORS``, the table in ``club3090.cli.exit_codes``).

Club3090Error
 ├─ UsageError(ValueError)           bad user input the parser could not catch
 ├─ HubError(OSError)                repo_id
 │   ├─ RepoNotFound
 │   │   └─ GatedRepo
 │   ├─ RevisionNotFound
 │   ├─ EntryNotFound                file: the missing file, when known
 │   ├─ FileMetadataMissing          a file's answer lacked its ETag / commit headers
 │   ├─ UnverifiableWeights          the Hub lists no LFS sha256 for a weight file
 │   └─ HubUnreachable               network outage: not a verdict
 │       ├─ HubOffline               HF_HUB_OFFLINE is set and what is needed is not cached
 │       └─ HubFault                 the Hub answered a value we refuse to name anything with
 ├─ UpstreamUnreachable              the club-3090 file server (CLUB3090_UPSTREAM_URL) is down
 ├─ InputError(ValueError)           a file we were given is malformed or over a size cap
 │   ├─ IntegrityError               a downloaded payload or weight file failed its size/sha256
 │   └─ UnsafePath                   a name from outside would land outside its root folder
 ├─ LauncherUnavailable              docker / the compose plugin / the NVIDIA runtime / vllm missing
 ├─ InterpolationError(ValueError)   a ``${...}`` expression Compose itself would reject
 ├─ RedactionError                   redaction could not run, so nothing was written or sent
 └─ CatalogError(ValueError)         problems: tuple[Problem, ...]
"""

from __future__ import annotations

from dataclasses import dataclass


class Club3090Error(Exception):
    """Root of every error club3090 raises on purpose."""


class UsageError(Club3090Error, ValueError):
    """The command line asked for something impossible."""


class HubError(Club3090Error, OSError):
    """The Hub answered in a way that is not a model (``repo_id``; ``detail`` when known)."""

    def __init__(self, repo_id: str, detail: str = "") -> None:
        super().__init__(f"{repo_id}: {detail}" if detail else repo_id)
        self.repo_id = repo_id
        self.detail = detail


class RepoNotFound(HubError):
    """No such repo, or a private one without a token that can read it."""


class GatedRepo(RepoNotFound):
    """A gated repo whose terms the token has not accepted (or no token)."""


class RevisionNotFound(HubError):
    """The repo exists; the ``@revision`` does not."""


class EntryNotFound(HubError):
    """A file the listing named was not served (``file`` names it when known)."""

    def __init__(self, repo_id: str, detail: str = "", *, file: str | None = None) -> None:
        super().__init__(repo_id, detail)
        self.file = file


class FileMetadataMissing(HubError):
    """A file's answer lacked the ETag / commit headers every Hub answer carries."""


class HubUnreachable(HubError):
    """The network or the Hub is down, or the repo is not cached while offline: not a verdict."""


class HubOffline(HubUnreachable):
    """Offline mode (``HF_HUB_OFFLINE``) and the repo or a file of it is not in the HF cache."""


class HubFault(HubUnreachable):
    """The Hub (or ``HF_ENDPOINT``) listed a value that is not well-formed: an LFS oid that is not 64
    hex, a file name that is not a plain relative path, a commit that is not 40 hex. ``detail`` shows
    the value escaped; nothing was named by it."""


class UnverifiableWeights(HubError):
    """The Hub lists no LFS sha256 for a weight file, so it cannot be checked (``file`` names it)."""

    def __init__(self, repo_id: str, detail: str = "", *, file: str | None = None) -> None:
        super().__init__(repo_id, detail)
        self.file = file


class UpstreamUnreachable(Club3090Error):
    """The upstream club-3090 file server (``CLUB3090_UPSTREAM_URL``) could not be read."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"{url}: {detail}")
        self.url = url
        self.detail = detail


class InputError(Club3090Error, ValueError):
    """A file handed to us (config.json, safetensors header, bundle) is malformed or too large."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.file = file
        self.message = message


class IntegrityError(InputError):
    """A fetched file (patch payload, weight file) does not match the size / sha256 pinned for it."""


class UnsafePath(InputError):
    """A name from outside (a listing, a bundle, a compose file) is not a plain relative path, or
    joined to its root it would land outside it (``files.inside`` is the one check)."""


class LauncherUnavailable(Club3090Error):
    """What a launcher needs is missing; the message names the fix."""


class InterpolationError(Club3090Error, ValueError):
    """A ``${...}`` expression Compose itself would reject (unterminated, bad name, a required
    variable unset)."""


class RedactionError(Club3090Error):
    """Redaction could not run (this machine's home, user or host name is unreadable, or a value
    could not be scrubbed); the bundle, receipt or payload it guarded was not written or sent."""


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: {self.message}"


class CatalogError(Club3090Error, ValueError):
    """The packaged catalog failed validation; ``problems`` lists every problem at once."""

    def __init__(self, problems: tuple[Problem, ...] | list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__(f"catalog invalid ({len(self.problems)} problems)")
