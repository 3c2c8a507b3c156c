"""A console log for the console pane's tests: what a crashed torchrun worker leaves in ``train.log``.

Colours (a logger's level), a terminal-title escape and Rich markup as text (a hostile line), a tqdm
bar redrawn with carriage returns, and rank 0's traceback ending in CUDA out of memory as torch's
excepthook prefixes it (``[rank0]:``).
"""

from __future__ import annotations

from pathlib import Path

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB"
TRAIN_LOG = (
    "\x1b[32mINFO\x1b[0m starting training on 8 GPUs\n"
    "\x1b]0;owned title\x07[bold red]not markup[/bold red] [@click=app.quit]quit[/]\n"
    "Epoch 0:   0%|          | 0/10 [00:00<?, ?it/s]"
    "\rEpoch 0:  50%|#####     | 5/10 [00:05<00:05,  1.00it/s]"
    "\rEpoch 0: 100%|##########| 10/10 [00:10<00:00,  1.00it/s]\n"
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/work/train.py", line 12, in <module>\n'
    "[rank0]:     loss.backward()\n"
    f"[rank0]: {OOM}\n"
)


def write_console(run: Path, text: str = TRAIN_LOG) -> Path:
    log = run / "train.log"
    log.write_text(text)
    return log
