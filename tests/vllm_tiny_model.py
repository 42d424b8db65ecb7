"""Build and train a tiny Llama that answers club3090's verify prompts as a real model would.

Run with the interpreter of vLLM's CPU build (it has torch, transformers and tokenizers); it imports
nothing from club3090: the prompts come as JSON on stdin (tests/test_real_vllm.py sends the ones
``club3090.validate`` asks), so the model learns exactly what the checks ask::

    python tests/vllm_tiny_model.py OUT_DIR < spec.json

The model (hidden 128, 2 heads of 64 — the CPU attention kernel refuses a head_dim under 64) is
trained for a few hundred CPU steps to answer "Paris" and stop, count to ten, call ``get_weather``
in the hermes format when tools are offered (the verify and the agent prompt), write ``add`` in a
Python block, answer 42 to the marble sum, answer after a tool result, write a long answer of
varied words (no end token) for the long-output prompt, answer "OK" after a haystack, and give a
short answer of varied words to anything else. Its chat template renders tools, tool calls and
tool results (Qwen / hermes style), so vLLM serves it with ``--tool-call-parser hermes``.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 3090
STEPS = 300
BATCH = 8
LONG_EVERY = 2             # one long example (the long answer or a haystack) every this many steps
LR = 4e-3
VOCAB = 1024
MAX_POSITIONS = 2560       # the model's limit: vLLM refuses a larger --max-model-len
LONG_ANSWER_WORDS = 1100   # the long-output check needs >= 1024 tokens of 2048: a filler word is one token

TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n"
    "{%- for t in tools %}\n{{ t.function.name }}: {{ t.function.description }} "
    "{{ t.function.parameters | tojson }}{%- endfor %}\n"
    "Call a tool as <tool_call>\n{\"name\": NAME, \"arguments\": ARGS}\n</tool_call><|im_end|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
    "{%- for tc in m.tool_calls %}{% set a = tc.function.arguments %}<tool_call>\n"
    "{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ a if a is string else a | tojson }}}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content if m.content is string else '' }}<|im_end|>\n"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
FILLER_TEXT = ("the a of and to in is that for on with as by at from this it which are be or an was can "
          "system model data network packet window signal value state memory layer engine server client "
          "request answer river stone light water bridge garden city market road paper music story winter "
          "summer morning evening quiet bright careful simple rapid steady gentle ancient modern early late "
          "build measure explain follow compare choose carry gather shape write read open close move turn "
          "because while after before under over between across through during without within around "
          "first second third many several every other each small large long short strong clear")
FILLER = FILLER_TEXT.split()
# the long answer's own words: once it has begun, its words say "keep going" (a short answer ends with ".")
LONG_TEXT = ("congestion window segment acknowledgement sender receiver timeout retransmit threshold bandwidth "
             "latency throughput queue buffer router link loss probe pacing cubic bbr slow start avoidance "
             "recovery duplicate estimate growth backoff flow control round trip delay rate capacity fairness")
LONG_WORDS = LONG_TEXT.split()
CODE_ANSWER = "```python\ndef add(a, b):\n    return a + b\n```"
CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Tokyo", "Oslo", "Lisbon"]


def words(rng: random.Random, n: int, vocabulary: list[str] = FILLER, end: str = ".") -> str:
    text = " ".join(rng.choice(vocabulary) for _ in range(n))
    return text[0].upper() + text[1:] + end


def call(city: str) -> str:
    return f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}\n</tool_call>'


def haystack(rng: random.Random, spec: dict[str, Any], n_words: int) -> str:
    hay = spec["haystack_words"]
    start = rng.randrange(97)
    body = " ".join(f"{hay[(start + i) % len(hay)]}{(start + i) % 97}" for i in range(n_words))
    return f"[salt {rng.getrandbits(128):032x}] {body}{spec['haystack_suffix']}"


def short_example(rng: random.Random, spec: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, str]:
    """(messages, tools, answer) of one short training conversation."""
    tool = spec["tool"]
    kind = rng.choices(["capital", "count", "tool", "after-tool", "generic", "multi", "hay", "agent", "coding",
                        "reasoning"], weights=[3, 2, 4, 2, 4, 2, 1, 2, 2, 2])[0]
    if kind == "capital":
        return [{"role": "user", "content": spec["capital"]}], None, "Paris"
    if kind == "count":
        return [{"role": "user", "content": spec["count"]}], None, ", ".join(str(i) for i in range(1, 11))
    if kind in ("tool", "agent"):
        return [{"role": "user", "content": spec["tool_prompt" if kind == "tool" else "agent"]}], [tool], call("Paris")
    if kind == "coding":
        return [{"role": "user", "content": spec["coding"]}], None, CODE_ANSWER
    if kind == "reasoning":
        return [{"role": "user", "content": spec["reasoning"]}], None, f"17 + 25 = {spec['reasoning_answer']}"
    if kind == "after-tool":
        city = rng.choice(CITIES)
        result = json.dumps({"city": city, "sky": "clear", "temperature_c": 21})
        messages = [{"role": "user", "content": spec["tool_prompt"]},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": city}}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": result}]
        return messages, [tool], f"It is clear and 21 degrees in {city} right now."
    if kind == "hay":
        return [{"role": "user", "content": haystack(rng, spec, rng.randint(15, 50))}], None, "OK"
    if kind == "multi":
        messages: list[dict[str, Any]] = [{"role": "system", "content": spec["system"]}]
        for _ in range(rng.randint(1, 2)):
            messages += [{"role": "user", "content": rng.choice(spec["generic"])},
                         {"role": "assistant", "content": words(rng, rng.randint(5, 15))}]
        messages.append({"role": "user", "content": rng.choice(spec["generic"])})
        return messages, None, words(rng, rng.randint(5, 20))
    prompt = rng.choice(spec["generic"]) if rng.random() < 0.7 else words(rng, rng.randint(3, 12))
    if "{i}" in prompt:
        prompt = prompt.format(i=rng.randint(0, 63))
    head = [{"role": "system", "content": spec["system"]}] if rng.random() < 0.3 else []
    return [*head, {"role": "user", "content": prompt}], None, words(rng, rng.randint(5, 25))


def long_example(rng: random.Random, spec: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, str, bool]:
    """(messages, tools, answer, ends): the long-output answer never ends; a haystack near the context does."""
    if rng.random() < 0.75:
        return [{"role": "user", "content": spec["long"]}], None, words(rng, LONG_ANSWER_WORDS, LONG_WORDS, ""), False
    return [{"role": "user", "content": haystack(rng, spec, rng.randint(300, 900))}], None, "OK", True


def build_tokenizer(spec: dict[str, Any]) -> PreTrainedTokenizerFast:
    rng = random.Random(SEED)
    sentences = [" ".join(rng.sample(FILLER + LONG_WORDS, len(FILLER) + len(LONG_WORDS))) for _ in range(8)]
    corpus = [TEMPLATE, *sentences, *CITIES, CODE_ANSWER, spec["agent"], spec["coding"], spec["reasoning"], *spec["generic"], spec["capital"], spec["count"], spec["tool_prompt"],
              spec["long"], spec["system"], json.dumps(spec["tool"]), call("Paris"), haystack(rng, spec, 400),
              ", ".join(str(i) for i in range(100))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus * 4, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = TEMPLATE
    fast.model_max_length = MAX_POSITIONS
    return fast


def encode(tok: PreTrainedTokenizerFast, messages: list[dict[str, Any]], tools: Any, answer: str,
           ends: bool = True) -> tuple[list[int], list[int]]:
    prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    head = tok(prompt, add_special_tokens=False)["input_ids"]
    tail = tok(answer + ("<|im_end|>" if ends else ""), add_special_tokens=False)["input_ids"]
    ids = (head + tail)[:MAX_POSITIONS]
    return ids, ([-100] * len(head) + tail)[:MAX_POSITIONS]


def batch(pairs: list[tuple[list[int], list[int]]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in pairs)
    ids = torch.full((len(pairs), width), pad)
    labels = torch.full((len(pairs), width), -100)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for row, (i, lab) in enumerate(pairs):
        ids[row, :len(i)], labels[row, :len(lab)], mask[row, :len(i)] = torch.tensor(i), torch.tensor(lab), 1
    return ids, labels, mask


def train(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, spec: dict[str, Any]) -> float:
    rng = random.Random(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    pad = tok.pad_token_id
    loss_value = float("nan")
    for step in range(STEPS):
        scale = min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / STEPS))
        for group in opt.param_groups:
            group["lr"] = LR * max(scale, 0.05)
        groups = [[encode(tok, *short_example(rng, spec)) for _ in range(BATCH)]]
        if step % LONG_EVERY == 0:
            groups.append([encode(tok, *long_example(rng, spec))])
        opt.zero_grad()
        for pairs in groups:
            ids, labels, mask = batch(pairs, pad)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            loss_value = float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 40 == 0:
            print(f"step {step} loss {loss_value:.3f} {time.monotonic():.0f}", file=sys.stderr, flush=True)
    return loss_value


def main() -> int:
    out = Path(sys.argv[1])
    spec = json.load(sys.stdin)
    random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)     # tiny matrices: more threads only spin, worst on a shared machine
    t0 = time.monotonic()
    tok = build_tokenizer(spec)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                         max_position_embeddings=MAX_POSITIONS, rope_theta=10000.0, tie_word_embeddings=False,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    model = LlamaForCausalLM(config)
    loss = train(model, tok, spec)
    model = model.to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    report = {"steps": STEPS, "final_loss": round(loss, 4), "seconds": round(time.monotonic() - t0, 1)}
    (out / "training.json").write_text(json.dumps(report), encoding="utf-8")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
