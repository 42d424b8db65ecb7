"""Every exception club3090 raises. Verdicts are values (see ``outcome``), not exceptions.

Club3090Error
 ├─ UsageError(ValueError)         bad user input the parser could not catch (exit 64)
 ├─ HubError(OSError)              repo_id
 │   ├─ RepoNotFound
 │   │   └─ GatedRepo
 │   ├─ RevisionNotFound
 │   ├─ EntryNotFound              file: the missing file, when known
 │   ├─ FileMetadataMissing        a file's answer lacked its ETag / commit headers
 │   └─ HubUnreachable             network outage: not a verdict (exit 69)
 ├─ InputError(ValueError)         a file we were given is malformed or over a size cap (exit 65)
 ├─ RedactionError                 redaction could not run, so nothing was written or sent (exit 70)
 └─ CatalogError(ValueError)       problems: tuple[Problem, ...] (exit 78)

[E] stage failures are values (``emit.EReport``), never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass


class Club3090Error(Exception):
    """Root of every error club3090 raises on purpose."""


class UsageError(Club3090Error, ValueError):
    """The command line asked for something impossible (exit 64)."""


class HubError(Club3090Error, OSError):
    def __init__(self, repo_id: str, detail: str = "") -> None:
        super().__init__(f"{repo_id}: {detail}" if detail else repo_id)
        self.repo_id = repo_id
        self.detail = detail


class RepoNotFound(HubError):
    pass


class GatedRepo(RepoNotFound):
    pass


class RevisionNotFound(HubError):
    pass


class EntryNotFound(HubError):
    def __init__(self, repo_id: str, detail: str = "", *, file: str | None = None) -> None:
        super().__init__(repo_id, detail)
        self.file = file


class FileMetadataMissing(HubError):
    pass


class HubUnreachable(HubError):
    pass


class InputError(Club3090Error, ValueError):
    """A file handed to us (config.json, safetensors header, bundle) is malformed or too large."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.file = file
        self.message = message


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
    def __init__(self, problems: tuple[Problem, ...] | list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__(f"catalog invalid ({len(self.problems)} problems)")
