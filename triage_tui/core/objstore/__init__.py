"""Runs in object storage (``s3://``, ``gs://``, any fsspec URL), read lazily and incrementally.

Top to bottom: ``mirror`` (a bucket prefix kept as a local tree, one listing a rescan) over
``follow`` (a growing object's appended bytes) and ``sparse`` (a local file holding only the byte
ranges fetched: a checkpoint's header and the tensors a check needs) over ``cache`` (bounded, on
disk) over ``store`` (one client per bucket: listing, whole and ranged reads, retries within a
deadline, every failure a BadInput naming the URL) over ``url`` and ``tuning``. It re-exports nothing.
"""
