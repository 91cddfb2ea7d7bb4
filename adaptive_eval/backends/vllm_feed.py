"""The vllm backend's feed: the continuous feed's view of a ``vllm.LLM`` engine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class VllmFeedEngine:
    """The feed's view of a ``vllm.LLM``: ``enqueue`` adds requests (the LLM renders and
    validates them as ``generate`` would), ``llm_engine.step`` runs the engine."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.engine = llm.llm_engine
        self._ids: dict[str, str] = {}  # the id outputs carry (external or internal) -> ours

    def add(self, items: Sequence[tuple[Any, Any]]) -> list[str]:
        prompts = [prompt for prompt, _ in items]
        params = [param for _, param in items]
        ids = [str(rid) for rid in self.llm.enqueue(prompts, params, use_tqdm=False)]
        for rid in ids:
            self._ids[rid] = rid
            # Outputs carry the external id: vLLM appends "-<random>" to it internally.
            self._ids.setdefault(rid.rsplit("-", 1)[0], rid)
        return ids

    def step(self) -> list[tuple[str, Any]]:
        finished = []
        for output in self.engine.step():
            if not getattr(output, "finished", False):
                continue
            rid = self._ids.pop(str(output.request_id), str(output.request_id))
            self._ids.pop(rid, None)
            self._ids.pop(rid.rsplit("-", 1)[0], None)
            finished.append((rid, output))
        return finished

    def abort(self, ids: Sequence[str]) -> None:
        for rid in ids:
            self._ids.pop(rid, None)
            self._ids.pop(rid.rsplit("-", 1)[0], None)
        self.engine.abort_request(list(ids), internal=True)

    def drain(self) -> None:
        """Step the engine until it holds nothing (after an abort it may not have honoured)."""
        self._ids.clear()
        while self.engine.has_unfinished_requests():
            self.engine.step()
