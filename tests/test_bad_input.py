"""Issue 16, item 4: bad input is refused before sampling.

The rule: whatever can be checked before sampling is checked by ``validate`` and by ``run``
before the first trial. Every case below must end with exit code 2, one line on stderr that names
the file (or the option), the field and the value, no traceback, and no trial recorded. Config
cases go through both ``validate`` and ``run`` (in-process, Ray replaced by the in-process
dispatcher, which would record trials if the run got that far); command-line cases go through
their command.
"""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    TEST_DISPATCH,
    base_config,
    mimic_success,
    run_inline,
    trials_in,
    write_config,
    write_scenario,
)

from adaptive_eval.command_line.cli import main
from adaptive_eval.config.schema import load_config
from adaptive_eval.inputs.datasets import ARITH20
from adaptive_eval.workflows.imports import MAX_MAP_ENTRIES

NAMES = ["a", "b", "c"]
QUESTIONS = 6


@dataclass(frozen=True)
class Case:
    """A config made bad: ``--set`` overrides (applied to the config file itself, so the file
    is what is refused) or a raw config text; ``expect`` must be in the error line."""

    id: str
    expect: str
    overrides: tuple[str, ...] = ()
    text: str | None = None


def case(ident: str, expect: str, *overrides: str) -> Any:
    return pytest.param(Case(ident, expect, overrides), id=ident)


def raw(ident: str, expect: str, text: str) -> Any:
    return pytest.param(Case(ident, expect, text=text), id=ident)


OPENAI = (
    'models=[{backend: openai, name: srv, options: {base_url: "http://127.0.0.1:9/v1"}}]',
    "dataset={path: ds.jsonl}",
)


def openai(ident: str, expect: str, *overrides: str) -> Any:
    return case(ident, expect, *OPENAI, *overrides)


def replay(ident: str, expect: str, path: str, *overrides: str) -> Any:
    return case(ident, expect, f"models=[{{backend: replay, path: {path}}}]", *overrides)


def scenario(ident: str, expect: str, path: str) -> Any:
    return case(ident, expect, f"models[0].path={path}")


CONFIG_CASES = [
    # -- rubric ----------------------------------------------------------------------------
    case("weights-overflow", "keep them within", "rubric.weights=[0, 1e308]"),
    case("weights-overflow-negative", "keep them within", "rubric.weights=[0, -1e308]"),
    case("weights-huge", "keep them within", "rubric.weights=[1.0e+7, 0]"),
    case("weights-equal", "every model would score the same", "rubric.weights=[1, 1]"),
    case("weights-zero", "every model would score the same", "rubric.weights=[0, 0]"),
    case("weights-three-equal", "score the same", "rubric.weights=[0.5, 0.5, 0.5]"),
    case("weights-nan", "finite", "rubric.weights=[.nan, 1]"),
    case("weights-inf", "finite", "rubric.weights=[0, .inf]"),
    case("weights-minus-inf", "finite", "rubric.weights=[-.inf, 0]"),
    case("weights-empty", "at least 2", "rubric.weights=[]"),
    case("weights-one", "at least 2", "rubric.weights=[1]"),
    case("weights-text", "valid number", "rubric.weights=[a, b]"),
    case("weights-bool", "valid number", "rubric.weights=[0, true]"),
    case("weights-vs-categories", "one weight per category", "rubric.weights=[0, 0.5, 1]"),
    case("weights-scalar", "valid list", "rubric.weights=0.5"),
    case("rubric-empty", "rubric.weights", "rubric={}"),
    # -- policy ----------------------------------------------------------------------------
    case("rope-equal-range", "not below the range", "policy.rope=1"),
    case("rope-above-range", "not below the range", "policy.rope=1.5"),
    case("rope-inf", "finite", "policy.rope=.inf"),
    case("rope-negative", "greater than or equal to 0", "policy.rope=-0.1"),
    case("rope-nan", "finite", "policy.rope=.nan"),
    case("rope-bool", "valid number", "policy.rope=true"),
    case(
        "rope-vs-weights-0-100", "not below the range", "rubric.weights=[0, 100]", "policy.rope=100"
    ),
    case("confidence-one", "less than 1", "policy.confidence=1"),
    case("confidence-half", "greater than 0.5", "policy.confidence=0.5"),
    case("confidence-nan", "finite", "policy.confidence=.nan"),
    case("confidence-big", "less than 1", "policy.confidence=1.5"),
    case("confidence-bool", "valid number", "policy.confidence=true"),
    case("confidence-text", "valid number", "policy.confidence=high"),
    case("error-control", "'pair' or 'ranking'", "policy.error_control=both"),
    case("min-trials-zero", "greater than or equal to 1", "policy.min_trials_per_question=0"),
    case("max-trials-zero", "greater than or equal to 1", "policy.max_trials_per_question=0"),
    case("min-above-max", "exceeds", "policy.min_trials_per_question=50"),
    case("max-trials-huge", "less than or equal to", "policy.max_trials_per_question=10000000"),
    case("max-trials-float", "valid integer", "policy.max_trials_per_question=1.0e+12"),
    case("max-trials-fraction", "valid integer", "policy.max_trials_per_question=2.5"),
    case("round-trials-zero", "greater than or equal to 1", "policy.round_trials=0"),
    case("round-trials-huge", "less than or equal to", "policy.round_trials=1000000000000"),
    case("allocation-unknown", "unknown allocation policy 'nope'", "policy.allocation=nope"),
    case("allocation-spec-unknown", "unknown allocation", "policy.allocation={name: nope}"),
    case(
        "allocation-bad-scheme",
        "questions must be one of",
        "policy.allocation={name: track_and_stop, questions: bogus}",
    ),
    case(
        "allocation-fraction",
        "trials_per_round must be an integer >= 1, got 2.5",
        "policy.allocation={name: uniform, trials_per_round: 2.5}",
    ),
    case(
        "allocation-bool",
        "trials_per_round must be an integer >= 1, got True",
        "policy.allocation={name: uniform, trials_per_round: true}",
    ),
    case(
        "allocation-unknown-param",
        "no parameter 'extra'",
        "policy.allocation={name: uniform, extra: 1}",
    ),
    case("pair-rule-unknown", "unknown pair rule 'nope'", "policy.pair_rules=[nope]"),
    case("rope-rule-nan", "finite", "policy.pair_rules=[{name: rope, epsilon: .nan}]"),
    case("rope-rule-range", "not below the range", "policy.pair_rules=[{name: rope, epsilon: 1}]"),
    case("rope-rule-negative", "epsilon must be", "policy.pair_rules=[{name: rope, epsilon: -1}]"),
    case(
        "looks-fraction",
        "looks must be an integer",
        "policy.pair_rules=[{name: group_sequential, looks: 2.5}]",
    ),
    case("looks-zero", "looks must be", "policy.pair_rules=[{name: group_sequential, looks: 0}]"),
    case(
        "first-look-nan",
        "first_look must be a number in (0, 1], got nan",
        "policy.pair_rules=[{name: group_sequential, first_look: .nan}]",
    ),
    case(
        "spending-unknown",
        "spending must be",
        "policy.pair_rules=[{name: group_sequential, spending: bogus}]",
    ),
    case(
        "epsilon-range",
        "not below the range",
        "policy.pair_rules=[{name: group_sequential, epsilon: 1.5}]",
    ),
    case(
        "naive-looks-bool",
        "looks must be an integer",
        "policy.pair_rules=[{name: naive_z, looks: true}]",
    ),
    case(
        "naive-confidence-inf",
        "confidence must be a number in (0.5, 1), got inf",
        "policy.pair_rules=[{name: naive_z, confidence: .inf}]",
    ),
    case("anytime-grid", "grid must be", "policy.pair_rules=[{name: anytime, grid: 0}]"),
    case("anytime-sd", "tuned_sd must be", "policy.pair_rules=[{name: anytime, tuned_sd: -1}]"),
    case("stopping-unknown", "unknown stopping rule 'nope'", "policy.stopping=[nope]"),
    case(
        "ci-width-nan",
        "width must be a finite number > 0, got nan",
        "policy.stopping=[{name: ci_width, width: .nan}]",
    ),
    case(
        "ci-width-zero",
        "width must be a finite number > 0, got 0",
        "policy.stopping=[{name: ci_width, width: 0}]",
    ),
    case(
        "ci-width-inf",
        "width must be a finite number > 0, got inf",
        "policy.stopping=[{name: ci_width, width: .inf}]",
    ),
    case("ci-width-missing", "width", "policy.stopping=[{name: ci_width}]"),
    case("max-trials-rule-zero", "n must be", "policy.stopping=[{name: max_trials, n: 0}]"),
    case(
        "max-trials-rule-fraction",
        "n must be an integer >= 1, got 2.7",
        "policy.stopping=[{name: max_trials, n: 2.7}]",
    ),
    case(
        "max-trials-rule-bool",
        "n must be an integer >= 1, got True",
        "policy.stopping=[{name: max_trials, n: true}]",
    ),
    case(
        "budget-rule-negative",
        "trials must be an integer >= 1, got -1",
        "policy.stopping=[{name: budget, trials: -1}]",
    ),
    case("prior-missing", "file not found", "policy.prior={path: missing.npz}"),
    case("prior-shape", "does not match", "policy.prior={path: prior_shape.npz}"),
    case("prior-no-array", "missing", "policy.prior={path: s.npz}"),
    case("prior-float", "dtype kind", "policy.prior={path: s.npz, key: probs}"),
    case(
        "prior-max-negative",
        "greater than or equal to 0",
        "policy.prior={path: p.npz, max_trials: -1}",
    ),
    case("prior-categories", "outside 0..1", "policy.prior={path: prior_cat.npz}"),
    case("policy-unknown-key", "unknown key", "policy.unknown=1"),
    # Issue 22, failure 5: no pair rule decides nothing; the campaign sampled to the cap.
    case("pair-rules-empty", "no pair could ever be decided", "policy.pair_rules=[]"),
    # -- budget, baseline ------------------------------------------------------------------
    case("budget-trials-zero", "greater than or equal to 1", "budget.trials=0"),
    case("budget-trials-negative", "greater than or equal to 1", "budget.trials=-5"),
    case("budget-trials-fraction", "valid integer", "budget.trials=2.5"),
    case("budget-tokens-zero", "greater than or equal to 1", "budget.tokens=0"),
    case("budget-wall-zero", "greater than 0", "budget.wall_clock_s=0"),
    case("budget-wall-inf", "finite", "budget.wall_clock_s=.inf"),
    case("budget-wall-nan", "finite", "budget.wall_clock_s=.nan"),
    case("budget-wall-negative", "greater than 0", "budget.wall_clock_s=-1"),
    case("fixed-n-zero", "greater than or equal to 1", "baseline.fixed_n=0"),
    case("fixed-n-huge", "less than or equal to", "baseline.fixed_n=1000000000"),
    case("fixed-n-bool", "valid integer", "baseline.fixed_n=true"),
    # -- execution, output -----------------------------------------------------------------
    case("workers-zero", "greater than or equal to 1", "execution.workers=0"),
    case("workers-negative", "greater than or equal to 1", "execution.workers=-1"),
    case("workers-1e9", "valid integer", "execution.workers=1e9"),
    case("workers-billion", "less than or equal to 1024", "execution.workers=1000000000"),
    case("workers-fraction", "valid integer", "execution.workers=2.5"),
    case("workers-bool", "valid integer", "execution.workers=true"),
    case("workers-text", "valid integer", "execution.workers=many"),
    case("batch-size-zero", "greater than or equal to 1", "execution.batch_size=0"),
    case("batch-size-huge", "less than or equal to", "execution.batch_size=1000000000000"),
    case("in-flight-zero", "greater than or equal to 1", "execution.in_flight_per_worker=0"),
    case("rounds-in-flight-zero", "greater than or equal to 1", "execution.rounds_in_flight=0"),
    case("rounds-in-flight-huge", "less than or equal to 64", "execution.rounds_in_flight=1000"),
    case("retries-negative", "greater than or equal to 0", "execution.max_batch_retries=-1"),
    case("num-cpus-zero", "greater than or equal to 1", "execution.num_cpus=0"),
    case("num-cpus-huge", "less than or equal to", "execution.num_cpus=1000000000"),
    case("prefetch-negative", "greater than or equal to 0", "execution.prefetch_trials=-1"),
    case("gpu-slots-zero", "greater than or equal to 1", "execution.gpu_slots=0"),
    case("prefetch-removed", "speculative prefetch was removed", "execution.prefetch_trials=10"),
    case("execution-unknown-key", "unknown key", "execution.unknown=1"),
    case("fsync-unknown", "'full' or 'normal'", "output.fsync=sometimes"),
    case("compare-margin-config-nan", "finite", "compare={margin: .nan}"),
    case("compare-margin-config-zero", "greater than 0", "compare={margin: 0}"),
    case("compare-margin-config-range", "not below the range", "compare={margin: 1}"),
    case("keep-completions-text", "valid boolean", 'output.keep_completions="yes"'),
    case("progress-number", "valid boolean", "output.progress=1"),
    # -- top level -------------------------------------------------------------------------
    case("seed-true", "valid integer", "seed=true"),
    case("seed-fraction", "valid integer", "seed=2.5"),
    case("seed-negative", "greater than or equal to 0", "seed=-1"),
    case("seed-huge", "less than or equal to", "seed=18446744073709551616"),
    case("seed-text", "valid integer", "seed=abc"),
    case("name-empty", "must not be empty", 'name=""'),
    case("name-blank", "must not be empty", 'name="   "'),
    case("name-ansi", "control characters", 'name="\\e[31mred"'),
    case("name-newline", "control characters", 'name="two\\nlines"'),
    case("name-list", "valid string", "name=[a]"),
    case("name-number", "valid string", "name=5"),
    case("name-long", "at most 200", "name=" + "n" * 300),
    case("unknown-top-key", "unknown key", "unknown_top=1"),
    case("models-empty", "at least 1 item", "models=[]"),
    case("models-number", "valid list", "models=5"),
    case("models-item-number", "valid dictionary", "models=[5]"),
    case("library-not-sqlite", "not a trial library", "library=notes.txt"),
    case("library-other-sqlite", "not a trial library", "library=other.sqlite"),
    case("library-under-a-file", "is not a folder", "library=s.npz/lib.sqlite"),
    case(
        "credential-redacted",
        "[redacted]",
        *OPENAI,
        "models[0].options.headers={Authorization: '[redacted]'}",
    ),
    # -- a model entry ---------------------------------------------------------------------
    case("backend-unknown", "unknown backend 'nope'", "models[0].backend=nope"),
    case("backend-number", "valid string", "models[0].backend=5"),
    case("entry-unknown-key", "unknown key", "models[0].unknown=1"),
    case(
        "two-entries-same-models",
        "appears twice",
        "models=[{backend: simulated, path: s.npz}, {backend: simulated, path: s.npz}]",
    ),
    scenario("scenario-missing", "file not found", "missing.npz"),
    scenario("scenario-folder", "is a folder", "folder"),
    # Issue 22, failure 3: a device or a pipe never ends (validate used to hang at 9.7 GB).
    scenario("scenario-dev-zero", "/dev/zero is a device, not a file", "/dev/zero"),
    scenario("scenario-named-pipe", "pipe.npz is a named pipe", "pipe.npz"),
    case("prior-dev-zero", "is a device", "policy.prior={path: /dev/zero}"),
    replay("replay-dev-zero", "is a device", "/dev/zero"),
    openai("dataset-named-pipe", "is a named pipe", "dataset.path=pipe.npz"),
    case("library-dev-null", "is a device", "library=/dev/null"),
    # Issue 22, failure 15: unsigned values past int64 used to wrap to "negative category".
    replay("replay-uint64-huge", "value 9223372036854775809 at index", "r_u64.npz"),
    scenario("scenario-no-questions", "has no questions", "zero_q.npz"),
    scenario("scenario-no-models", "serves no model", "zero_m.npz"),
    scenario("scenario-one-category", "categories", "one_cat.npz"),
    scenario("scenario-negative", "negative probability", "neg.npz"),
    scenario("scenario-sum", "sum to", "sum.npz"),
    scenario("scenario-nan", "non-finite", "nanp.npz"),
    scenario("scenario-2d", "expected 3 dimensions", "probs2d.npz"),
    scenario("scenario-int", "dtype kind", "intprobs.npz"),
    scenario("scenario-no-probs", "'probs': missing", "noprobs.npz"),
    scenario("scenario-no-arrays", "arrays present: none", "empty.npz"),
    scenario("scenario-zero-bytes", "empty file", "zero.npz"),
    scenario("scenario-text", "not a zip", "text.npz"),
    scenario("scenario-pickle", "not a readable npz", "pickled.npz"),
    scenario("names-duplicate", "duplicate name 'a'", "names_dup.npz"),
    scenario("names-empty", "empty or holds control characters", "names_empty.npz"),
    scenario("names-ansi", "empty or holds control characters", "names_ansi.npz"),
    scenario("names-count", "has 3 names, expected 2", "names_count.npz"),
    scenario("question-ids-empty", "empty or holds control characters", "qids_empty.npz"),
    scenario("question-ids-duplicate", "duplicate name", "qids_dup.npz"),
    scenario("tokens-negative", "must be positive", "tokens_neg.npz"),
    scenario("tokens-shape", "does not match", "tokens_shape.npz"),
    case("select-empty", "at least 1 item", "models[0].select=[]"),
    case("select-unknown", "'nope' not in", "models[0].select=[nope]"),
    case("select-twice", "selects 'a' twice", "models[0].select=[a, a]"),
    case("select-string", "valid list", "models[0].select=a"),
    case("select-empty-name", "must not be empty", 'models[0].select=[""]'),
    case("entry-name-empty", "must not be empty", 'models[0].name=""'),
    case("entry-name-ansi", "control characters", 'models[0].name="\\e[2J"'),
    case("entry-workers-zero", "greater than or equal to 1", "models[0].workers=0"),
    case("entry-workers-huge", "less than or equal to 1024", "models[0].workers=1000000000"),
    case("latency-overflow", "less than or equal to", "models[0].latency={per_batch_s: 1e308}"),
    case("latency-inf", "finite", "models[0].latency={per_batch_s: .inf}"),
    case("latency-negative", "greater than or equal to 0", "models[0].latency={per_batch_s: -1}"),
    case("latency-trial", "less than or equal to", "models[0].latency={per_trial_s: 1e308}"),
    case("latency-token", "less than or equal to", "models[0].latency={per_token_s: 1e9}"),
    case("latency-median", "greater than 0", "models[0].latency={tokens_median: 0}"),
    case("latency-ratio", "greater than 1", "models[0].latency={tokens_p99_ratio: 1}"),
    case("latency-seqs", "greater than or equal to 1", "models[0].latency={engine_seqs: 0}"),
    case("latency-unknown", "unknown key", "models[0].latency={bogus: 1}"),
    case("options-unknown", "bogus", "models[0].options={bogus: 1}"),
    case("options-load-negative", "greater than or equal to 0", "models[0].options={load_s: -1}"),
    case("options-load-nan", "load_s", "models[0].options={load_s: .nan}"),
    case("options-swappable-text", "swappable", 'models[0].options={swappable: "yes"}'),
    # -- replay ----------------------------------------------------------------------------
    replay("replay-negative", "negative category", "r_neg.npz"),
    replay("replay-float", "dtype kind", "r_float.npz"),
    replay("replay-no-trials", "has no trials", "r_zero.npz"),
    replay("replay-category-beyond-weights", "outside 0..1", "r_big.npz"),
    replay("replay-tokens-shape", "differs from", "r_tokens.npz"),
    replay("replay-fixed-n", "exceeds the 5 trials", "r_ok.npz", "baseline.fixed_n=8"),
    # Issue 22, failure 4: a token budget a backend cannot count was accepted and ignored.
    replay(
        "budget-tokens-uncounted", "100 tokens cannot be counted", "r_ok.npz", "budget.tokens=100"
    ),
    replay("replay-missing", "file not found", "missing.npz"),
    # -- openai and its dataset ------------------------------------------------------------
    openai("openai-no-url", "needs options.base_url", "models[0].options={}"),
    openai("openai-url-scheme", "must start with http", "models[0].options.base_url=ftp://x"),
    openai("openai-concurrency", "must be >= 1", "models[0].options.max_concurrency=0"),
    openai("openai-timeout", "must be > 0", "models[0].options.timeout_s=0"),
    openai("openai-timeout-nan", "timeout_s", "models[0].options.timeout_s=.nan"),
    openai("openai-endpoint", "must be one of", "models[0].options.endpoint=bogus"),
    openai("openai-headers", "must be a mapping", "models[0].options.headers=x"),
    openai("openai-unknown-option", "unknown option", "models[0].options.bogus=1"),
    openai("openai-key-unset", "is not set", "models[0].options.api_key_env=NO_SUCH_VARIABLE_16"),
    openai("dataset-missing", "cannot read dataset", "dataset.path=missing.jsonl"),
    openai("dataset-empty", "no questions", "dataset.path=ds_empty.jsonl"),
    openai("dataset-bad-json", "invalid JSON", "dataset.path=ds_bad.jsonl"),
    openai("dataset-not-utf8", "not valid UTF-8", "dataset.path=ds_latin1.jsonl"),
    openai("dataset-duplicate-id", "duplicate id", "dataset.path=ds_dup.jsonl"),
    openai("dataset-no-answer", "missing answer", "dataset.path=ds_noanswer.jsonl"),
    openai("dataset-limit-zero", "greater than or equal to 1", "dataset.limit=0"),
    openai("dataset-template", "unknown placeholder", 'dataset.template="{nope}"'),
    openai("temperature-negative", "greater than or equal to 0", "sampling.temperature=-1"),
    openai("top-p-zero", "greater than 0", "sampling.top_p=0"),
    openai("max-tokens-zero", "greater than or equal to 1", "sampling.max_tokens=0"),
    openai("grader-unknown", "nope", "grader=nope"),
    # -- the file itself -------------------------------------------------------------------
    raw("yaml-duplicate-key", "duplicate key 'seed'", "SEED\nseed: 2\n"),
    raw("yaml-duplicate-nested", "duplicate key 'rope'", "policy: {rope: 0.1, rope: 0.2}\n"),
    raw("yaml-invalid", "invalid YAML", "models: [unclosed\n"),
    raw("yaml-list", "must be a mapping", "- a\n- b\n"),
    raw("yaml-empty", "must be a mapping", ""),
    raw("yaml-tab", "invalid YAML", "name: t\n\tseed: 1\n"),
    raw("yaml-control", "invalid YAML", "name: t\x07\n"),
    raw("yaml-python-tag", "invalid YAML", "name: !!python/object/apply:os.system [echo]\n"),
    raw("yaml-not-utf8", "not valid UTF-8", "name: caf\xe9\n"),
    raw("yaml-nul", "invalid YAML", "name: t\x00\n"),
    # Issue 22, failure 13: an alias bomb took 504 MB and printed a 28 MB line.
    raw("yaml-alias-bomb", "expands to more than 100,000 values", "BOMB"),
    raw("yaml-alias-cycle", "a cycle", "seed: &a [1, *a]\n"),
    # -- --set ------------------------------------------------------------------------------
    case("set-bad-yaml", "invalid YAML", "seed=[1"),
    case("set-no-key", "bad key part", "=3"),
    case("set-no-equals", "is not KEY=VALUE", "seed"),
    case("set-empty-part", "bad key part", "policy..rope=1"),
    case("set-no-item", "models[9]", "models[9].workers=1"),
    case("set-into-scalar", "is not a mapping", "seed.x=1"),
    case("set-duplicate-key", "duplicate key 'a'", "models[0].options={a: 1, a: 2}"),
    case("set-control", "invalid YAML", "name=\x1b[31m"),
    # -- issue 29, section 4: deep nesting, hostile paths, npz files, numbers ----------------
    raw("yaml-deep-flow-list", "nested more than 64 levels", "x: " + "[" * 500 + "]" * 500),
    raw("yaml-deep-flow-map", "nested more than 64 levels", "x: " + "{a: " * 500 + "1" + "}" * 500),
    raw(
        "yaml-deep-block",
        "nested more than 64 levels",
        "".join("  " * i + f"k{i}:\n" for i in range(500)) + "  " * 500 + "1\n",
    ),
    case(
        "options-deep",
        "nested more than 64 levels",
        "models[0].options={a: " + "[" * 300 + "]" * 300 + "}",
    ),
    case(
        "all-of-deep",
        "nested more than 64 levels",
        "policy.stopping=[" + "{name: all_of, rules: [" * 300 + "pairs_settled" + "]}" * 300 + "]",
    ),
    case("set-many-parts", "more than 64 parts", "a" + ".b" * 3000 + "=1"),
    case(
        "path-nul",
        "models[0].path: 's\\x00.npz' holds a NUL character",
        'models[0].path="s\\0.npz"',
    ),
    case("path-symlink-loop", "Symlink loop", "models[0].path=loop1"),
    case(
        "path-no-such-user",
        "Could not determine home directory",
        'models[0].path="~nosuchuser29/s.npz"',
    ),
    case("library-empty", "library: is empty; give a library file", 'library=""'),
    case("library-nul", "library: 'a\\x00b' holds a NUL character", 'library="a\\0b"'),
    scenario("npz-lying-header", "its header claims a 200000x100000x1 float64 array", "liar.npz"),
    scenario("npz-encrypted", "member probs.npy is encrypted", "enc.npz"),
    scenario("npz-unknown-method", "compression method is not supported", "method.npz"),
    scenario("npz-zip-bomb", "a zip bomb", "bomb.npz"),
    scenario("npz-name-10000-chars", "is 10,000 characters; at most 256", "names_long.npz"),
    scenario("npz-tokens-1e300", "at most 1e+07", "tokens_huge.npz"),
    replay("replay-duplicate-questions", "duplicate name 'q'", "r_dupq.npz"),
    case(
        "width-subnormal",
        "narrower than any campaign can reach",
        "policy.stopping=[{name: ci_width, half_width: 5e-324}]",
    ),
    case(
        "width-tiny-nested",
        "rules[1].width = 1e-300 is narrower",
        "policy.stopping=[{name: all_of, rules: [pairs_settled, {name: ci_width, width: 1e-300}]}]",
    ),
    # -- issue 48, item 8: integers past Python's 4,300 digits ended "unexpected error" -------
    raw(
        "yaml-int-5000-digits",
        "seed: an integer of 5,000 digits, more than the 100 a number in a config may have: "
        "99999999999999999999...99999 (5,000 characters) at line 2, column 7",
        "name: t\nseed: " + "9" * 5000 + "\n",
    ),
    raw(
        "yaml-int-hex-4000-digits",  # converts, then failed wherever it was printed
        "policy.rope: an integer of 4,000 digits",
        "name: t\npolicy: {rope: 0x" + "f" * 4000 + "}\n",
    ),
    raw(
        "yaml-int-in-a-list",
        "models[0].workers: an integer of 5,000 digits",
        "models:\n  - backend: simulated\n    workers: " + "1" * 5000 + "\n",
    ),
    raw(  # the value is not shown under headers (it may be a credential)
        "yaml-int-under-headers",
        "models[0].options.headers.x-api-key: an integer of 5,000 digits, more than the 100 a "
        "number in a config may have (at line 5, column 28)",
        "models:\n  - backend: openai\n    options:\n      base_url: http://127.0.0.1:9/v1\n"
        "      headers: {x-api-key: " + "7" * 5000 + "}\n",
    ),
    case(
        "set-int-5000-digits",
        "override 'seed=...': an integer of 5,000 digits, more than the 100 a number in a config "
        "may have: 99999999999999999999...99999 (5,000 characters)",
        "seed=" + "9" * 5000,
    ),
    case(
        "set-int-5000-digits-nested",
        "override 'models[0].options=...': x[1]: an integer of 5,000 digits",
        "models[0].options={x: [1, " + "9" * 5000 + "]}",
    ),
    case(
        "set-int-under-a-credential",
        "override 'models[0].options.headers.x-api-key=...': its value is an integer of 5,000 "
        "digits, more than the 100 a number in a config may have (quote it",
        "models[0].options.headers.x-api-key=" + "7" * 5000,
    ),
]


#: Nine levels of nine aliases: 9^9 values once expanded ("billion laughs").
ALIAS_BOMB = (
    "name: t\nl0: &l0 [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9))
    + "seed: *l8\n"
)


def _arrays(root: Path) -> dict[str, dict[str, Any]]:
    """The input files the cases name, each an npz's arrays."""
    rng = np.random.default_rng(0)
    good = np.stack([np.full((2, 4), 0.4), np.full((2, 4), 0.6)], axis=2)
    return {
        "zero_q": {"probs": np.zeros((2, 0, 2))},
        "zero_m": {"probs": np.zeros((0, 4, 2))},
        "one_cat": {"probs": np.ones((2, 4, 1))},
        "neg": {"probs": good * np.array([-1.0, 3.0])},
        "sum": {"probs": good * 2},
        "nanp": {"probs": np.where(good > 0.5, np.nan, good)},
        "probs2d": {"probs": good[0]},
        "intprobs": {"probs": np.ones((2, 4, 2), dtype=np.int64)},
        "noprobs": {"x": np.zeros(3)},
        "empty": {},
        "names_dup": {"probs": good, "models": np.array(["a", "a"])},
        "names_empty": {"probs": good, "models": np.array(["", "b"])},
        "names_ansi": {"probs": good, "models": np.array(["\x1b[31mred", "b"])},
        "names_count": {"probs": good, "models": np.array(["a", "b", "c"])},
        "qids_empty": {"probs": good, "questions": np.array(["q0", "", "q2", "q3"])},
        "qids_dup": {"probs": good, "questions": np.array(["q0", "q0", "q2", "q3"])},
        "tokens_neg": {"probs": good, "tokens_mean": np.full((2, 4), -5.0)},
        "tokens_shape": {"probs": good, "tokens_mean": np.ones((3, 3))},
        "prior_shape": {"outcomes": np.zeros((len(NAMES), QUESTIONS + 1, 3), dtype=np.int64)},
        "prior_cat": {"outcomes": np.full((len(NAMES), QUESTIONS, 3), 4, dtype=np.int64)},
        "p": {"outcomes": np.zeros((len(NAMES), QUESTIONS, 3), dtype=np.int64)},
        "r_neg": {"outcomes": -np.ones((2, 4, 5), dtype=np.int64)},
        "r_float": {"outcomes": np.zeros((2, 4, 5))},
        "r_zero": {"outcomes": np.zeros((2, 4, 0), dtype=np.int64)},
        "r_big": {"outcomes": np.full((2, 4, 5), 5, dtype=np.int64)},
        "r_tokens": {
            "outcomes": rng.integers(0, 2, (2, 4, 5)),
            "tokens": np.ones((2, 4, 4), dtype=np.int64),
        },
        "r_ok": {"outcomes": rng.integers(0, 2, (2, 4, 5))},
        "r_u64": {"outcomes": np.full((2, 4, 5), 2**63 + 1, dtype=np.uint64)},
        "names_long": {"probs": good, "models": np.array(["x" * 10_000, "b"])},
        "tokens_huge": {"probs": good, "tokens_mean": np.full((2, 4), 1e300)},
        "r_dupq": {
            "outcomes": rng.integers(0, 2, (2, 4, 5)),
            "questions": np.array(["q", "q", "r", "s"]),
        },
    }


def _write_hostile_npz(root: Path) -> None:
    """npz files that lie (issue 29, item 4.3): a header claiming 149 GB over a few bytes, an
    encrypted member, a compression method zipfile does not know, a zip bomb."""
    import io
    import struct

    good = np.stack([np.full((2, 4), 0.4), np.full((2, 4), 0.6)], axis=2)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (200000, 100000, 1)}
    )
    with zipfile.ZipFile(root / "liar.npz", "w") as archive:
        archive.writestr("probs.npy", header.getvalue() + b"\0" * 64)
    for name, offset, value in (("enc", 6, 1), ("method", 8, 99)):
        with zipfile.ZipFile(root / f"{name}.npz", "w") as archive:
            array = io.BytesIO()
            np.save(array, good)
            archive.writestr("probs.npy", array.getvalue())
        data = bytearray((root / f"{name}.npz").read_bytes())
        central = data.index(b"PK\x01\x02")
        data[offset : offset + 2] = struct.pack("<H", value)  # the local header
        data[central + offset + 2 : central + offset + 4] = struct.pack("<H", value)
        (root / f"{name}.npz").write_bytes(bytes(data))
    with (
        zipfile.ZipFile(root / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("probs.npy", "w", force_zip64=True) as member,
    ):
        np.lib.format.write_array_header_1_0(
            member, {"descr": "<f8", "fortran_order": False, "shape": (1024, 1024, 9)}
        )
        for _ in range(9):
            member.write(b"\0" * (8 << 20))


def _write_inputs(root: Path) -> None:
    write_scenario(root / "s.npz", mimic_success([0.3, 0.5, 0.7], QUESTIONS), names=NAMES)
    for name, arrays in _arrays(root).items():
        np.savez(root / f"{name}.npz", **arrays)
    (root / "zero.npz").write_bytes(b"")
    (root / "text.npz").write_text("not an npz")
    (root / "pickled.npz").write_bytes(pickle.dumps({"probs": [1, 2]}))
    (root / "folder").mkdir()
    os.mkfifo(root / "pipe.npz")
    _write_hostile_npz(root)
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    (root / "notes.txt").write_text("a text file, not a library")
    with sqlite3.connect(root / "other.sqlite") as conn:
        conn.execute("CREATE TABLE unrelated (x)")
    conn.close()
    question = '{"id": "q1", "problem": "1+1?", "answer": "2"}\n'
    (root / "ds.jsonl").write_text(ARITH20.read_text())
    (root / "ds_empty.jsonl").write_text("\n")
    (root / "ds_bad.jsonl").write_text("{not json\n")
    (root / "ds_latin1.jsonl").write_bytes(
        '{"id": "q1", "problem": "café", "answer": "2"}'.encode("latin-1")
    )
    (root / "ds_dup.jsonl").write_text(question * 2)
    (root / "ds_noanswer.jsonl").write_text('{"id": "q1", "problem": "1+1?"}\n')
    _write_harness_logs(root)


def _lm_eval_line(doc: int, score: Any) -> str:
    return json.dumps({"doc_id": doc, "filter": "strict-match", "exact_match": score}) + "\n"


def _write_harness_logs(root: Path) -> None:
    """Harness logs made bad, for ``import`` (issue 22, failures 6, 7, 8, 14 and 20)."""
    lm = root / "lm"
    for model in ("org__a", "org__b", "org__c"):
        (lm / model).mkdir(parents=True)
    good = "".join(_lm_eval_line(doc, 1.0) for doc in range(3))
    (lm / "org__a" / "samples_gsm8k_2024-05-01T10-00-00.0.jsonl").write_text(good)
    (lm / "org__b" / "samples_gsm8k_2024-05-01T10-00-00.0.jsonl").write_text("")
    (lm / "org__c" / "samples_gsm8k_2024-05-01T10-00-00.0.jsonl").write_text(
        good + _lm_eval_line(3, None)
    )
    (lm / "org__c" / "samples_gsm8k_2024-05-02T10-00-00.0.jsonl").write_bytes(
        good.encode() + '{"doc_id": 3, "note": "caf\xe9"}\n'.encode("latin-1")
    )
    header = {"eval": {"task": "arc", "model": "m"}}

    def inspect_log(name: str, samples: list[dict[str, Any]]) -> None:
        (root / name).write_text(json.dumps({**header, "samples": samples}))

    def sample(ident: Any, epoch: Any) -> dict[str, Any]:
        return {"id": ident, "epoch": epoch, "scores": {"match": {"value": "C"}}}

    inspect_log("epoch0.json", [sample(1, 0), sample(2, 1)])
    inspect_log("epoch-huge.json", [sample(1, 1), sample(1, 10**9)])
    inspect_log("epoch-text.json", [sample(1, "one")])
    with zipfile.ZipFile(root / "big-member.eval", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", json.dumps(header))
        archive.writestr("samples/1_epoch_1.json", b" " * (65 << 20) + b"{}")
    with zipfile.ZipFile(root / "no-id.eval", "w") as archive:
        archive.writestr("header.json", json.dumps(header))
        archive.writestr("samples/1_epoch_1.json", json.dumps({"epoch": 1, "scores": {}}))
    with zipfile.ZipFile(root / "corrupt.eval", "w") as archive:  # stored, then garbled
        archive.writestr("header.json", json.dumps(header))
        archive.writestr("samples/1_epoch_1.json", json.dumps(sample(1, 1)))
    data = bytearray((root / "corrupt.eval").read_bytes())
    start = data.index(b'{"id"')
    data[start : start + 6] = b"\xff\xfe\x00ab\x01"
    (root / "corrupt.eval").write_bytes(bytes(data))
    (root / "not-utf8.json").write_bytes('{"eval": {"task": "caf\xe9"}}'.encode("latin-1"))
    # Issue 29, items 4.1 and 4.5: a line nested 100,000 deep, a model folder with an escape.
    for model, text in (
        ("org__d", "[" * 100_000 + "]" * 100_000 + "\n"),
        ("\x1b[31mred", good),
    ):
        (root / "lm2" / model).mkdir(parents=True)
        (root / "lm2" / model / "samples_gsm8k_2024-05-01T10-00-00.0.jsonl").write_text(text)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    _write_inputs(root)
    return root


def _config_file(case: Case, inputs: Path, folder: Path) -> Path:
    """The case's config, written beside the input files it names (paths resolve there)."""
    path = inputs / f"{case.id}.yaml"
    if case.text is not None:
        text = case.text.replace("SEED\n", "seed: 1\n").replace("BOMB", ALIAS_BOMB)
        path.write_bytes(text.encode("latin-1") if "\xe9" in text else text.encode())
        return path
    data = base_config("s.npz")
    write_config(path, data)
    return path


def _invoke(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as stop:  # argparse's own refusals
        return int(stop.code or 0)


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the command; it must exit 2 with one line on stderr, no traceback; that line."""
    capsys.readouterr()
    code = _invoke(args)
    err = capsys.readouterr().err
    assert code == 2, f"exit {code}: {err}"
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("adaptive-eval: error: "), err
    assert len(err) < 2200, f"a {len(err)}-character line"  # issue 22: a bomb printed 28 MB
    return err


def _no_trials(folder: Path) -> None:
    stores = list(folder.rglob("trials.sqlite"))
    for store in stores:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            if "trials" in tables:
                assert conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 0
        conn.close()


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_a_bad_config_is_refused_by_validate_and_by_run_before_any_trial(
    case: Case, inputs: Path, tmp_path: Path, no_ray: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config_file(case, inputs, tmp_path)
    sets = [arg for override in case.overrides for arg in ("--set", override)]
    run_dir = tmp_path / "run"
    run = ["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]
    for command in (["validate", str(config)], run):
        line = _refused([*command, *sets], capsys)
        assert case.expect in line, line
        assert config.name in line or str(inputs) in line, f"the file is not named: {line}"
        assert "\x1b" not in line, "control characters are shown escaped, never sent"
    assert not no_ray, "Ray must not start"
    assert not run_dir.exists() or not list(run_dir.iterdir()) or _no_trials(run_dir) is None
    _no_trials(tmp_path)


@dataclass(frozen=True)
class Command:
    """A command line made bad; ``argv(inputs, run, tmp)`` builds it (``run`` is a finished
    run, ``tmp`` a fresh folder)."""

    id: str
    expect: str
    argv: Callable[[Path, Path, Path], list[str]]


def command(ident: str, expect: str, argv: Callable[[Path, Path, Path], list[str]]) -> Any:
    return pytest.param(Command(ident, expect, argv), id=ident)


def night(ident: str, expect: str, *extra: str) -> Any:
    return command(
        ident,
        expect,
        lambda i, r, t: ["nightly", str(i / "c.yaml"), "--history", str(t / "h"), *extra],
    )


def score(ident: str, expect: str, *extra: str, file: str = "t.npz") -> Any:
    return command(ident, expect, lambda i, r, t: ["score", str(i / file), *extra])


def completions(ident: str, expect: str, *extra: str) -> Any:
    return command(ident, expect, lambda i, r, t: ["completions", str(r), *extra])


def imports(ident: str, expect: str, fmt: str, *files: str) -> Any:
    return command(
        ident,
        expect,
        lambda i, r, t: [
            "import",
            "--format",
            fmt,
            *[str(i / f) for f in files],
            "--out",
            str(t / "x.npz"),
        ],
    )


LM = "lm/org__{}/samples_gsm8k_2024-05-0{}T10-00-00.0.jsonl"

COMMAND_CASES = [
    # -- import (issue 22, failures 6, 7, 8, 14, 20) -----------------------------------------
    imports(
        "lm-eval-empty-file",
        "org__b/samples_gsm8k_2024-05-01T10-00-00.0.jsonl: holds no scored sample",
        "lm-eval",
        LM.format("a", 1),
        LM.format("b", 1),
    ),
    imports(
        "lm-eval-null-score",
        "org__c/samples_gsm8k_2024-05-01T10-00-00.0.jsonl: line 4: score null is neither",
        "lm-eval",
        LM.format("c", 1),
    ),
    imports(
        "lm-eval-not-utf8",
        "2024-05-02T10-00-00.0.jsonl: line 4: not valid UTF-8 (byte 0xe9)",
        "lm-eval",
        LM.format("c", 2),
    ),
    imports(
        "inspect-epoch-zero",
        "epoch0.json: samples[0]: sample 1 has epoch 0",
        "inspect",
        "epoch0.json",
    ),
    imports(
        "inspect-epoch-huge",
        "epoch-huge.json: samples[1]: sample 1 has epoch 1000000000",
        "inspect",
        "epoch-huge.json",
    ),
    imports("inspect-epoch-text", 'has epoch "one"', "inspect", "epoch-text.json"),
    imports(
        "inspect-member-too-big",
        "big-member.eval: member samples/1_epoch_1.json is 65 MB unpacked",
        "inspect",
        "big-member.eval",
    ),
    imports(
        "inspect-sample-without-id",
        "no-id.eval: member samples/1_epoch_1.json: not an inspect_ai sample (no 'id'",
        "inspect",
        "no-id.eval",
    ),
    imports(
        "inspect-corrupt-zip",
        "corrupt.eval: member samples/1_epoch_1.json is not readable JSON",
        "inspect",
        "corrupt.eval",
    ),
    imports(
        "inspect-not-utf8",
        "not-utf8.json: not a readable inspect_ai log (UnicodeDecodeError",
        "inspect",
        "not-utf8.json",
    ),
    imports("inspect-device", "is a device", "inspect", "/dev/zero"),
    night("night-month-13", "--night must be a date", "--night", "2026-13-45"),
    night("night-feb-30", "--night must be a date", "--night", "2026-02-30"),
    night("night-short-year", "--night must be a date", "--night", "26-01-01"),
    night("night-unpadded", "--night must be a date", "--night", "2026-1-1"),
    night("night-word", "--night must be a date", "--night", "tomorrow"),
    night("keep-zero", "--keep: must be >= 1", "--keep", "0"),
    night("keep-negative", "--keep: must be >= 1", "--keep", "-1"),
    night("keep-text", "--keep: must be a whole number", "--keep", "x"),
    night("nightly-bad-config", "not below the range", "--set", "policy.rope=1"),
    command(
        "history-is-a-file",
        "is not a folder",
        lambda i, r, t: ["nightly", str(i / "c.yaml"), "--history", str(i / "notes.txt")],
    ),
    score("k-fraction", "--k must be whole numbers", "--k", "2.7"),
    score("k-zero", "--k 0 is outside 1..N", "--k", "0"),
    score("k-negative", "--k -1 is outside", "--k", "-1"),
    score("k-too-big", "--k 99 is outside", "--k", "99"),
    score("k-nan", "--k must be finite", "--k", "nan"),
    score("k-text", "--k must be comma-separated numbers", "--k", "a"),
    score("score-weights-nan", "--weights must be finite", "--weights", "nan,1"),
    score("score-weights-inf", "--weights must be finite", "--weights", "inf,1"),
    score("score-weights-equal", "score the same", "--weights", "1,1"),
    score("score-weights-text", "comma-separated numbers", "--weights", "a,b"),
    score("confidence-big", "--confidence must be in (0.5, 1)", "--confidence", "1.5"),
    score("confidence-nan", "--confidence must be in (0.5, 1)", "--confidence", "nan"),
    score("confidence-half", "--confidence must be in (0.5, 1)", "--confidence", "0.5"),
    score("confidence-text", "invalid float value", "--confidence", "x"),
    score("score-missing-file", "file not found", file="missing.npz"),
    score("score-no-arrays", "arrays present: none", file="empty.npz"),
    score("score-zero-bytes", "empty file", file="zero.npz"),
    score("score-text-file", "not a zip", file="text.npz"),
    score("score-pickle", "not a readable npz", file="pickled.npz"),
    score("score-float-outcomes", "dtype kind", "--key", "probs", file="s.npz"),
    score("score-2d-outcomes", "expected 3 dimensions", "--key", "probs", file="probs2d.npz"),
    score("score-negative-outcomes", "category -1", file="r_neg.npz"),
    score("score-key-missing", "array 'nope': missing", "--key", "nope"),
    score("score-prior-missing", "file not found", "--prior", "missing.npz"),
    command(
        "score-prior-shape",
        "has 7 questions",
        lambda i, r, t: ["score", str(i / "t.npz"), "--prior", str(i / "prior_shape.npz")],
    ),
    completions("limit-negative", "--limit: must be >= 0, got -5", "--limit", "-5"),
    completions("trial-negative", "--trial: must be >= 0", "--trial", "-1"),
    completions("limit-text", "--limit: must be a whole number", "--limit", "x"),
    completions("model-unknown", "--model 'nope' is not in this run", "--model", "nope"),
    completions("question-unknown", "--question 'nope' is not in this run", "--question", "nope"),
    completions("trial-absent", "no recorded trial 999 matches", "--trial", "999"),
    command(
        "completions-no-run", "not a run directory", lambda i, r, t: ["completions", str(t / "x")]
    ),
    command(
        "completions-not-a-run",
        "not a run directory",
        lambda i, r, t: ["completions", str(i / "folder")],
    ),
    command(
        "export-out-folder",
        "--out: is a folder",
        lambda i, r, t: ["export", str(r), "--out", str(i / "folder")],
    ),
    command(
        "export-out-under-a-file",
        "is not a folder",
        lambda i, r, t: ["export", str(r), "--out", str(i / "notes.txt" / "x.npz")],
    ),
    command(
        "export-no-run",
        "not a run directory",
        lambda i, r, t: ["export", str(t / "x"), "--out", str(t / "x.npz")],
    ),
    command(
        "import-out-folder",
        "--out: is a folder",
        lambda i, r, t: [
            "import",
            "--format",
            "lm-eval",
            str(i / "ds.jsonl"),
            "--out",
            str(i / "folder"),
        ],
    ),
    command(
        "import-missing-file",
        "missing.jsonl",
        lambda i, r, t: [
            "import",
            "--format",
            "lm-eval",
            str(t / "missing.jsonl"),
            "--out",
            str(t / "x.npz"),
        ],
    ),
    command(
        "import-format",
        "invalid choice: 'bogus'",
        lambda i, r, t: ["import", "--format", "bogus", str(i / "ds.jsonl"), "--out", str(t / "x")],
    ),
    command("report-no-run", "not a run directory", lambda i, r, t: ["report", str(t / "x")]),
    command(
        "report-bad-config",
        "invalid YAML",
        lambda i, r, t: ["report", str(r), "--config", str(i / "yaml-invalid.yaml")],
    ),
    *[
        command(
            f"compare-margin-{name}",
            expect,
            lambda i, r, t, value=value: [
                "compare",
                str(i / "c.yaml"),
                "--candidate",
                "a",
                "--margin",
                value,
                "--out",
                str(t / "cmp"),
            ],
        )
        for name, value, expect in (
            ("nan", "nan", "--margin must be > 0, got nan"),
            ("inf", "inf", "--margin must be > 0, got inf"),
            ("negative", "-0.1", "--margin must be > 0, got -0.1"),
            ("range", "1", "not below the range of the rubric weights"),
            ("text", "x", "invalid float value"),
        )
    ],
    # Issue 22, failure 16: an option given twice used to take the last silently, and a
    # margin above the incumbents' scores passed every candidate at round 2.
    command(
        "candidate-twice",
        "--candidate given twice ('a', then 'b'); give it once",
        lambda i, r, t: [
            *("compare", str(i / "c.yaml"), "--candidate", "a", "--candidate", "b"),
            *("--out", str(t / "cmp")),
        ],
    ),
    command(
        "out-twice",
        "--out given twice",
        lambda i, r, t: ["run", str(i / "c.yaml"), "--out", str(t / "a"), "--out", str(t / "b")],
    ),
    score("k-twice", "--k given twice", "--k", "1", "--k", "2"),
    command(
        "compare-margin-vacuous",
        "--margin 0.6 makes the gate vacuous against b (score 0.5",
        lambda i, r, t: [
            *("compare", str(i / "c.yaml"), "--candidate", "a", "--margin", "0.6"),
            *("--out", str(t / "cmp")),
        ],
    ),
    command(
        "compare-unknown-candidate",
        "'nope'",
        lambda i, r, t: [
            "compare",
            str(i / "c.yaml"),
            "--candidate",
            "nope",
            "--out",
            str(t / "cmp"),
        ],
    ),
    # Issue 22, failure 17: run files used to be mixed in among a user's files.
    command(
        "run-out-foreign-folder",
        "--out: holds files that are not a run's (",
        lambda i, r, t: ["run", str(i / "c.yaml"), "--out", str(i)],
    ),
    command(
        "nightly-history-foreign-folder",
        "--history: holds files that are not a nightly history's (org__a/",
        lambda i, r, t: ["nightly", str(i / "c.yaml"), "--history", str(i / "lm")],
    ),
    command(
        "run-out-is-a-file",
        "exists and is not a directory",
        lambda i, r, t: ["run", str(i / "c.yaml"), "--out", str(i / "notes.txt")],
    ),
    command(
        "run-out-under-a-file",
        "Not a directory",
        lambda i, r, t: ["run", str(i / "c.yaml"), "--out", str(i / "notes.txt" / "run")],
    ),
    command(
        "run-config-missing",
        "cannot read config",
        lambda i, r, t: ["run", str(t / "missing.yaml"), "--out", str(t / "run")],
    ),
    command(
        "run-config-folder",
        "cannot read config",
        lambda i, r, t: ["run", str(i / "folder"), "--out", str(t / "run")],
    ),
    command(
        "run-other-campaign",
        "holds a different campaign",
        lambda i, r, t: ["run", str(i / "c.yaml"), "--out", str(r), "--set", "seed=99"],
    ),
    command("run-without-out", "--out", lambda i, r, t: ["run", str(i / "c.yaml")]),
    command("unknown-command", "invalid choice: 'bogus'", lambda i, r, t: ["bogus"]),
    # -- issue 29, section 4 ---------------------------------------------------------------
    command(
        "out-5000-characters",
        "--out: '",
        lambda i, r, t: ["run", str(i / "c.yaml"), "--out", str(t / ("x" * 5000))],
    ),
    command(
        "history-5000-characters",
        "is longer than a file system allows",
        lambda i, r, t: ["nightly", str(i / "c.yaml"), "--history", str(t / ("h" * 5000))],
    ),
    command(
        "export-run-dir-5000-characters",
        "run_dir: '",
        lambda i, r, t: ["export", str(t / ("r" * 5000)), "--out", str(t / "x.npz")],
    ),
    command(
        "report-symlink-loop",
        "symbolic link that cannot be followed",
        lambda i, r, t: ["report", str(i / "loop1")],
    ),
    score("k-empty", "--k must be finite numbers, got ''", "--k", ""),
    score("score-weights-empty", "--weights must be finite numbers, got ''", "--weights", ""),
    imports(
        "lm-eval-deep-json",
        "line 1: JSON nested too deep to read",
        "lm-eval",
        "lm2/org__d/samples_gsm8k_2024-05-01T10-00-00.0.jsonl",
    ),
    imports(
        "lm-eval-ansi-model",
        "holds control characters",
        "lm-eval",
        "lm2/\x1b[31mred/samples_gsm8k_2024-05-01T10-00-00.0.jsonl",
    ),
    imports(
        "lm-eval-same-file-twice",
        "given twice (the same file",
        "lm-eval",
        LM.format("a", 1),
        LM.format("a", 1),
    ),
    command(
        "lm-eval-copy-twice",
        "given twice (a copy of it",
        lambda i, r, t: [
            "import",
            "--format",
            "lm-eval",
            str(i / LM.format("a", 1)),
            str(
                _copy(
                    i / LM.format("a", 1),
                    t / "org__a" / "samples_gsm8k_2024-05-09T10-00-00.0.jsonl",
                )
            ),
            "--out",
            str(t / "x.npz"),
        ],
    ),
    command(
        "import-map-over-the-limit",
        f"--map given {MAX_MAP_ENTRIES + 1:,} times; at most {MAX_MAP_ENTRIES:,}",
        lambda i, r, t: [
            *("import", "--format", "inspect", str(i / "epoch0.json"), "--out", str(t / "x.npz")),
            *[arg for k in range(MAX_MAP_ENTRIES + 1) for arg in ("--map", f"v{k}=1")],
        ],
    ),
]


def _copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(source.read_bytes())
    return target


@pytest.fixture(scope="module")
def finished(inputs: Path) -> Path:
    """A finished run (in-process, no Ray) of the module's good config."""
    write_config(inputs / "c.yaml", base_config("s.npz"))
    np.savez(inputs / "t.npz", outcomes=np.random.default_rng(1).integers(0, 2, (3, 6, 8)))
    (inputs / "yaml-invalid.yaml").write_text("models: [unclosed\n")
    run_inline(load_config(inputs / "c.yaml"), inputs / "run")
    return inputs / "run"


@pytest.mark.parametrize("case", COMMAND_CASES)
def test_a_bad_command_line_is_refused_in_one_line(
    case: Command,
    inputs: Path,
    finished: Path,
    tmp_path: Path,
    no_ray: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    recorded = trials_in(finished / "trials.sqlite")
    argv = case.argv(inputs, finished, tmp_path)
    if argv[:1] in (["run"], ["compare"], ["nightly"]):
        argv = [*argv, *TEST_DISPATCH]  # were the input not refused, the launch would show
    line = _refused(argv, capsys)
    assert case.expect in line, line
    assert not no_ray, "Ray must not start"
    assert trials_in(finished / "trials.sqlite") == recorded
    _no_trials(tmp_path)
    assert not (tmp_path / "h" / "runs").exists()


def test_at_least_150_cases_are_checked() -> None:
    assert len(CONFIG_CASES) + len(COMMAND_CASES) >= 150


def test_names_that_look_like_markup_are_shown_as_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not bad input: a model may be called ``$\\frac{a}{b}$`` or ``<script>``. The plots draw
    the name as typed (before: matplotlib's math text failed report.html after sampling) and
    report.md shows it as text (before: the tag was written raw)."""
    names = ["$\\frac{a}{b}$", "<script>alert(1)</script>", "a|b*c"]
    write_scenario(tmp_path / "s.npz", mimic_success([0.2, 0.5, 0.8], 6), names=names)
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_inline(load_config(config), tmp_path / "run")
    assert main(["report", str(tmp_path / "run")]) == 0
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "<script>" not in markdown and "&lt;script>alert(1)&lt;/script>" in markdown
    assert "a\\|b\\*c" in markdown and "$\\\\frac{a}{b}$" in markdown  # escaped
    page = (tmp_path / "run" / "report.html").read_text()
    assert "<script>" not in page and page.count("&lt;script&gt;") >= 2
    assert "\\frac{a}{b}" in page  # drawn as text in the SVG, not as math


# -- issue 48, follow-up to item 8: JSON numbers and nesting in a dataset and a harness log ----
# A 5,000-digit integer ended "unexpected error: ValueError: Exceeds the limit (4300 digits)"
# (rc 1) in a dataset and an lm-eval samples file; NaN and 1e999 in a dataset were read as
# answers "nan" and "inf"; an inspect log said "ValueError: ... sys.set_int_max_str_digits()".
DIGITS = "9" * 5000
SHOWN = "99999999999999999999...99999 (5,000 characters)"
HOSTILE_DATASETS = {
    "ds_int5000.jsonl": '{"id": "q1", "problem": "1+1?", "answer": ' + DIGITS + "}\n",
    "ds_nan.jsonl": '{"id": "q1", "problem": "1+1?", "answer": NaN}\n',
    "ds_1e999.jsonl": '{"id": "q1", "problem": "1+1?", "answer": "2", "weight": 1e999}\n',
    "ds_deep.jsonl": '{"id": "q1", "problem": "1+1?", "answer": "2"}\n'
    + "[" * 200_000
    + "]" * 200_000
    + "\n",
}
HOSTILE_DATASET_CASES = [
    openai(
        "dataset-int-5000-digits",
        f"ds_int5000.jsonl:1: line 1: an integer of 5,000 digits, more than the 100 a number in "
        f"an input may have: {SHOWN}",
        "dataset.path=ds_int5000.jsonl",
    ),
    openai(
        "dataset-nan",
        "ds_nan.jsonl:1: line 1: NaN is not a number (JSON has no NaN or Infinity)",
        "dataset.path=ds_nan.jsonl",
    ),
    openai(
        "dataset-1e999",
        "ds_1e999.jsonl:1: line 1: 1e999 is past the largest number",
        "dataset.path=ds_1e999.jsonl",
    ),
    openai(
        "dataset-deep",
        "ds_deep.jsonl:2: line 2: JSON nested too deep",
        "dataset.path=ds_deep.jsonl",
    ),
]


@pytest.mark.parametrize("case", HOSTILE_DATASET_CASES)
def test_a_dataset_with_a_number_past_the_bounds_is_refused_in_one_line(
    case: Case, inputs: Path, tmp_path: Path, no_ray: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in HOSTILE_DATASETS.items():
        (inputs / name).write_text(text)
    test_a_bad_config_is_refused_by_validate_and_by_run_before_any_trial(
        case, inputs, tmp_path, no_ray, capsys
    )


def _hostile_harness_logs(root: Path) -> None:
    line = '{"doc_id": 0, "filter": "strict-match", "exact_match": ' + DIGITS + "}\n"
    for model, text in (("org__big", _lm_eval_line(1, 1.0) + line), ("org__deep", "{" * 3)):
        (root / "lm3" / model).mkdir(parents=True, exist_ok=True)
        (root / "lm3" / model / "samples_gsm8k_2024-05-01T10-00-00.0.jsonl").write_text(text)
    log = '{"eval": {"task": "arc", "model": "m"}, "samples": [{"id": ' + DIGITS + ', "epoch": 1}]}'
    (root / "int5000.json").write_text(log)
    (root / "deep.json").write_text('{"eval": {}, "samples": ' + "[" * 200_000 + "]" * 200_000)
    with zipfile.ZipFile(root / "int5000.eval", "w") as archive:
        archive.writestr("header.json", json.dumps({"eval": {"task": "arc", "model": "m"}}))
        archive.writestr("samples/1_epoch_1.json", '{"id": 1, "epoch": ' + DIGITS + "}")


HOSTILE_LOG_CASES = [
    imports(
        "lm-eval-int-5000-digits",
        f"org__big/samples_gsm8k_2024-05-01T10-00-00.0.jsonl: line 2: an integer of 5,000 "
        f"digits, more than the 100 a number in an input may have: {SHOWN}",
        "lm-eval",
        "lm3/org__big/samples_gsm8k_2024-05-01T10-00-00.0.jsonl",
    ),
    imports(
        "lm-eval-cut-short",
        "org__deep/samples_gsm8k_2024-05-01T10-00-00.0.jsonl: line 1: invalid JSON at column 2",
        "lm-eval",
        "lm3/org__deep/samples_gsm8k_2024-05-01T10-00-00.0.jsonl",
    ),
    imports(
        "inspect-int-5000-digits",
        f"int5000.json: not a readable inspect_ai log (an integer of 5,000 digits, more than the "
        f"100 a number in an input may have: {SHOWN})",
        "inspect",
        "int5000.json",
    ),
    imports(
        "inspect-deep",
        "deep.json: not a readable inspect_ai log (JSON nested too deep to read)",
        "inspect",
        "deep.json",
    ),
    imports(
        "inspect-member-int-5000-digits",
        "int5000.eval: member samples/1_epoch_1.json is not readable JSON (an integer of 5,000 "
        "digits",
        "inspect",
        "int5000.eval",
    ),
]


@pytest.mark.parametrize("case", HOSTILE_LOG_CASES)
def test_a_harness_log_with_a_number_past_the_bounds_is_refused_in_one_line(
    case: Command,
    inputs: Path,
    finished: Path,
    tmp_path: Path,
    no_ray: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _hostile_harness_logs(inputs)
    test_a_bad_command_line_is_refused_in_one_line(case, inputs, finished, tmp_path, no_ray, capsys)
