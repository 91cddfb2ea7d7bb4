"""The vllm backend's requests: a trial's prompt and sampling parameters rendered for the
engine, and the engine's output turned back into a graded-ready sample."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from adaptive_eval.backends.generation import GenerationSetup
from adaptive_eval.backends.generation_worker import Generated, TrialRequest
from adaptive_eval.backends.vllm_setup import VllmSettings
from adaptive_eval.base.errors import BackendError
from adaptive_eval.grading import GeneratedSample


def _actual_logprob(position: Any, token_id: int) -> float | None:
    """The log-prob of ``token_id`` at one position (a dict token id -> Logprob)."""
    if not position:
        return None
    entry = position.get(token_id)
    if entry is None:  # logprobs=0 holds just the chosen/actual token
        entry = next(iter(position.values()))
    value = float(entry.logprob)
    return value if math.isfinite(value) else None


def prompt_logprob_sum(prompt_ids: Sequence[int], prompt_logprobs: Any) -> float | None:
    """Sum of the prompt tokens' log-probs (the first token has none and is skipped)."""
    if not prompt_logprobs:
        return None
    total = 0.0
    for token_id, position in zip(prompt_ids, prompt_logprobs, strict=False):
        if position is None:
            continue
        value = _actual_logprob(position, token_id)
        if value is None:
            return None
        total += value
    return total


def bench_max_tokens(seed: int, settings: VllmSettings) -> int:
    """``bench_lengths``: a request's max_tokens, heavy-tailed and drawn from its trial seed."""
    import numpy as np

    from adaptive_eval.backends.simulated import heavy_tail_lengths

    assert settings.bench_lengths is not None
    median, ratio = settings.bench_lengths
    return int(heavy_tail_lengths(np.asarray([seed], dtype=np.int64), median, ratio)[0])


def render_prompt(
    tokenizer: Any, setup: GenerationSetup, settings: VllmSettings, question: int
) -> list[int]:
    """The token ids of a question's prompt through the model's chat template (or
    ``options.chat_template``), with the generation prompt added."""
    kwargs: dict[str, Any] = {"add_generation_prompt": True, "tokenize": False}
    if settings.chat_template is not None:
        kwargs["chat_template"] = settings.chat_template
    text = tokenizer.apply_chat_template(setup.messages(question), **kwargs)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def sampling_params(
    request: TrialRequest,
    prompt_len: int,
    setup: GenerationSetup,
    settings: VllmSettings,
    max_model_len: int | None,
) -> Any:
    """One trial's ``SamplingParams``: ``n=1`` with the trial's own seed, ``max_tokens`` capped
    by the room ``max_model_len`` leaves after the prompt (and by the benchmark's drawn length)."""
    from vllm import SamplingParams

    sampling = setup.sampling
    max_tokens = sampling.max_tokens
    if max_model_len is not None:
        room = max_model_len - prompt_len
        if room < 1:
            raise BackendError(
                f"question {setup.question_ids[request.question]!r}: the prompt has "
                f"{prompt_len} tokens, which leaves no room under max_model_len="
                f"{max_model_len}; raise {settings.entry_field}.options.max_model_len"
            )
        max_tokens = min(max_tokens, room)
    if settings.bench_lengths is not None:
        max_tokens = min(max_tokens, bench_max_tokens(request.seed, settings))
    return SamplingParams(
        n=1,
        seed=request.seed,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=max_tokens,
        ignore_eos=sampling.ignore_eos,
        logprobs=0 if sampling.logprobs else None,
        prompt_logprobs=0 if sampling.prompt_logprobs else None,
        **settings.sampling_extra,
    )


def convert(output: Any, params: Any, latency: float, device: str) -> Generated:
    """A ``RequestOutput`` as the sample the grader reads, with the engine's extras."""
    completion = output.outputs[0]
    prompt_ids = list(output.prompt_token_ids or [])
    cumulative = completion.cumulative_logprob if params.logprobs is not None else None
    prompt_sum = (
        prompt_logprob_sum(prompt_ids, output.prompt_logprobs)
        if params.prompt_logprobs is not None
        else None
    )
    stop_reason = completion.stop_reason
    sample = GeneratedSample(
        text=completion.text,
        completion_tokens=len(completion.token_ids),
        prompt_tokens=len(prompt_ids),
        finish_reason=completion.finish_reason,
        cumulative_logprob=None if cumulative is None else float(cumulative),
        prompt_logprob_sum=prompt_sum,
        latency_s=latency,
    )
    extra = {
        "stop_reason": None if stop_reason is None else str(stop_reason),
        "max_tokens": params.max_tokens,
        "device": device,
        "prompt_logprob_tokens": max(len(prompt_ids) - 1, 0) if prompt_sum is not None else None,
    }
    return Generated(sample, extra)
