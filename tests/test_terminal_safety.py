"""No string from a repo reaches the terminal as control characters or live rich markup.

A repo on the (fake) Hub plants an escape sequence, a C1 control, a bidi override, a carriage
return, a newline that would start a fake verdict line, and rich markup (``[link=…]``, ``[/]``)
in its architecture name, model type, a file name and a tensor name. Every command that prints
model facts runs against it, human and ``--json``; the output must hold no control character
(beyond the program's own newlines) and show the markup as the literal text it is.
"""

from __future__ import annotations

import json
import unicodedata

import pytest

from club3090.cli.render import safe, safe_markup, terminal_console
from tests.fakehub import FakeHub, safetensors_file, synth_table
from tests.test_cli_robustness import real_config, run

HOSTILE = "Evil\x1b[2J\x1b[32mFITS\x07\x9b31m\u202e[link=http://evil.example]click[/link][/]\r\nverdict: FITS-PLANTED"
MARKUP = "[link=http://evil.example]click[/link][/]"
RIG = ["--profile-like", "vllm/minimal", "--gpus", "1x3090"]


def _assert_inert(text: str) -> None:
    bad = [ch for ch in text if ch not in "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")]
    assert not bad, [hex(ord(c)) for c in bad]
    assert "\nverdict: FITS-PLANTED" not in text          # the planted newline never starts a line of its own


def _hostile_repo(hub: FakeHub) -> None:
    config = {**real_config(), "architectures": [HOSTILE], "model_type": "qwen3" + HOSTILE}
    table = synth_table(real_config(), layers=2)
    hub.add_repo("acme/hostile", {"config.json": json.dumps(config).encode(),
                                  "model.safetensors": safetensors_file("model.safetensors", table)})
    hub.add_repo("acme/hostile-gguf", {f"model{HOSTILE}.gguf": b"GGUF" + bytes(60)})
    bad_tensor = {f"w{HOSTILE}": ("BF16", [2]), "x": ("BF16", [2])}
    head = safetensors_file("model.safetensors", bad_tensor)
    head.prefix = head.prefix.replace(b'"BF16"', b'"BOGUS"', 1)           # an InputError naming the tensor
    hub.add_repo("acme/hostile-tensor", {"config.json": json.dumps(real_config()).encode(),
                                         "model.safetensors": head})


COMMANDS = [
    ["inspect", "acme/hostile"],
    ["kv-calc", "acme/hostile", "--gpus", "1x3090"],
    ["pull", "acme/hostile", *RIG, "--dry-run"],
    ["inspect", "acme/hostile-gguf"],
    ["kv-calc", "acme/hostile-gguf"],
    ["pull", "acme/hostile-gguf", *RIG, "--dry-run"],
    ["inspect", "acme/hostile-tensor"],
    ["kv-calc", "acme/hostile-tensor"],
    ["pull", "acme/hostile-tensor", *RIG, "--dry-run"],
]


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["human", "json"])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: f"{a[0]}-{a[1]}")
def test_planted_names_reach_the_terminal_inert(argv, json_flag, fake_hub: FakeHub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.chdir(fake_hub.settings().hf_home)
    _hostile_repo(fake_hub)
    code, out, err = run([*argv, *json_flag], capsys)
    # a verdict or malformed input, never an internal error; a control character in a listed file
    # name is a Hub fault (69: names from a listing are validated before they name anything)
    assert code in ((69,) if "gguf" in argv[1] else (0, 2, 65)), (code, err)
    _assert_inert(out)
    _assert_inert(err)
    if json_flag:
        json.loads(out)                             # the escapes keep the document valid JSON


def test_the_inspect_table_shows_markup_as_text(fake_hub: FakeHub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setenv("COLUMNS", "1000")           # no wrapping inside the planted name
    _hostile_repo(fake_hub)
    code, out, _ = run(["inspect", "acme/hostile"], capsys)
    assert code == 0 and MARKUP in out              # shown literally: not a live link, no crash on [/]
    assert "\\u001b[2J" in out                      # the escape is visible as text


def test_safe_helpers():
    assert safe("Qwen3ForCausalLM") == "Qwen3ForCausalLM"
    assert safe("a\x1bb\u202ec\nd") == "a\\u001bb\\u202ec\\u000ad"
    assert safe("a\nb\tc\x1b", multiline=True) == "a\nb\tc\\u001b"
    assert safe("Mistral-Ünïcödé 日本") == "Mistral-Ünïcödé 日本"
    assert safe("see http://u:p@host/x") == "see http://<credentials>@host/x"
    assert json.loads(safe(json.dumps({"k": "\x9b\u2028"}, ensure_ascii=False))) == {"k": "\x9b\u2028"}
    assert safe_markup("[/]") == "\\[/]"


def test_terminal_console_never_parses_markup(capsys):
    from rich.table import Table

    console = terminal_console(file=None, width=200)
    table = Table.grid()
    table.add_column()
    table.add_row("[/]" + "\x1b[2J")
    console.print(table)
    console.print("[bold]x[/bold] [/]")
    out = capsys.readouterr().out
    assert "[/]\\u001b[2J" in out and "[bold]x[/bold] [/]" in out


# --------------------------------------------------------------------------------------------
# the Loop: bundles and logs from other people's machines
# --------------------------------------------------------------------------------------------
def test_loop_and_calibrate_print_what_others_wrote_inert(tmp_path, monkeypatch, capsys):
    from tests.fixtures_path import fixture_path
    from tests.test_loop import e_bundle as green_e_bundle
    from tests.test_submit import e_bundle as failed_e_bundle
    from tests.test_submit import failed_boot

    name = HOSTILE.replace("/", "|")                                  # a file name cannot hold '/'
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(tmp_path / "state"))
    log = fixture_path("logs", "undefined_symbol.log").read_text().replace("undefined symbol: ",
                                                                          f"undefined symbol: {HOSTILE} ")
    failed_e_bundle(tmp_path / "failed", failed_boot(log))
    green_e_bundle(tmp_path / "caps", model=f"acme/{name}")
    startup = tmp_path / f"{name}.log"
    startup.write_text(fixture_path("logs", "startup_v064_profiling.log").read_text())
    for argv in (["loop", "classify", str(tmp_path / "failed")], ["loop", "classify", str(tmp_path / "failed"), "--json"],
                 ["calibrate", str(startup)], ["calibrate", str(startup), "--json"],
                 ["loop", "ingest", str(tmp_path / "caps")], ["loop", "list"], ["loop", "list", "--json"]):
        code, out, err = run(argv, capsys)
        assert code in (0, 2), (argv, code, err)
        _assert_inert(out)
        _assert_inert(err)
