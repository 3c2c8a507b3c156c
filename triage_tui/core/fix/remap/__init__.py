"""The fix: a drafter checkpoint whose ``lm_head`` rows sit where the run's vocab mapping needs them.

docs/case.md: a drafter's ``lm_head`` row ``i`` was trained to predict the target token its own
mapping gives position ``i``; a fine-tune that labels with another mapping asks row ``i`` for a
different token. The remap builds a new checkpoint where row ``j`` holds the old row of the run's
token ``j`` (bit for bit), rows for tokens the old drafter never had are initialised, and
``d2t``/``t2d`` are the run's. Every other tensor is copied unchanged. The opposite fix keeps the
weights and hands the trainer the checkpoint's own mapping (``keep``).

The rooms, top to bottom (tests/test_layers.py holds them to it):

    execute | keep          write, verify, rename into place / the checkpoint's own mapping
    verify | single_pass | torch_path | carry
                            compare with the source / the two ways the weights are written /
                            the files beside the weights
    rows                    row arithmetic: windows, gathers, initialised rows, byte equality
    plan                    everything decided and validated before a byte is written
    staging | writer        the temporary directory and its rename / a streamed safetensors file
    job | digest            cancel and progress / BLAKE3 of a file
    tuning                  the sizes and paths tests turn

Importers name the module that holds what they use (``from triage_tui.core.fix.remap.execute import
remap_checkpoint``); this package re-exports nothing (a re-export here would make every
``from triage_tui.core.fix.remap import tuning`` depend on the whole package, in a circle).
"""
