"""Serving evidence as the engines write it: vLLM's and SGLang's stats lines through the logging
formatters the engines configure, and their Prometheus pages through prometheus_client itself.
"""

from __future__ import annotations

import json
import logging
import logging.handlers

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


def _record(message: str, filename: str = "metrics.py") -> logging.LogRecord:
    record = logging.LogRecord("vllm.v1.metrics.loggers", logging.INFO, filename, 96, message, None, None)
    record.created = 1747044672.0  # a fixed time: the line's timestamp text is then known
    return record


VLLM_FORMAT = logging.Formatter(
    "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s", datefmt="%m-%d %H:%M:%S"
)


def vllm_line(drafts: int, accepted_per_pos: list[int], elapsed: float = 10.0) -> str:
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
    return VLLM_FORMAT.format(_record(message))


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
    mean: float, accepted: int, drafted: int, rates: str, *, filename: str = "metrics.py", prefix: str = ""
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
    return prefix + VLLM_FORMAT.format(_record(message, filename))


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
