"""speculators' run.yaml (formats/run_yaml.py): read as speculators 0.9.0 writes it
(``TrainConfig.save``, ``speculators/train/config/artifacts.py``); anything else is one line
naming the file, and in `check` a note, never a stopped diagnosis."""

from __future__ import annotations

import pytest

from triage_tui.core.diagnose.check_inputs import resolve_run
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.run_yaml import read_run_yaml


def _saved(tmp_path, *argv):
    from speculators.train.config.schema import TrainConfig

    save_path = tmp_path / "checkpoints"
    TrainConfig.resolve(["--verifier-name-or-path", "meta-llama/Llama-3.1-8B", *argv]).save(str(save_path))
    return save_path / "run.yaml"


def test_reads_what_speculators_writes(tmp_path):
    path = _saved(tmp_path, "--from-pretrained", "/d/drafter", "--data-path", "/d/data", "--draft-vocab-size", "32000")
    config = read_run_yaml(path)
    assert (config.from_pretrained, config.verifier, config.data_path) == (
        "/d/drafter",
        "meta-llama/Llama-3.1-8B",
        "/d/data",
    )
    assert config.mapping_path() == "/d/data/d2t-32000.npy"


def test_explicit_mapping_paths_and_defaults(tmp_path):
    path = _saved(tmp_path, "--d2t-path", "m/d2t.npy", "--t2d-path", "m/t2d.npy")
    config = read_run_yaml(path)
    assert config.mapping_path() == "m/d2t.npy" and config.from_pretrained is None
    # No --draft-vocab-size and no d2t: speculators trains over the full verifier vocab.
    assert read_run_yaml(_saved(tmp_path / "b")).mapping_path() is None
    assert read_run_yaml(_saved(tmp_path / "b")).data_path == "./output"  # DataArgs' default


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe train:", "not UTF-8"),
        (b"train: [" * 5000, "not valid YAML"),
        (b"train: {draft: {from_pretrained: [1, 2]}}", "train.draft.from_pretrained is a list"),
        (b"train: {draft: {draft_vocab_size: '32000'}}", "not a positive integer"),
        (b"train: {draft: 3}", "train.draft is a int"),
        (b"- a list\n", "no 'train:' mapping"),
        (b"", "no 'train:' mapping"),
        (b"train: {a: 1}\n" + b"#" * (1 << 20), "over 1 MiB"),
    ],
)
def test_anything_else_is_one_line_naming_the_file(tmp_path, content, says):
    path = tmp_path / "run.yaml"
    path.write_bytes(content)
    with pytest.raises(BadInput) as caught:
        read_run_yaml(path)
    assert caught.value.path == str(path) and says in caught.value.what
    assert "\n" not in caught.value.line()


def test_a_broken_run_yaml_is_a_note_in_check(tmp_path):
    from builders.tensorboard import write_scalars

    run = tmp_path / "run"
    write_scalars(run, {"train/loss_0": [(i, 6.9) for i in range(3)]})
    (run / "run.yaml").write_bytes(b"\xff")
    inputs = resolve_run(run).inputs
    assert any("run.yaml not used" in note and "not UTF-8" in note for note in inputs.notes)
