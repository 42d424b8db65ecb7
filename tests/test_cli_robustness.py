"""Black-box robustness of the ``club3090`` command: hostile input never yields a traceback.

Every case goes through ``club3090.main([...])`` and asserts only the exit code (the table
in ``club3090.cli``'s docstring), that no traceback is printed and, with ``--json``, that stdout
is exactly one JSON document. Wording is never asserted.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from club3090 import cli
from club3090.cli import exit_codes
from tests.fakehub import FIXTURES, safetensors_file, synth_table
from tests.providers import FixedFacts, plenty_of_disk

CURATED = "Lorbus/Qwen3.6-27B-int4-AutoRound"
RIG = ["--profile-like", "vllm/minimal", "--gpus", "1x3090"]
DOCUMENTED = {0, 1, 2, 3, 4, 64, 65, 69, 70, 78, 130, 141}



def main(argv, **kw):
    """``cli.main`` with the live provider and plenty of free disk."""
    return cli.main(argv, provider=kw.pop("provider", plenty_of_disk), **kw)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def run(argv: list[str], capsys: pytest.CaptureFixture[str], provider=plenty_of_disk) -> tuple[int, str, str]:
    """(exit code, stdout, stderr); argparse's SystemExit counts as an exit code."""
    try:
        code = main(argv, provider=provider)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    assert code in DOCUMENTED, (code, err)
    if "--json" in argv and "--help" not in argv:
        doc = json.loads(out)  # exactly one JSON document, nothing else on stdout
        assert isinstance(doc, dict)
        if "exit_code" in doc:
            assert doc["exit_code"] == code
    return code, out, err


# --------------------------------------------------------------------------------------------
# model folders built from the real configs plus tiny synthetic safetensors
# --------------------------------------------------------------------------------------------
def real_config(name: str = "Qwen--Qwen3-0.6B") -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text(encoding="utf-8"))


def write_safetensors(path: Path, config: dict) -> None:
    f = safetensors_file(path.name, synth_table(config, layers=2))
    with path.open("wb") as handle:  # a sparse file: real header, zero data
        handle.write(f.prefix)
        handle.truncate(f.size)


def model_folder(root: Path, name: str = "model", *, config: object = None, raw_config: bytes | None = None,
                 weights: bytes | None = None) -> Path:
    folder = root / name
    folder.mkdir()
    base = real_config()
    if raw_config is not None:
        (folder / "config.json").write_bytes(raw_config)
    else:
        (folder / "config.json").write_text(json.dumps(base if config is None else config), encoding="utf-8")
    if weights is None:
        write_safetensors(folder / "model.safetensors", base)
    else:
        (folder / "model.safetensors").write_bytes(weights)
    return folder


def header_bytes(doc: object, data: int = 0) -> bytes:
    raw = json.dumps(doc).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data


# --------------------------------------------------------------------------------------------
# the argument frame
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [[], ["pull"], ["kv-calc"], ["inspect"], ["compose"], ["profiles"]])
def test_every_help_works(command, capsys):
    code, out, _ = run([*command, "--help"], capsys)
    assert code == 0 and out.strip()


@pytest.mark.parametrize("argv", [
    [],
    ["nonsense"],
    ["--bogus"],
    ["pull"],
    ["pull", "--profile-like", "vllm/minimal"],
    ["pull", "org/name", "-tp", "0"],
    ["pull", "org/name", "extra", "--profile-like", "vllm/minimal"],
    ["pull", "org/name", "--profile-like", ""],
    ["pull", "--submit-last", "--submit", "."],
    ["inspect"],
    ["inspect", "a/b", "c/d"],
    ["compose"],
    ["compose", "--profile", "no/such-profile"],
    ["compose", "--profile", "vllm/minimal", "--format", "xml"],
    ["profiles", "extra"],
])
def test_usage_errors_exit_64(argv, capsys):
    assert run(argv, capsys)[0] == 64


@pytest.mark.parametrize("spec", ["0x3090", "x", "2x", "1x-5GiB", "99x3090", "1xfoo", "", ",", "0:foo",
                                  "1x0GiB", "1x99999999TiB", "99999999999999:foo", "9" * 5000 + "x3090",
                                  "9" * 5000 + ":foo", "1x" + "9" * 5000 + "GiB", "\u0661x3090"])
def test_gpus_garbage_is_a_usage_error(spec, tmp_path, capsys):
    folder = model_folder(tmp_path)
    assert run(["pull", str(folder), "--profile-like", "vllm/minimal", "--dry-run", "--gpus", spec], capsys)[0] == 64
    assert run(["profiles", "--gpus", spec], capsys)[0] == 64
    assert run(["profiles", "--gpus", spec, "--json"], capsys)[0] == 64


@pytest.mark.parametrize("sm, code", [("abc", 64), ("nan", 64), ("-1", 64), ("9" * 5000, 64), ("99", None)])
def test_hardware_values(sm, code, tmp_path, capsys):
    folder = model_folder(tmp_path)
    got = run(["pull", str(folder), *RIG, "--dry-run", "--hardware", sm, "--json"], capsys)[0]
    assert got == code if code is not None else got in (0, 2, 3)


def test_unknown_profile_like_is_a_stratum_2_stop(tmp_path, capsys):
    folder = model_folder(tmp_path)
    code, out, _ = run(["pull", str(folder), "--profile-like", "no/such", "--gpus", "1x3090", "--dry-run",
                        "--json"], capsys)
    assert code == 2 and json.loads(out)["stratum"] == 2


def test_size_only_gpus_without_hardware_stops_cleanly(tmp_path, capsys):
    folder = model_folder(tmp_path)
    code, out, _ = run(["pull", str(folder), "--profile-like", "vllm/minimal", "--gpus", "1x24GiB",
                        "--dry-run", "--json"], capsys)
    assert code == 2 and json.loads(out)["reason"] == "hardware-sm-undetermined"


# --------------------------------------------------------------------------------------------
# sources: paths, folders, config.json
# --------------------------------------------------------------------------------------------
def test_a_file_is_not_a_model_folder(tmp_path, capsys):
    folder = model_folder(tmp_path)
    for target in (folder / "config.json", folder / "model.safetensors"):
        code, out, _ = run(["inspect", str(target), "--json"], capsys)
        assert code == 2 and json.loads(out)["stratum"] == 1
        assert run(["pull", str(target), *RIG, "--dry-run", "--json"], capsys)[0] == 2


def test_folder_without_config(tmp_path, capsys):
    folder = model_folder(tmp_path)
    (folder / "config.json").unlink()
    code, out, _ = run(["inspect", str(folder), "--json"], capsys)
    assert code == 2 and json.loads(out)["reason"] == "unsupported-format"


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("raw", [b"[1, 2]", b"42", b"null", b'"text"', b"", b"{", b"\xff\xfe{}",
                                 b'{"architectures": ["Qwen3ForCausalLM"], "x": "\xff"}',
                                 b'{"a": "' + b"x" * (17 * 1024 * 1024) + b'"}',
                                 _nested(100_000), b'{"hidden_size": ' + b"9" * 5000 + b"}"],
                         ids=["list", "number", "null", "string", "empty", "broken", "utf16-bom", "non-utf8",
                              "huge", "deeply-nested", "5000-digit-int"])
def test_malformed_config_json_is_a_stratum_1_stop(raw, tmp_path, capsys):
    folder = model_folder(tmp_path, raw_config=raw)
    code, out, _ = run(["inspect", str(folder), "--json"], capsys)
    assert code == 2 and json.loads(out)["stratum"] == 1
    assert run(["pull", str(folder), *RIG, "--dry-run", "--json"], capsys)[0] == 2


def _variant(**changes: object) -> dict:
    config = real_config()
    for key, value in changes.items():
        if value is ...:
            config.pop(key, None)
        else:
            config[key] = value
    return config


@pytest.mark.parametrize("config", [
    _variant(num_hidden_layers="28", hidden_size="1024", num_attention_heads="16"),
    _variant(num_hidden_layers=-5), _variant(num_hidden_layers=0), _variant(num_hidden_layers=28.5),
    _variant(num_hidden_layers=True), _variant(num_attention_heads=0), _variant(num_key_value_heads=0),
    _variant(head_dim=-128), _variant(hidden_size=1024.0), _variant(architectures=[]),
    _variant(architectures=None), _variant(architectures="Qwen3ForCausalLM"), _variant(architectures=[5]),
    _variant(architectures=...), _variant(max_position_embeddings=-1), _variant(max_position_embeddings="x"),
    _variant(max_position_embeddings=10**30), _variant(vocab_size=10**18), _variant(torch_dtype=["x"]),
    _variant(quantization_config=[1]), _variant(quantization_config="awq"),
    _variant(quantization_config={"quant_method": 5, "bits": "4"}), _variant(text_config="x"),
    _variant(layer_types="full_attention"), _variant(layer_types=[1, 2]), _variant(rope_scaling="yarn"),
    _variant(num_experts=-8, num_experts_per_tok=2), _variant(num_experts="8"), {},
    _variant(num_hidden_layers=10**6), _variant(num_hidden_layers=10**7),   # once 41 s / 1.4 GB
    _variant(max_position_embeddings=0),
])
def test_odd_config_values_never_crash(config, tmp_path, capsys):
    folder = model_folder(tmp_path, config=config)
    assert run(["inspect", str(folder), "--json"], capsys)[0] in (0, 2)
    assert run(["pull", str(folder), *RIG, "--dry-run", "--json"], capsys)[0] in (0, 2, 3)


# --------------------------------------------------------------------------------------------
# safetensors headers
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", [
    b"", b"\x10\x00\x00",                                             # shorter than the 8-byte prefix
    struct.pack("<Q", 100) + b'{"a":',                               # truncated header
    struct.pack("<Q", 2**63) + b"{}",                                # absurd header length
    struct.pack("<Q", 2**64 - 1) + b"{}",
    struct.pack("<Q", 1) + b"{",                                     # too small to be an object
    struct.pack("<Q", 8) + b"notjson!",                              # not JSON
    struct.pack("<Q", 8) + b'"\xff\xfe"    ',                         # not UTF-8
    struct.pack("<Q", 2) + b"[]",                                    # JSON, not an object
    header_bytes({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 0]}}, 8),     # end < start
    header_bytes({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [-4, 0]}}, 8),
    header_bytes({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0.0, 4.0]}}, 8),
    header_bytes({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, 1),     # beyond the file
    header_bytes({"w": {"dtype": "BF16", "shape": [2**62], "data_offsets": [0, 2**63]}}, 1),
    header_bytes({"w": {"dtype": "BF16", "shape": [10**30], "data_offsets": [0, 4]}}, 8),
    header_bytes({"w": {"dtype": "BF16", "shape": "2", "data_offsets": [0, 4]}}, 8),
    header_bytes({"w": [1, 2]}, 8),
    header_bytes({"__metadata__": [1]}),
    header_bytes({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},           # overlapping ranges
                  "b": {"dtype": "BF16", "shape": [2], "data_offsets": [2, 6]}}, 6),
    header_bytes({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},           # a gap
                  "b": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]}}, 12),
    header_bytes({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, 8),      # bytes no tensor owns
    header_bytes({"w": {"dtype": "Q4_WEIRD", "shape": [2], "data_offsets": [0, 4]}}, 4),  # unknown dtype
    header_bytes({"w": {"dtype": "BF16", "shape": [2**40, 2**40], "data_offsets": [0, 4]}}, 4),
    struct.pack("<Q", 120) + b'{"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, '  # duplicate key
    b'"w": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}' + b"\0" * 8,
], ids=lambda b: f"{len(b)}b")
def test_malformed_safetensors_is_malformed_input(weights, tmp_path, capsys):
    folder = model_folder(tmp_path, weights=weights)
    assert run(["inspect", str(folder), "--json"], capsys)[0] == 65
    assert run(["pull", str(folder), *RIG, "--dry-run", "--json"], capsys)[0] == 65


@pytest.mark.parametrize("raw", [_nested(100_000), b'{"w": {"dtype": "BF16", "shape": [' + b"9" * 5000
                                 + b'], "data_offsets": [0, 4]}}'], ids=["deep", "5000-digit"])
def test_hostile_safetensors_json_is_malformed_input(raw, tmp_path, capsys):
    folder = model_folder(tmp_path, weights=struct.pack("<Q", len(raw)) + raw + b"\0" * 8)
    assert run(["inspect", str(folder), "--json"], capsys)[0] == 65
    assert run(["kv-calc", str(folder), "--json"], capsys)[0] == 65
    assert run(["pull", str(folder), *RIG, "--dry-run", "--json"], capsys)[0] == 65


def test_malformed_index_is_malformed_input(tmp_path, capsys):
    folder = model_folder(tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    for raw in (b"[]", b"\xff", _nested(100_000), b'{"weight_map": {"a": 5}}'):
        (folder / "model.safetensors.index.json").write_bytes(raw)
        assert run(["inspect", str(folder), "--json"], capsys)[0] == 65


# --------------------------------------------------------------------------------------------
# repo ids (never reach the network when malformed)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["org name/model x", "org/../etc", "org/name/extra", "组织/模型",
                                    "Qwen/Qwen3\u20100.6B", "ab/" + "a" * 300, "a" * 97 + "/b",
                                    "org/name--x", "org/name.", "org/name.git", "org/-name", "org/name@",
                                    "~no-such-user-club3090/x", "@", "   "])
def test_malformed_repo_ids_stop_without_a_request(source, fake_hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    code, out, _ = run(["inspect", source, "--json"], capsys)
    assert code == 2 and json.loads(out)["stratum"] == 1
    assert run(["pull", source, *RIG, "--dry-run", "--json"], capsys)[0] == 2
    assert fake_hub.requests() == []


def test_empty_revision_is_not_the_default_branch_even_for_a_curated_repo(capsys):
    assert run(["pull", f"{CURATED}@", *RIG, "--dry-run", "--json"], capsys)[0] == 2


def test_offline_and_uncached_is_unavailable(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run(["inspect", "Qwen/Qwen3-0.6B", "--json"], capsys)[0] == 69
    assert run(["pull", "Qwen/Qwen3-0.6B", *RIG, "--json"], capsys)[0] == 69
    assert run(["pull", "Qwen/Qwen3-0.6B", *RIG], capsys)[0] == 69


def test_hub_repo_with_hostile_files(fake_hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    config = json.dumps(real_config()).encode()
    fake_hub.add_repo("org/list-config", {"config.json": b"[1]", "model.safetensors": b"x" * 16})
    fake_hub.add_repo("org/deep-config", {"config.json": _nested(100_000), "model.safetensors": b"x" * 16})
    fake_hub.add_repo("org/huge-header", {"config.json": config,
                                          "model.safetensors": struct.pack("<Q", 2**63) + b"{}"})
    fake_hub.add_repo("org/bad-offsets", {"config.json": config, "model.safetensors": header_bytes(
        {"w": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 0]}}, 8)})
    assert run(["inspect", "org/list-config", "--json"], capsys)[0] == 2
    assert run(["inspect", "org/deep-config", "--json"], capsys)[0] == 2
    assert run(["inspect", "org/huge-header", "--json"], capsys)[0] == 65
    assert run(["inspect", "org/bad-offsets", "--json"], capsys)[0] == 65
    assert run(["inspect", "org/missing", "--json"], capsys)[0] == 2


# --------------------------------------------------------------------------------------------
# --out
# --------------------------------------------------------------------------------------------
PULL_OUT = ["pull", CURATED, *RIG]


@pytest.mark.parametrize("command", [PULL_OUT, ["compose", "--profile", "vllm/minimal"]])
def test_out_targets(command, tmp_path, capsys):
    new = tmp_path / "missing" / "deeper" / "compose.yml"
    assert run([*command, "--out", str(new)], capsys)[0] == 0 and new.is_file()
    assert run([*command, "--out", str(new)], capsys)[0] == 64                 # exists, no --force
    assert run([*command, "--out", str(new), "--force"], capsys)[0] == 0
    assert run([*command, "--out", str(tmp_path), "--force"], capsys)[0] == 64  # a folder
    assert run([*command, "--out", "", "--force"], capsys)[0] == 64             # "" is the cwd
    blocker = tmp_path / "a-file"
    blocker.write_text("keep", encoding="utf-8")
    for force in ([], ["--force"]):                                          # parent is a file
        assert run([*command, "--out", str(blocker / "x.yml"), *force], capsys)[0] == 64
    assert blocker.read_text(encoding="utf-8") == "keep"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert run([*command, "--out", str(fifo), "--force"], capsys)[0] == 64     # never replace a node
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert run([*command, "--out", str(fifo), "--force", "--json"], capsys)[0] == 64


@pytest.mark.parametrize("command", [PULL_OUT, ["compose", "--profile", "vllm/minimal"]])
def test_out_into_a_symlink_writes_its_target(command, tmp_path, capsys):
    target = tmp_path / "real.yml"
    target.write_text("old", encoding="utf-8")
    link = tmp_path / "link.yml"
    link.symlink_to(target)
    assert run([*command, "--out", str(link), "--force"], capsys)[0] == 0
    assert link.is_symlink() and "services:" in target.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", [PULL_OUT, ["compose", "--profile", "vllm/minimal"]])
def test_out_unwritable_is_a_clean_error(command, tmp_path, monkeypatch, capsys):
    import club3090.edges.files as fsutil

    def denied(*_a, **_k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(fsutil.tempfile, "mkstemp", denied)
    assert run([*command, "--out", str(tmp_path / "c.yml")], capsys)[0] == 64
    assert run([*command, "--out", str(tmp_path / "c.yml"), "--json"], capsys)[0] == 64


def test_dry_run_ignores_a_bad_out(tmp_path, capsys):
    assert run(["pull", CURATED, *RIG, "--dry-run", "--out", str(tmp_path)], capsys)[0] == 0


# --------------------------------------------------------------------------------------------
# --json on error paths, interrupts, the exit-code table
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["pull", "x/y", "--profile-like", "vllm/minimal", "--hardware", "abc", "--json"],
    ["pull", "x/y", "--json", "--bogus"],
    ["pull", "--json"],
    ["pull", "--submit-last", "--json"],
    ["pull", "--submit", "nowhere", "--json"],
    ["compose", "--json"],
    ["compose", "--profile", "nope", "--json"],
    ["inspect", "--json"],
    ["inspect", "a/b", "c", "--json"],
    ["profiles", "--gpus", "1xfoo", "--json"],
    ["kv-calc", "--json", "--profile", "nope"],
])
def test_json_error_paths_print_one_document(argv, capsys):
    code, out, _ = run(argv, capsys)
    assert code == 64 and json.loads(out)["ok"] is False


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_interrupt_during_derive(json_flag, tmp_path, capsys):
    def interrupted(settings):
        return FixedFacts(settings, facts=KeyboardInterrupt())
    folder = model_folder(tmp_path)
    assert run(["pull", str(folder), *RIG, "--dry-run", *json_flag], capsys, interrupted)[0] == 130
    assert run(["inspect", str(folder), *json_flag], capsys, interrupted)[0] == 130


def test_exit_codes_are_documented():
    """Every code the CLI can return is a row of the one table (cli/exit_codes.py's docstring)."""
    from club3090.cli import exit_codes

    documented = {int(n) for n in re.findall(r"^(\d+) ", exit_codes.__doc__ or "", re.MULTILINE)}
    used = {code for _kind, code, _render in cli.ERRORS}
    used |= set(exit_codes.VERDICT_CODES.values()) | set(exit_codes.TOOL_FAILURE_CODES)
    assert used == documented == DOCUMENTED, (used ^ documented)


# --------------------------------------------------------------------------------------------
# a reader that closes stdout early (`club3090 profiles | head -1`)
# --------------------------------------------------------------------------------------------
_MAIN = "import sys\nfrom club3090.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def _piped(argv: list[str], tmp_path: Path, *, read: int | None) -> subprocess.CompletedProcess:
    """Run the CLI into a pipe; the reader takes ``read`` bytes (None: none) and closes its end."""
    import fcntl

    r, w = os.pipe()
    if read is not None:  # a one-page pipe: the output cannot all fit before the reader closes
        if not hasattr(fcntl, "F_SETPIPE_SZ"):
            pytest.skip("needs F_SETPIPE_SZ (Linux) to make the race deterministic")
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    # PYTHONUNBUFFERED makes CPython drop the tail of a partial pipe write silently: not what users run
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["CLUB3090_NO_GPU_DETECT"] = "1"
    proc = subprocess.Popen([sys.executable, "-c", _MAIN, *argv], stdout=w, stderr=subprocess.PIPE,
                            cwd=tmp_path, env=env)
    os.close(w)
    if read is not None:
        assert os.read(r, read)
    os.close(r)
    _, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, b"", err)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")
@pytest.mark.parametrize("argv", [["profiles"], ["profiles", "--json"]], ids=["rich-table", "json"])
@pytest.mark.parametrize("read", [None, 1, 200])
def test_reader_closing_early_exits_141_quietly(argv, read, tmp_path):
    done = _piped(argv, tmp_path, read=read)
    assert done.returncode == exit_codes.PIPE, done.stderr
    assert done.stderr == b""  # no traceback, no "Exception ignored" at the exit flush


def test_broken_pipe_not_on_stdout_is_still_an_internal_error(monkeypatch, capsys):
    # a BrokenPipeError from elsewhere (a subprocess, a socket) while stdout is fine is a failure
    def boom(_args, _provider):
        raise BrokenPipeError(32, "Broken pipe")

    from club3090.cli.commands import profiles

    monkeypatch.setattr(cli, "_reader_gone", lambda: False)
    monkeypatch.setattr(profiles, "run", boom)
    assert main(["profiles"]) == exit_codes.SOFTWARE
    assert main(["profiles", "--json"]) == exit_codes.SOFTWARE
    capsys.readouterr()


# --------------------------------------------------------------------------------------------
# start-up cost
# --------------------------------------------------------------------------------------------
HEAVY = ("torch", "transformers", "vllm", "huggingface_hub")


def _imports_after(argv: list[str], tmp_path: Path) -> tuple[int, list[str]]:
    script = ("import sys\nfrom club3090.cli import main\n"
              f"try:\n    code = main({argv!r})\nexcept SystemExit as e:\n    code = e.code\n"
              f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n"
              "sys.exit(code)\n")
    env = {**os.environ, "CLUB3090_NO_GPU_DETECT": "1"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env, check=False)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("HEAVY"))
    return proc.returncode, eval(line[len("HEAVY "):])


def test_help_and_local_pull_import_nothing_heavy(tmp_path):
    assert _imports_after(["--help"], tmp_path) == (0, [])
    for name in ("pull", "inspect", "compose", "profiles", "kv-calc"):
        assert _imports_after([name, "--help"], tmp_path) == (0, [])
    folder = model_folder(tmp_path)
    code, heavy = _imports_after(["pull", str(folder), *RIG, "--dry-run"], tmp_path)
    assert code in (0, 2, 3) and heavy == []
    code, heavy = _imports_after(["pull", CURATED, *RIG, "--dry-run"], tmp_path)
    assert code == 0 and heavy == []


def test_python_dash_m_runs_the_cli() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "club3090", "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("club3090 ")
