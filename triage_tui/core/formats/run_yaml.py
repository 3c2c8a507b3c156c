"""speculators' ``run.yaml``: the arguments ``python -m speculators.train`` ran with.

speculators 0.9.0 writes it at rank 0 into ``--save-path``, beside the ``<epoch>/`` checkpoints
(``speculators/train/cli.py`` ``main`` calls ``cfg.save(args.save_path)``;
``speculators/train/config/artifacts.py`` ``save`` writes ``yaml.safe_dump({"train": nested})``
from ``dump_yaml``). Only the values a flag or a config file supplied are written, grouped as the
schema groups them (``speculators/train/config/schema.py``)::

    train:
      verifier: {verifier_name_or_path: ...}
      draft: {from_pretrained: ..., draft_vocab_size: ..., d2t_path: ..., t2d_path: ...}
      data: {data_path: ...}

What a diagnosis needs from it: the drafter the fine-tune started from (``from_pretrained``), the
target (``verifier_name_or_path``), and the mapping the trainer labelled with, which
``train/cli.py`` ``parse_vocab_mappings`` takes from ``--d2t-path``/``--t2d-path`` or else from
``<data_path>/d2t-<draft_vocab_size>.npy`` (and installs into the pretrained drafter:
``build_draft_model`` passes it to ``from_pretrained``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triage_tui.core.errors import BadInput

__all__ = ["SpeculatorsRunConfig", "read_run_yaml"]

# A real run.yaml is under 2 KB (only the non-default values); anything this large is not one.
MAX_BYTES = 1 << 20
# speculators' DataArgs.data_path default: what the trainer used when the file does not name one.
DEFAULT_DATA_PATH = "./output"


@dataclass(frozen=True)
class SpeculatorsRunConfig:
    """The paths and sizes of one speculators run's resolved config, as written (relative paths
    are relative to the trainer's working directory, which the file does not record)."""

    path: Path
    from_pretrained: str | None
    verifier: str | None
    data_path: str
    draft_vocab_size: int | None
    d2t_path: str | None
    t2d_path: str | None

    def mapping_path(self) -> str | None:
        """The d2t file ``parse_vocab_mappings`` loads (``_load_mappings`` pairs it with its t2d)."""
        if self.d2t_path:
            return self.d2t_path
        if self.draft_vocab_size is None:
            return None  # no mapping: speculators trains over the full verifier vocab
        return str(Path(self.data_path) / f"d2t-{self.draft_vocab_size}.npy")


def read_run_yaml(path: Path) -> SpeculatorsRunConfig:
    """The config; BadInput naming the file when it is unreadable or not speculators' layout."""
    import yaml

    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    if len(raw) > MAX_BYTES:
        raise BadInput(path, f"over {MAX_BYTES >> 20} MiB: not a speculators run.yaml")
    try:
        document = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise BadInput(path, f"not UTF-8 text (byte {err.start})") from None
    except RecursionError:
        raise BadInput(path, "not valid YAML: nested too deeply") from None
    except yaml.YAMLError as err:
        raise BadInput(path, f"not valid YAML: {str(err).splitlines()[0]}") from None
    train = document.get("train") if isinstance(document, dict) else None
    if not isinstance(train, dict):
        raise BadInput(path, "no 'train:' mapping at the top: not a speculators run.yaml")
    verifier, draft, data = (_group(path, train, name) for name in ("verifier", "draft", "data"))
    vocab = draft.get("draft_vocab_size")
    if vocab is not None and (isinstance(vocab, bool) or not isinstance(vocab, int) or vocab <= 0):
        raise BadInput(path, f"train.draft.draft_vocab_size is {vocab!r}, not a positive integer")
    return SpeculatorsRunConfig(
        path=path,
        from_pretrained=_text(path, draft, "draft", "from_pretrained"),
        verifier=_text(path, verifier, "verifier", "verifier_name_or_path"),
        data_path=_text(path, data, "data", "data_path") or DEFAULT_DATA_PATH,
        draft_vocab_size=vocab,
        d2t_path=_text(path, draft, "draft", "d2t_path"),
        t2d_path=_text(path, draft, "draft", "t2d_path"),
    )


def _group(path: Path, train: dict, name: str) -> dict:
    group = train.get(name)
    if group is None:
        return {}  # nothing in it differed from speculators' defaults
    if not isinstance(group, dict):
        raise BadInput(path, f"train.{name} is a {type(group).__name__}, not a mapping")
    return group


def _text(path: Path, group: dict[str, Any], group_name: str, key: str) -> str | None:
    value = group.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadInput(path, f"train.{group_name}.{key} is a {type(value).__name__}, not a path")
    return value
