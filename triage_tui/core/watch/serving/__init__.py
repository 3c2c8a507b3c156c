"""Serving evidence: what vLLM and SGLang accepted from the drafter, in one convention (``evidence``).

The rooms, top to bottom: ``read`` (sources read once or followed, pooled) and ``compare`` (serving
against the training side: findings, flags) over ``registry`` (``SERVING_SOURCES``, every source
class once) over ``logs``, ``metrics`` and ``meta_info`` (one module per source format, each a
``ServingSource``) over ``source`` (the protocol) and ``tail`` (a growing file's new lines) over
``evidence`` (the typed results and the convention) and ``tuning`` (read bounds). Importers name
the module that holds what they use; this package re-exports nothing.
"""
