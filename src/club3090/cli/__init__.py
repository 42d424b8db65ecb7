"""The ``club3090`` command: argument frame, the one error table, and exit codes.

Each subcommand lives in ``club3090.cli.commands.<name>`` and exposes ``add_parser(subparsers)``,
which registers its flags and sets ``run=<function(args, provider) -> int>``; the provider
(``club3090.edges.provider.LiveProvider`` unless ``main`` is given another) owns all I/O and
carries the settings. Command modules import their heavy dependencies inside ``run`` so that
``club3090 --help`` stays fast.

Exit codes: the one table in :mod:`club3090.cli.exit_codes` (verdicts 0/2/3/4; tool failures
64/65/69/70/78/130/141). A stdout closed early by its reader (``| head``) drops the rest of the
output silently and exits 141.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from club3090 import errors
from club3090.cli.exit_codes import CONFIG, DATAERR, INTERRUPTED, PIPE, SOFTWARE, UNAVAILABLE, USAGE, VERDICT_CODES
from club3090.outcome import Outcome
from club3090.settings import Settings
from club3090.version import __version__

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.pipeline.provider import Provider

ProviderFactory = Callable[[Settings], "Provider"]
REFUSED = VERDICT_CODES[Outcome.REFUSED]

# (subcommand, module). Order is the order of `club3090 --help`.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("pull", "club3090.cli.commands.pull"),
    ("fits", "club3090.cli.commands.fits"),
    ("kv-calc", "club3090.cli.commands.kv_calc"),
    ("inspect", "club3090.cli.commands.inspect"),
    ("compose", "club3090.cli.commands.compose"),
    ("profiles", "club3090.cli.commands.profiles"),
    ("verify", "club3090.cli.commands.verify"),
    ("verify-stress", "club3090.cli.commands.verify_stress"),
    ("bench", "club3090.cli.commands.bench"),
    ("soak", "club3090.cli.commands.soak"),
    ("calibrate", "club3090.cli.commands.calibrate"),
    ("loop", "club3090.cli.commands.loop"),
    ("up", "club3090.cli.commands.up"),
    ("swap", "club3090.cli.commands.swap"),
    ("down/status/logs", "club3090.cli.commands.served"),
)


def _catalog_message(exc: Exception) -> str:
    problems = getattr(exc, "problems", ())
    return "\n".join([f"catalog invalid ({len(problems)} problems):", *(f"  {p}" for p in problems)])


# each renderer receives an instance of its row's class (Any: the rows differ in attributes)
ERRORS: tuple[tuple[type[BaseException], int, Callable[[Any], str]], ...] = (
    (errors.HubOffline, UNAVAILABLE,
     lambda e: f"offline (HF_HUB_OFFLINE is set) and {e.repo_id} is not in the HF cache"
               + (f" ({e.detail})" if e.detail else "") + f"; fetch it once online: hf download {e.repo_id}"),
    (errors.HubFault, UNAVAILABLE,
     lambda e: f"the Hub answered {e.repo_id} with a value club3090 refuses to use ({e.detail}); "
               "nothing was written: check HF_ENDPOINT or the mirror"),
    (errors.UnverifiableWeights, DATAERR,
     lambda e: f"unverifiable weights in {e.repo_id}: {e.detail}; nothing was downloaded or started"),
    (errors.UpstreamUnreachable, UNAVAILABLE,
     lambda e: f"cannot reach the club-3090 file server at {e.url} ({e.detail}); "
               "check the network or CLUB3090_UPSTREAM_URL"),
    (errors.HubUnreachable, UNAVAILABLE,
     lambda e: f"cannot reach the Hub for {e.repo_id}; check the network or HF_ENDPOINT"
               + (f" ({e.detail})" if e.detail else "")),
    (errors.GatedRepo, REFUSED, lambda e: f"{e.repo_id} is gated; accept its terms on the Hub and set HF_TOKEN"),
    (errors.RevisionNotFound, REFUSED, lambda e: f"{e.repo_id}: revision not found"),
    (errors.RepoNotFound, REFUSED, lambda e: f"{e.repo_id}: repository not found (private repos need HF_TOKEN)"),
    (errors.HubError, UNAVAILABLE, lambda e: f"Hub error for {e.repo_id}: {e.detail}"),
    (errors.CatalogError, CONFIG, _catalog_message),
    (errors.LauncherUnavailable, UNAVAILABLE, str),
    (errors.InputError, DATAERR, lambda e: f"invalid input: {e}"),
    (errors.UsageError, USAGE, lambda e: f"club3090: error: {e}"),
    (errors.Club3090Error, SOFTWARE, lambda e: f"error: {e}"),
    (KeyboardInterrupt, INTERRUPTED, lambda e: "interrupted"),
)


class UsageExit(SystemExit):
    """What ``Parser.error`` raises: exit 64, carrying the message for ``--json``."""

    def __init__(self, message: str) -> None:
        super().__init__(USAGE)
        self.message = message


class Parser(argparse.ArgumentParser):
    """argparse that exits 64 on usage errors (sysexits EX_USAGE), not 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise UsageExit(f"{self.prog}: error: {message}")


class _VersionAction(argparse.Action):
    """``--version``: the package and the catalog it ships, with the upstream commit the catalog
    was synced from (the catalog is read only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the version, the catalog version and its upstream commit, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from club3090.catalog import load_catalog
        catalog = load_catalog()
        commit = catalog.upstream_commit or "unknown"
        sys.stdout.write(f"club3090 {__version__}\ncatalog {catalog.version} (schema "
                         f"{catalog.schema_version}), synced from club-3090 {commit}\n")
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> Parser:
    """The whole parser; with ``argv`` naming a command, only that command's subparser (importing
    and building every command costs a tenth of a second that ``fits`` does not need). Help, an
    unknown command or none at all get the whole parser."""
    parser = Parser(prog="club3090",
                    description="Will this Hugging Face model run on my GPUs under vLLM? "
                                "Header-only fit prediction, an honest gate, a ready compose file.")
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--debug", action="store_true", help="print tracebacks for internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in _command_modules(argv):
        importlib.import_module(module).add_parser(sub)
    for name, command in sub.choices.items():
        _add_examples(name, command)
    return parser


def _command_modules(argv: Sequence[str] | None) -> list[str]:
    """The modules to register: the one ``argv``'s command word names, else all of them."""
    rest = list(argv or ())
    while rest and rest[0] == "--debug":        # the one top-level flag that does not end the run
        rest.pop(0)
    named = [module for names, module in COMMANDS if rest and rest[0] in names.split("/")]
    return named or [module for _names, module in COMMANDS]


# `--help` ends with these for every command that does not list its own
EXAMPLES: dict[str, tuple[str, ...]] = {
    "kv-calc": ("club3090 kv-calc microsoft/phi-4 --gpus 2x4090",
                "club3090 kv-calc vllm/dual --max-model-len auto",
                "club3090 kv-calc ./my-model -tp 2 --gpu-memory-utilization 0.9 --gpus 2x3090"),
    "inspect": ("club3090 inspect Qwen/Qwen2.5-7B", "club3090 inspect ./my-model --json"),
    "compose": ("club3090 compose --profile vllm/minimal --out compose.yml", "club3090 compose --list"),
    "profiles": ("club3090 profiles", "club3090 profiles --gpus 2x3090 --json"),
    "verify": ("club3090 verify", "club3090 verify --url http://127.0.0.1:8000 --full"),
    "bench": ("club3090 bench --runs 3", "club3090 bench --prefill 500 --out bench.json"),
    "soak": ("club3090 soak --mode quick", "club3090 soak --mode continuous --out-dir soak/"),
    "calibrate": ("club3090 calibrate vllm-startup.log", "docker logs vllm 2>&1 | club3090 calibrate -"),
    "loop": ("club3090 loop ingest", "club3090 loop list", "club3090 loop classify --json"),
}


def _add_examples(name: str, command: argparse.ArgumentParser) -> None:
    lines = EXAMPLES.get(name)
    if not lines or "examples:" in (command.epilog or ""):
        return
    text = "examples:\n" + "\n".join(f"  {line}" for line in lines)
    command.epilog = f"{command.epilog}\n\n{text}" if command.epilog else text
    command.formatter_class = argparse.RawDescriptionHelpFormatter


def _stdio_utf8() -> None:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(encoding="utf-8")


def _fd_identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _devnull_identity() -> tuple[int, int] | None:
    try:
        st = os.stat(os.devnull)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _reader_gone() -> bool:
    """True when stdout is a pipe whose reader has closed it (a BrokenPipeError is stdout's)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() (Windows) or no real stdout
        return True


def _stdout_closed() -> int:
    """Silence stdout for good, as the Python docs advise for SIGPIPE, so the exit flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return PIPE


def main(argv: Sequence[str] | None = None, *, provider: ProviderFactory | None = None) -> int:
    """Run one command. ``provider(settings)`` makes the Provider the command's I/O goes through
    (default: ``LiveProvider(settings)``); tests pass a live one with pieces replaced."""
    stdout_before = _fd_identity(1)
    try:
        return _main(argv, provider)
    except BrokenPipeError:
        return _stdout_closed()
    except SystemExit as exc:
        # rich handles a broken pipe itself: stdout onto /dev/null, then SystemExit(1)
        if exc.code == 1 and stdout_before != _devnull_identity() and _fd_identity(1) == _devnull_identity():
            return PIPE
        raise


def _main(argv: Sequence[str] | None, make_provider: ProviderFactory | None) -> int:
    _stdio_utf8()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except UsageExit as exc:  # argparse's own usage errors still honour --json
        options = argv[:argv.index("--")] if "--" in argv else argv
        if "--json" in options:
            _json_error(USAGE, exc.message)
        raise
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return USAGE
    settings = Settings.from_env(hf_home_flag=getattr(args, "hf_home", None), debug=args.debug)
    if getattr(args, "allow_xet", False):
        settings = dataclasses.replace(settings, allow_xet=True)
    try:
        if make_provider is None:
            from club3090.edges.provider import LiveProvider

            make_provider = LiveProvider
        code = int(args.run(args, make_provider(settings)))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit flush
        return code
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        if isinstance(exc, BrokenPipeError) and _reader_gone():
            return _stdout_closed()
        for kind, code, render in ERRORS:
            if isinstance(exc, kind):
                if settings.debug and code == SOFTWARE:
                    raise
                _report(args, code, render(exc))
                return code
        if settings.debug:
            raise
        _report(args, SOFTWARE, f"internal error: {exc!r} (re-run with --debug)")
        return SOFTWARE


def _report(args: argparse.Namespace, code: int, message: str) -> None:
    from club3090.cli.render import safe

    message = safe(message, multiline=True)   # names from a repo or the Hub are data, never terminal control
    print(message, file=sys.stderr)
    if getattr(args, "json", False):
        _json_error(code, message)


def _json_error(code: int, message: str) -> None:
    print(json.dumps({"ok": False, "exit_code": code, "error": message}, ensure_ascii=False))


def entry() -> NoReturn:  # pragma: no cover - console script shim
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
