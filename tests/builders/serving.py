"""Serving evidence as the engines write it: vLLM's and SGLang's stats lines through the logging
formatters the engines configure, and their Prometheus pages through prometheus_client itself.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


def _record(message: str, filename: str = "metrics.py") -> logging.LogRecord:
    record = logging.LogRecord("vllm.v1.metrics.loggers", logging.INFO, filename, 96, message, None, None)
    record.created = 1747044672.0  # a fixed time: the line's timestamp text is then known
    return record


VLLM_FORMAT = logging.Formatter(
    "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s", datefmt="%m-%d %H:%M:%S"
)


# The logging config vLLM's docs give for VLLM_LOGGING_CONFIG_PATH to log JSON (vllm-project/vllm
# examples/others/logging_configuration.md, "Example 1: Customize vLLM root logger"), verbatim.
VLLM_JSON_LOGGING_CONFIG: dict[str, Any] = {
    "formatters": {"json": {"class": "pythonjsonlogger.jsonlogger.JsonFormatter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "level": "INFO",
            "stream": "ext://sys.stdout",
        }
    },
    "loggers": {"vllm": {"handlers": ["console"], "level": "INFO", "propagate": False}},
    "version": 1,
}


def vllm_json_formatter(fmt: str | None = None) -> logging.Formatter:
    """The formatter ``logging.config.dictConfig`` builds from that config (python-json-logger's
    ``JsonFormatter``), given ``fmt`` as a config's ``"format"`` when one is: built alone, so the test
    process's own loggers are left as they are (the config would disable them)."""
    import copy
    import logging.config
    import warnings

    spec = copy.deepcopy(VLLM_JSON_LOGGING_CONFIG["formatters"]["json"])
    if fmt is not None:
        spec["format"] = fmt
    with warnings.catch_warnings():  # python-json-logger 3 moved jsonlogger to pythonjsonlogger.json, and says so
        warnings.simplefilter("ignore", DeprecationWarning)
        return logging.config.DictConfigurator({"version": 1}).configure_formatter(spec)


def vllm_line(
    drafts: int, accepted_per_pos: list[int], elapsed: float = 10.0, formatter: logging.Formatter = VLLM_FORMAT
) -> str:
    """SpecDecodingLogging.log for one interval: k = len(accepted_per_pos) tokens per draft."""
    k = len(accepted_per_pos)
    accepted, drafted = sum(accepted_per_pos), drafts * k
    rates = ", ".join(f"{p:.3f}" for p in np.array(accepted_per_pos) / drafts)
    # vLLM's own %-format string, verbatim, with its arguments.
    fmt = (
        "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
        "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
        "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
    )
    args = (
        1 + accepted / drafts,
        accepted / elapsed,
        drafted / elapsed,
        accepted,
        drafted,
        rates,
        accepted / drafted * 100,
    )
    message = fmt % args
    return formatter.format(_record(message))


SGLANG_FORMAT = logging.Formatter("[%(asctime)s TP0] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")


def sglang_line(accepted_tokens: int, forward_ct: int, num_draft_tokens: int = 4) -> str:
    """log_decode_stats: accepted tokens include the bonus token of each verify step."""
    msg = "Decode batch, #running-req: 8, #token: 5120, token usage: 0.04, "
    msg += (
        f"accept len: {accepted_tokens / forward_ct:.2f}, "
        f"accept rate: {accepted_tokens / (forward_ct * num_draft_tokens):.2f}, "
    )
    msg += "cuda graph: True, gen throughput (token/s): 812.44, #queue-req: 0, "
    return SGLANG_FORMAT.format(_record(msg, "scheduler_metrics_mixin.py"))


def vllm_metrics(drafts: int, accepted_per_pos: list[int], engines: int = 1) -> bytes:
    """vLLM's /metrics page (SpecDecodingProm: labels model_name, engine; per-position adds position)."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    counters = [
        Counter(name, doc, labelnames=labels, registry=registry)
        for name, doc in (
            ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
            ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
            ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
        )
    ]
    per_pos = Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        labelnames=[*labels, "position"],
        registry=registry,
    )
    for engine in range(engines):
        lv = ("org/target", str(engine))
        counters[0].labels(*lv).inc(drafts)
        counters[1].labels(*lv).inc(drafts * len(accepted_per_pos))
        counters[2].labels(*lv).inc(sum(accepted_per_pos))
        for pos, count in enumerate(accepted_per_pos):
            per_pos.labels(*lv, str(pos)).inc(count)
    return generate_latest(registry)


def sglang_metrics(lengths: list[float], *, rate: float = 0.25, model_name: str = "org/target") -> bytes:
    registry = CollectorRegistry()
    labels = ["model_name", "engine_type", "tp_rank", "pp_rank"]
    length = Gauge(
        "sglang:spec_accept_length",
        "The average acceptance length of speculative decoding.",
        labelnames=labels,
        registry=registry,
    )
    rates = Gauge(
        "sglang:spec_accept_rate",
        "The average acceptance rate of speculative decoding.",
        labelnames=labels,
        registry=registry,
    )
    for rank, value in enumerate(lengths):
        length.labels(model_name, "unified", str(rank), "0").set(value)
        rates.labels(model_name, "unified", str(rank), "0").set(rate)
    return generate_latest(registry)


# -- any values, as the writers would write them (impossible ones too) ---------------------------


def vllm_line_raw(
    mean: float,
    accepted: int,
    drafted: int,
    rates: str,
    *,
    filename: str = "metrics.py",
    prefix: str = "",
    formatter: logging.Formatter = VLLM_FORMAT,
) -> str:
    """vLLM's SpecDecodingLogging format string with whatever arguments it is handed (negative,
    absurd); ``rates`` is the per-position text as vLLM joins it, ``prefix`` goes before the line."""
    fmt = (
        "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
        "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
        "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
    )
    message = fmt % (
        mean,
        accepted / 10.0,
        drafted / 10.0,
        accepted,
        drafted,
        rates,
        100.0 * accepted / max(drafted, 1),
    )
    return prefix + formatter.format(_record(message, filename))


def sglang_line_text(accept_len: str, *, prefix: str = "") -> str:
    """An SGLang ``Decode batch`` line whose accept len is the given text ("1.2.3" is a corrupted one)."""
    msg = (
        f"Decode batch, #running-req: 8, #token: 5120, token usage: 0.04, accept len: {accept_len}, "
        "accept rate: 0.25, cuda graph: True, gen throughput (token/s): 812.44, #queue-req: 0, "
    )
    return prefix + SGLANG_FORMAT.format(_record(msg, "scheduler_metrics_mixin.py"))


def vllm_counters_page(
    drafts: float,
    draft_tokens: float,
    accepted: float,
    per_position: dict[str, float],
    *,
    model_name: str = "org/target",
    help_text: str = "Number of spec decoding drafts.",
) -> bytes:
    """vLLM's counters with any values (negative, NaN, a position label of 100000000), written by
    prometheus_client's own exposition (a collector yields the families, as a custom exporter would)."""
    from prometheus_client.core import CounterMetricFamily
    from prometheus_client.registry import Collector

    labels = ["model_name", "engine"]

    class Counters(Collector):
        def collect(self):
            for name, doc, value in (
                ("vllm:spec_decode_num_drafts", help_text, drafts),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", draft_tokens),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", accepted),
            ):
                family = CounterMetricFamily(name, doc, labels=labels)
                family.add_metric([model_name, "0"], value)
                yield family
            family = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=[*labels, "position"],
            )
            for position, value in per_position.items():
                family.add_metric([model_name, "0", position], value)
            yield family

    registry = CollectorRegistry()
    registry.register(Counters())
    return generate_latest(registry)


def meta_info_line(
    verify: object, completion: object, histogram: object = None, *, text: str = "The answer is 4."
) -> str:
    """One response as SGLang's /generate returns it (tokenizer_manager.py fills meta_info), one JSON line."""
    meta: dict[str, object] = {"id": "req-0", "completion_tokens": completion, "spec_verify_ct": verify}
    if histogram is not None:
        meta["spec_accept_histogram"] = histogram
    return json.dumps({"text": text, "meta_info": meta})


def sglang_server_args_line(**fields) -> str:
    """SGLang's start-up line, as sglang 0.5.23 logs it (``python/sglang/srt/entrypoints/engine.py``:
    ``logger.info(f"server_args={_server_args_for_logging(server_args)}")``, a dict of the resolved
    fields); ``fields`` set the ones a test needs among the usual ones."""
    resolved = {
        "model_path": "moonshotai/Kimi-K2.5",
        "tokenizer_path": "moonshotai/Kimi-K2.5",
        "trust_remote_code": True,
        "tp_size": 8,
        "speculative_algorithm": None,
        "speculative_draft_model_path": None,
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "decode_log_interval": 40,
    }
    resolved.update(fields)
    return SGLANG_FORMAT.format(_record(f"server_args={resolved}", "engine.py"))


# -- ModelOpt's speculation_profile.json ------------------------------------------------------
# The schema of NVIDIA/Model-Optimizer examples/specdec_bench/specdec_bench/speculation_profile.py
# (commit edf879d3, pull request #2247: build_profile, stub_profile) over the statistics
# specdec_bench's AcceptanceRate metric computes (specdec_bench/metrics/acceptance_rate.py,
# _process_lengths). Not on the package index (an example of the repository, in an open pull
# request), so written here from that source; tests/test_serving_sources.py says how it was
# compared with ModelOpt's own functions.


def acceptance_rate_out(lengths_per_request: list[list[int]]) -> dict[str, object]:
    """AcceptanceRate.out after process_final: each request's per-step acceptance lengths (tokens a
    step emitted, the bonus token counted) into the histogram, conditional and joint rates keyed by
    length, and the mean of the per-request means."""
    steps = [length for request in lengths_per_request for length in request]
    histogram = {length: steps.count(length) for length in sorted(set(steps))}
    conditional, joint, previous = {}, {}, 1.0
    for length in histogram:
        reached = sum(c for other, c in histogram.items() if other >= length) / len(steps)
        conditional[length] = reached / previous  # P(>= this length | >= the previous length seen)
        joint[length] = reached
        previous = reached
    means = [sum(request) / len(request) for request in lengths_per_request]
    return {
        "Acceptance_Length_Histogram": histogram,
        "Conditional_Acceptance_Rate": conditional,
        "Joint_Acceptance_Rate": joint,
        "Average_AL": sum(means) / len(means),
    }


def speculation_profile(
    out: dict[str, object], num_speculative_tokens: int, *, method: str | None = "eagle3", **extra: object
) -> dict[str, Any]:
    """build_profile: marginal = P(length >= i + 2) for draft position i (a length never seen takes
    the value of the next longer one seen, 0 past the longest), conditional = ratios of successive
    marginals, the per-step mean from the histogram, and ModelOpt's own two validations."""
    joint = {int(k): float(v) for k, v in out["Joint_Acceptance_Rate"].items()}  # type: ignore[attr-defined]
    histogram = out.get("Acceptance_Length_Histogram")
    marginal = []
    for i in range(num_speculative_tokens):
        longer = [joint[length] for length in sorted(joint) if length >= i + 2]
        marginal.append(longer[0] if longer else 0.0)
    conditional, previous = [], 1.0
    for m in marginal:
        conditional.append(m / previous if previous > 0 else 0.0)
        previous = m
    per_request = float(out.get("Average_AL", 0.0))  # type: ignore[arg-type]
    if histogram:
        counts = {int(k): v for k, v in histogram.items()}  # type: ignore[attr-defined]
        mean = sum(k * v for k, v in counts.items()) / sum(counts.values())
    else:
        mean = per_request
    implied = 1.0 + sum(marginal)
    profile: dict[str, object] = {
        "schema_version": "1.0",
        "measured": True,
        "method": method,
        "draft_checkpoint": extra.pop("draft_checkpoint", None),
        "target_model": extra.pop("target_model", None),
        "num_speculative_tokens": num_speculative_tokens,
        "block_size": None,
        "max_supported_k": num_speculative_tokens,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": [round(x, 6) for x in conditional],
        "marginal_accept_rates": [round(x, 6) for x in marginal],
        "mean_accept_length": round(mean, 6),
        "mean_accept_length_per_request": round(per_request, 6),
        "accept_length_model": "chain_analytic"
        if method in ("eagle", "eagle1", "eagle2", "eagle3")
        else "measured_per_k",
        "accept_length_by_k": {str(num_speculative_tokens): round(mean, 6)},
        "acceptance_length_histogram": histogram,
        "per_category": extra.pop("per_category", None),
        "measurement_conditions": extra.pop("measurement_conditions", None),
        "validation": {
            "mean_consistency": {
                "implied_mean_accept_length": round(implied, 6),
                "reported_mean_accept_length": round(mean, 6),
                "abs_delta": round(abs(implied - mean), 6),
                "tolerance": 0.02,
                "passed": abs(implied - mean) <= 0.02,
            },
            "marginal_monotonicity": {"passed": True, "violations": []},
        },
    }
    profile.update(extra)
    return profile


def stub_profile(num_speculative_tokens: int, method: str | None = "eagle3") -> dict[str, object]:
    """speculation_profile.stub_profile: zero vectors, measured false, no mean."""
    profile = speculation_profile(
        {"Conditional_Acceptance_Rate": {}, "Joint_Acceptance_Rate": {}, "Average_AL": 0.0},
        num_speculative_tokens,
        method=method,
    )
    profile.update(measured=False, mean_accept_length=None, accept_length_by_k={}, validation=None)
    return profile


def export_stub_profile(method: str = "eagle3") -> dict[str, object]:
    """What ModelOpt's exporter writes beside a drafter exported without a measurement
    (modelopt/torch/export/plugins/hf_spec_export.py, pull request #2313)."""
    return {
        "schema_version": None,
        "measured": False,
        "method": method,
        "note": (
            "No acceptance measurement was supplied at export time. Produce one with "
            "examples/specdec_bench and re-export with --speculation_profile, or build "
            "it from an existing acceptance_rate.json."
        ),
    }


def write_profile(path, profile: dict[str, object]) -> None:
    """As AcceptanceRate._write_speculation_profile writes it: json.dump(profile, f, indent=2)."""
    with open(path, "w") as f:
        json.dump(profile, f, indent=2)


# -- vLLM's per-request metrics (--per-request-spec-decode-metrics) ------------------------------
# vllm 0.33.0 vllm/v1/metrics/stats.py RequestSpecDecodeMetrics (new, observe, to_dict) and
# vllm/entrypoints/generate/base/protocol.py SpeculativeDecodingMetrics / PerRequestMetrics, in a
# response of vllm/entrypoints/openai/{completion,chat_completion}/protocol.py. vllm does not import
# on a CPU with --no-deps (its config package needs cbor2, zmq, fastapi, msgspec, ... first), so the
# object is built here from that source; tests/test_serving_sources.py says how it was compared.


def spec_decode_metrics(num_spec_tokens: int, steps: list[tuple[int, int]], *, detailed: bool = False) -> dict:
    """RequestSpecDecodeMetrics: observe(drafted, accepted) per verify step, then to_dict()."""
    histogram = [0] * (num_spec_tokens + 1)
    drafted_total, per_step_accepted, per_step_drafted = 0, [], []
    for drafted, accepted in steps:
        histogram[accepted] += 1
        drafted_total += drafted
        if detailed:
            per_step_accepted.append(accepted)
            per_step_drafted.append(drafted)
    num_steps = sum(histogram)
    num_accepted = sum(j * count for j, count in enumerate(histogram))
    result: dict[str, object] = {
        "mean_acceptance_length": 1.0 + num_accepted / num_steps if num_steps else 1.0,
        "draft_acceptance_rate": num_accepted / drafted_total if drafted_total else 0.0,
        "acceptance_histogram": list(histogram),
        "num_spec_steps": num_steps,
        "num_accepted_draft_tokens": num_accepted,
        "num_draft_tokens": drafted_total,
        "num_spec_tokens": num_spec_tokens,
    }
    if per_step_accepted:
        result["per_step_accepted"] = per_step_accepted
        result["per_step_drafted"] = per_step_drafted
    return result


def vllm_response(
    spec: dict | None, *, chat: bool = False, text: str = "The answer is 4.", index: int = 0, client: bool = False
) -> str:
    """One response as one JSON line: vLLM's own field order (the body ``curl`` saves), or, with
    ``client``, as the openai client's ``model_dump_json`` writes the object it returns (its models
    keep vLLM's extra ``metrics`` field)."""
    created, model = 1787366173, "org/target"
    if chat:
        choice: dict[str, object] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop", "stop_reason": None}
    tokens = 24  # usage is not read
    body: dict[str, object] = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{index:032x}",
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {"prompt_tokens": 11, "total_tokens": 11 + tokens, "completion_tokens": tokens},
        "metrics": {"speculative_decoding": spec} if spec is not None else None,
    }
    if not client:
        return json.dumps(body)
    from openai.types import Completion
    from openai.types.chat import ChatCompletion

    return (ChatCompletion if chat else Completion).model_validate(body).model_dump_json()


def vllm_args_line(args: dict[str, object], *, prefix: str = "(APIServer pid=7) ") -> str:
    """vLLM's startup line logger.info("non-default args: %s", args) (vllm/entrypoints/common/startup.py,
    log_non_default_args): the dict as Python prints it, through vLLM's format."""
    record = logging.LogRecord(
        "vllm.entrypoints.common.startup", logging.INFO, "startup.py", 96, "non-default args: %s", (args,), None
    )
    record.created = 1747044600.0
    return prefix + VLLM_FORMAT.format(record)
