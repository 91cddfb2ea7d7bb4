"""Test helpers that ship with the package (Ray workers must be able to import them).

- :mod:`adaptive_eval.testing.tiny_model`: builds a tiny random-weight Llama/Qwen2 model and a
  byte-level BPE tokenizer with a chat template in a local folder (no hub), for real vLLM engines
  on CPU in tests, and a ~1.5B Qwen2-shaped random model for GPU benchmarks.
- :mod:`adaptive_eval.testing.flaky_server`: a loopback OpenAI-compatible server that fails on
  purpose (429/500/dropped connections/hangs), for the ``openai`` backend's retry tests.

Neither module imports torch, transformers or vllm at import time.
"""
