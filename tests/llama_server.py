"""A real OpenAI-compatible server for tests: llama.cpp's server (``llama-cpp-python[server]``)
serving a tiny GGUF model that this module writes with the ``gguf`` package (a fixture, not product code).

The model is a one-layer llama whose attention and MLP outputs are zero, so the next token depends
only on the current one (a bigram table written into the embedding and output matrices): greedy
decoding, and any sampling at ordinary temperatures, follows the table. The chat template joins the
messages' contents with a space, so the last word of the last message picks the answer:

- ``...one word.`` -> `` Paris.`` then end of stream (``finish_reason: stop``);
- ``...not lists.`` -> ``LONG_TOKENS`` distinct words, then end of stream;
- ``...tool.`` -> ``{"city": "Paris"}`` (so a named ``tool_choice``, which llama.cpp's server
  decodes under a JSON-schema grammar, yields a well-formed ``get_weather`` call);
- anything else -> ``DEFAULT_TOKENS`` distinct words, then end of stream.

Reusable outside pytest: ``write_model(path)`` writes the file and ``start_server(model, port)``
starts the server and waits for ``/v1/models`` (``LlamaServer.stop()`` ends it). The fixture
``llama_server`` is session-scoped: one start per test run.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

MODEL_ID = "tiny-llama"
N_CTX = 8192
N_EMBD = 256
N_HEAD = 4
N_FF = 32
LONG_TOKENS = 1100
DEFAULT_TOKENS = 24
STARTUP_TIMEOUT_S = 120.0
SPACE = "\u2581"             # SentencePiece's word-boundary mark

# the last word of each prompt the table answers (club3090.validate's prompts end with these)
TRIGGER_PARIS = "word."
TRIGGER_LONG = "lists."
TRIGGER_TOOL = "tool."
TOOL_PIECES = ('{"', "city", '":', SPACE + '"', "Paris", '"}')
TEMPLATE = ("{% for message in messages %}{% if not loop.first %}{{ ' ' }}{% endif %}"
            "{{ message['content'] or '' }}{% endfor %}")

_SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "va", "zu", "fe", "gi", "ho", "ju", "bo",
              "ce", "wa", "xi", "yo", "qu", "ny", "sa", "te", "ru", "pi", "do", "ve", "za", "fu", "ga", "hi",
              "jo", "bu", "co", "we", "xa", "ye", "lu", "me")


def _words(n: int, offset: int) -> list[str]:
    """``n`` distinct three-syllable words (so no long window of the text repeats)."""
    out: list[str] = []
    k = len(_SYLLABLES)
    i = offset
    while len(out) < n:
        a, b, c = i % k, (i // k) % k, (i // (k * k)) % k
        out.append(SPACE + _SYLLABLES[a] + _SYLLABLES[b] + _SYLLABLES[c])
        i += 1
    return out


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    types: list[int]
    scores: list[float]
    successor: dict[int, int]      # token id -> next token id (absent: the default chain's first word)
    default_start: int
    eos: int


def build_vocab() -> Vocab:
    import gguf

    normal, control, byte = (gguf.TokenType.NORMAL, gguf.TokenType.CONTROL, gguf.TokenType.BYTE)
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, control, control]
    scores = [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(byte)
        scores.append(0.0)
    index: dict[str, int] = {}
    # the word mark and printable ASCII as tokens of their own: about one token per character, as
    # real tokenizers (byte fallback alone would spend three tokens on every space)
    for ch in [SPACE, *map(chr, range(33, 127))]:
        index[ch] = len(tokens)
        tokens.append(ch)
        types.append(normal)
        scores.append(0.0)

    def add(text: str, score: float) -> int:
        if text in index:
            return index[text]
        index[text] = len(tokens)
        tokens.append(text)
        types.append(normal)
        scores.append(score)
        return index[text]

    def add_word(word: str) -> int:
        """The word and every prefix from its start: SentencePiece merges through them into one token."""
        piece = SPACE + word
        for end in range(2, len(piece) + 1):
            add(piece[:end], float(end))
        return index[piece]

    successor: dict[int, int] = {}

    def chain(start: int, pieces: list[str]) -> None:
        ids = [add(p, -1.0) for p in pieces]
        prev = start
        for t in ids:
            successor[prev] = t
            prev = t
        successor[prev] = 2

    chain(add_word(TRIGGER_PARIS), [SPACE + "Paris."])
    chain(add_word(TRIGGER_LONG), _words(LONG_TOKENS, 0))
    chain(add_word(TRIGGER_TOOL), list(TOOL_PIECES))
    default = _words(DEFAULT_TOKENS, 50_000)
    default_ids = [add(p, -1.0) for p in default]
    for a, b in itertools.pairwise(default_ids):
        successor[a] = b
    successor[default_ids[-1]] = 2
    return Vocab(tokens, [int(t) for t in types], scores, successor, default_ids[0], 2)


def write_model(path: Path, *, seed: int = 1234) -> Path:
    """Write the tiny bigram llama as GGUF at ``path``."""
    import gguf
    import numpy as np

    vocab = build_vocab()
    n_vocab = len(vocab.tokens)
    rng = np.random.default_rng(seed)
    # random +-1 codes (nearly orthogonal at this width); the last dimension flags "no designed successor"
    embd = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=(n_vocab, N_EMBD))
    embd[:, -1] = 0.0
    has_next = np.zeros(n_vocab, dtype=bool)
    has_next[list(vocab.successor)] = True
    embd[~has_next, -1] = 1.0
    out = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    for tok, nxt in vocab.successor.items():
        out[nxt, :-1] += embd[tok, :-1]
    out[vocab.default_start, -1] = 4.0 * N_EMBD        # beats any chance match of the random codes
    zeros_sq = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(MODEL_ID)
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(vocab.eos)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", out)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    small = rng.normal(0, 0.02, size=(N_EMBD, N_EMBD)).astype(np.float32)
    writer.add_tensor("blk.0.attn_q.weight", small)
    writer.add_tensor("blk.0.attn_k.weight", small.copy())
    writer.add_tensor("blk.0.attn_v.weight", small.copy())
    writer.add_tensor("blk.0.attn_output.weight", zeros_sq)            # attention adds nothing ...
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", np.ones((N_FF, N_EMBD), dtype=np.float32) * 0.01)
    writer.add_tensor("blk.0.ffn_up.weight", np.ones((N_FF, N_EMBD), dtype=np.float32) * 0.01)
    writer.add_tensor("blk.0.ffn_down.weight", np.zeros((N_EMBD, N_FF), dtype=np.float32))  # ... nor the MLP
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    process: subprocess.Popen[bytes]
    port: int
    model_path: Path
    log_path: Path
    startup_s: float
    n_ctx: int = N_CTX

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        return MODEL_ID

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


def _models_ready(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/models", timeout=2) as resp:
            return resp.status == 200 and bool(json.loads(resp.read(65536)).get("data"))
    except (OSError, ValueError):
        return False


def start_server(model_path: Path, port: int, *, log_path: Path | None = None, n_ctx: int = N_CTX,
                 alias: str = MODEL_ID, timeout_s: float = STARTUP_TIMEOUT_S, interrupt_requests: bool = False,
                 python: str = sys.executable) -> LlamaServer:
    """Start ``python -m llama_cpp.server`` on ``model_path`` at 127.0.0.1:``port``; wait for ``/v1/models``.

    ``interrupt_requests`` is llama-cpp-python's own default (True): a new request cuts a running
    stream short. Off here, so that concurrent streams queue and complete.
    """
    log_path = log_path or model_path.with_suffix(".log")
    argv = [python, "-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", alias,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "1",
            "--n_threads_batch", "1", "--verbose", "False", "--interrupt_requests", str(interrupt_requests)]
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = LlamaServer(process, port, model_path, log_path, 0.0, n_ctx)
    while time.monotonic() - t0 < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with {process.returncode}:\n{server.log_tail()}")
        if _models_ready(server.url):
            server.startup_s = time.monotonic() - t0
            return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"llama.cpp server not ready after {timeout_s:.0f}s:\n{server.log_tail()}")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    folder = tmp_path_factory.mktemp("llama")
    model = write_model(folder / "tiny-llama.gguf")
    server = start_server(model, free_port())
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.stop()
