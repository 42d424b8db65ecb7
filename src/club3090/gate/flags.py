"""The flags a user gives to clear a stop or accept a terminal, as the tokens the gate compares."""

from __future__ import annotations

BYPASS_EXPERIMENTAL_ARCH = "--experimental-arch"
BYPASS_TRUST_REMOTE_CODE = "--trust-remote-code"
FLAG_YES = "--yes"
FLAG_FORCE_DOWNLOAD = "--force-download"


def given_flags(*, yes: bool = False, force_download: bool = False, experimental_arch: bool = False,
                trust_remote_code: bool = False) -> frozenset[str]:
    flags = {FLAG_YES: yes, FLAG_FORCE_DOWNLOAD: force_download,
             BYPASS_EXPERIMENTAL_ARCH: experimental_arch, BYPASS_TRUST_REMOTE_CODE: trust_remote_code}
    return frozenset(k for k, v in flags.items() if v)
