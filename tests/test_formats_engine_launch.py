"""How the serving engine was launched, read from its own start-up line or a launch command in its log."""

from __future__ import annotations

from builders.serving import sglang_line, sglang_server_args_line
from triage_tui.core.formats.engine_launch import parse_launch_line, read_engine_launches

DRAFT = "lightseekorg/kimi-k2.5-eagle3"


def test_sglang_server_args_name_the_algorithm_and_the_drafter(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text(
        "\n".join(
            [
                sglang_server_args_line(speculative_algorithm="EAGLE", speculative_draft_model_path=DRAFT),
                sglang_line(100, 100),
                sglang_line(101, 100),
            ]
        )
        + "\n"
    )
    (launch,) = read_engine_launches(log)
    assert (launch.engine, launch.algorithm, launch.draft_model, launch.how, launch.line) == (
        "sglang",
        "EAGLE",
        DRAFT,
        "server_args",
        1,
    )
    assert "--speculative-algorithm EAGLE" in launch.describe() and f"{log}:1" in launch.describe()


def test_older_dataclass_repr_and_command_lines():
    old = (
        "[2025-06-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', "
        "speculative_algorithm='EAGLE3', speculative_draft_model_path='/d/eagle3')"
    )
    assert parse_launch_line(old) == ("EAGLE3", "/d/eagle3", "server_args")
    # The abbreviations SGLang's docs use (argparse prefixes); NEXTN resolves to EAGLE.
    command = "+ python3 -m sglang.launch_server --model-path /m --speculative-algo NEXTN --speculative-draft /d --tp 8"
    assert parse_launch_line(command) == ("EAGLE", "/d", "command line")
    assert parse_launch_line("sglang serve --speculative-algorithm=eagle3 --model-path /m") == (
        "EAGLE3",
        None,
        "command line",
    )
    # No algorithm named (speculation off), or not SGLang's line at all.
    assert parse_launch_line(sglang_server_args_line()) is None
    assert parse_launch_line(sglang_line(300, 100)) is None
    assert parse_launch_line('vllm serve /m --speculative-config \'{"method": "eagle"}\'') is None


def test_an_unreadable_log_records_no_launch(tmp_path):
    assert read_engine_launches(tmp_path / "missing.log") == ()
    (tmp_path / "binary.log").write_bytes(b"\xff\xfe" * 100)
    assert read_engine_launches(tmp_path / "binary.log") == ()
