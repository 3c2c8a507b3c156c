"""The sizes and paths of a remap that tests turn: small windows, the path through torch, a staging device.

Read as ``tuning.NAME`` by the code that uses them (tests/test_layers.py refuses
``from triage_tui.core.fix.remap.tuning import NAME``): a test's monkeypatch here reaches every
caller, wherever the code moves.
"""

from __future__ import annotations

# Rows are read and written this many bytes at a time: peak memory is a few windows.
WINDOW_BYTES = 32 << 20
# Below this an lm_head is gathered on the CPU even when a GPU is present: the copy to the
# device would cost more than the gather.
GPU_MIN_BYTES = 64 << 20
# False sends a safetensors source through torch as a .bin source is (tests compare the two paths
# byte for byte); True takes the single pass wherever the source allows it.
SINGLE_PASS = True
# A device to stage the old lm_head on whatever its size ("cpu" runs the staged gather without a
# GPU); None: a CUDA device, for a head of at least GPU_MIN_BYTES.
STAGE_ON: str | None = None
