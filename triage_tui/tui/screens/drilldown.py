"""Drill-down for one hypothesis: its evidence, the numbers of the checks behind it, the action."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import HorizontalScroll, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static, TabbedContent, TabPane

from triage_tui.core.text import printable
from triage_tui.tui.widgets.checks_progress import STATUS_STYLE
from triage_tui.tui.widgets.hypotheses_list import score_bar

if TYPE_CHECKING:
    from triage_tui.core.checks.result import CheckResult
    from triage_tui.core.diagnose import Diagnosis
    from triage_tui.core.hypotheses import Hypothesis
    from triage_tui.tui.app import TriageApp

# Which checks hold the numbers behind each hypothesis (ids of docs/contracts.md, check --json).
CHECKS_BEHIND = {
    "vocab_mapping_mismatch": ("vocab_mapping", "replay"),
    "hidden_state_format": ("hidden_state", "replay"),
    "verifier_mask_mismatch": ("verifier_mask", "replay"),
}
REMAP_HYPOTHESIS = "vocab_mapping_mismatch"


def _fmt_str(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(_fmt_str(v) for v in value)
    return str(value)


def _fmt(value: Any) -> Text:
    """A value for a table cell: Text, so a path or tag holding brackets is never read as markup."""
    return Text(printable(_fmt_str(value)))


def _plain_table(*columns: str) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(Text(printable(column)))
    return table


def _key_values(details: Mapping[str, Any], keys: list[str] | None = None) -> Table:
    table = _plain_table("", "")
    table.show_header = False
    for key in keys if keys is not None else list(details):
        if key not in details:
            continue
        value = details.get(key)
        if isinstance(value, (dict, list)) and any(
            isinstance(v, (dict, list)) for v in (value.values() if isinstance(value, dict) else value)
        ):
            continue  # nested structures get their own tables
        shown = f"{value:.2%}" if key.endswith("_fraction") and isinstance(value, float) else _fmt(value)
        table.add_row(Text(printable(key.replace("_", " ")), style="dim"), shown)
    return table


def _rows_table(rows: list[Mapping[str, Any]]) -> Table:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    table = _plain_table(*(c.replace("_", " ") for c in columns))
    for row in rows:
        table.add_row(*(_fmt(row.get(c)) for c in columns))
    return table


def _token(value: str | None) -> Text:
    return Text("–", style="dim") if value is None else Text(repr(value), style="cyan")


def vocab_details(details: Mapping[str, Any]) -> list[RenderableType]:
    vd = details.get("draft_vocab_size")
    match = details.get("positional_match")
    parts: list[RenderableType] = []
    headline = Text()
    headline.append(f"{match}", style="bold red" if details.get("positional_match_fraction", 1) < 0.99 else "bold")
    headline.append(f" / {vd} draft positions map to the same target token in both mappings")
    parts.append(headline)
    parts.append(
        _key_values(
            details,
            [
                "positional_match",
                "positional_match_fraction",
                "overlap",
                "only_in_checkpoint",
                "only_in_run",
                "draft_vocab_size",
                "target_vocab_size",
                "run_draft_vocab_size",
                "run_target_vocab_size",
                "checkpoint_source",
                "run_source",
            ],
        )
    )
    moves = details.get("checkpoint_positions_in_run")
    if isinstance(moves, Mapping):
        parts.append(Text("\nwhere the checkpoint's draft positions land in the run's vocab", style="bold"))
        parts.append(
            Text(
                f"{moves.get('same')} keep their position, {moves.get('moved')} move "
                f"(median shift {moves.get('median_shift')}), {moves.get('dropped')} have no place"
            )
        )
        sample = moves.get("sample") or []
        if sample:
            table = _plain_table("checkpoint pos", "→ run pos", "shift")
            for row in sample:
                old, new = row.get("checkpoint_position"), row.get("run_position")
                table.add_row(str(old), str(new), f"{new - old:+d}" if old is not None and new is not None else "")
            parts.append(table)
    mismatches = details.get("first_mismatches") or []
    if mismatches:
        parts.append(Text(f"\nfirst {len(mismatches)} mismatching draft positions", style="bold"))
        table = _plain_table("draft id", "checkpoint → target", "token", "run → target", "token")
        for row in mismatches:
            table.add_row(
                str(row.get("draft_id")),
                _fmt(row.get("checkpoint_target_id")),
                _token(row.get("checkpoint_token")),
                _fmt(row.get("run_target_id")),
                _token(row.get("run_token")),
            )
        parts.append(table)
    coverage = details.get("training_tokens")
    if isinstance(coverage, Mapping):
        parts.append(Text("\nthe run's training tokens", style="bold"))
        parts.append(_key_values(coverage))
    return parts


def hidden_state_details(details: Mapping[str, Any]) -> list[RenderableType]:
    parts: list[RenderableType] = [
        _key_values(
            details,
            [
                "target_hidden_size",
                "target_hidden_size_source",
                "draft_hidden_size",
                "fc_in_features",
                "aux_chunks_present",
                "dumps_format",
                "dump_samples",
            ],
        )
    ]
    shapes = details.get("shapes") or []
    if shapes:
        parts.append(Text("\nshapes", style="bold"))
        table = _plain_table("", "what", "expected", "actual")
        for row in shapes:
            ok = row.get("ok")
            table.add_row(
                Text("✔" if ok else "✖", style="green" if ok else "bold red"),
                _fmt(row.get("what")),
                _fmt(row.get("expected")),
                _fmt(row.get("actual")),
            )
        parts.append(table)
    rms = details.get("rms_by_chunk")
    if rms:
        parts.append(Text("\nRMS per aux chunk (low → high layers should rise)", style="bold"))
        top = max(rms) or 1.0
        table = _plain_table("chunk", "rms", "")
        for index, value in enumerate(rms):
            table.add_row(str(index), f"{value:.4g}", Text("█" * max(1, round(24 * value / top)), style="cyan"))
        parts.append(table)
    issues = details.get("issues") or []
    if issues:
        parts.append(Text("\nissues", style="bold"))
        parts.append(_rows_table(issues))
    return parts


def replay_details(details: Mapping[str, Any]) -> list[RenderableType]:
    parts: list[RenderableType] = []
    before = details.get("accuracy_checkpoint_mapping")
    after = details.get("accuracy_run_mapping")
    if before is not None:
        table = _plain_table("labels read through", "top-1 accuracy", "soft CE")
        table.add_row("the checkpoint's mapping", f"{before:.1%}", _fmt(details.get("loss_checkpoint_mapping")))
        if after is not None:
            table.add_row("the run's mapping", f"{after:.1%}", _fmt(details.get("loss_run_mapping")))
        parts.append(table)
    parts.append(_key_values(details, ["tokens", "samples", "device", "label_source", "best_chunk_order"]))
    by_order = details.get("accuracy_by_chunk_order")
    if isinstance(by_order, Mapping) and by_order:
        parts.append(Text("\naccuracy by aux chunk order (as stored: the first row)", style="bold"))
        best = details.get("best_chunk_order")
        table = _plain_table("order", "accuracy", "")
        for order, accuracy in by_order.items():
            shown = f"{accuracy:.1%}" if isinstance(accuracy, float) else _fmt(accuracy)
            table.add_row(_fmt(order), shown, Text("best", style="green") if order == best else "")
        parts.append(table)
    for note in details.get("notes") or ():
        parts.append(Text(f"note: {printable(note)}", style="yellow"))
    return parts


def verifier_mask_details(details: Mapping[str, Any]) -> list[RenderableType]:
    parts: list[RenderableType] = []
    invariants = details.get("invariants") or []
    if invariants:
        table = _plain_table("", "invariant", "result", "")
        for row in invariants:
            ok = bool(row.get("ok"))
            table.add_row(
                Text("✔" if ok else "✖", style="green" if ok else ("bold red" if row.get("required") else "yellow")),
                _fmt(row.get("name")),
                _fmt(row.get("detail") or ""),
                Text("required" if row.get("required") else "context", style="dim"),
            )
        parts.append(table)
    rest = {k: v for k, v in details.items() if k != "invariants"}
    if rest:
        parts.extend(generic_details(rest))
    return parts


def generic_details(details: Mapping[str, Any]) -> list[RenderableType]:
    """Scalars as key/value lines, lists of records as tables (verifier_mask's invariants etc.)."""
    parts: list[RenderableType] = [_key_values(details)]
    for key, value in details.items():
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            parts.append(Text(f"\n{printable(key.replace('_', ' '))}", style="bold"))
            parts.append(_rows_table(value))
        elif isinstance(value, Mapping) and value:
            parts.append(Text(f"\n{printable(key.replace('_', ' '))}", style="bold"))
            parts.append(_key_values(value))
    return parts


RENDERERS = {
    "vocab_mapping": vocab_details,
    "hidden_state": hidden_state_details,
    "verifier_mask": verifier_mask_details,
    "replay": replay_details,
}


def check_section(result: CheckResult) -> RenderableType:
    glyph, style = STATUS_STYLE.get(result.status, ("?", ""))
    header = Text()
    header.append(f"{glyph} {result.name}", style=f"{style} bold")
    header.append(f"  {result.status}: ", style=style)
    header.append(printable(result.summary))
    if result.status in ("skipped", "error") or not result.details:
        return Group(header, Text(""))
    renderer = RENDERERS.get(result.name, generic_details)
    return Group(header, *renderer(result.details), Text(""))


class DrillDownScreen(Screen):
    """Tabs: Evidence, Details (the checks' numbers), Action. Esc goes back."""

    HELP_TITLE = "hypothesis"
    BINDING_GROUP_TITLE = "Hypothesis"
    BINDINGS = [
        Binding("escape,backspace", "app.pop_screen", "Back", key_display="esc", id="back"),
        Binding("m", "remap", "Remap", tooltip="Write a checkpoint with lm_head rows in the run's order", id="remap"),
        Binding(
            "c", "copy_command", "Copy command", tooltip="Copy the fix's shell command (OSC 52, tmux too)", id="copy"
        ),
        Binding("1", "tab('evidence')", "Evidence", show=False),
        Binding("2", "tab('details')", "Details", show=False),
        Binding("3", "tab('action')", "Action", show=False),
    ]

    def __init__(self, path: Path, run_name: str, diagnosis: Diagnosis, hypothesis: Hypothesis) -> None:
        super().__init__()
        self.path = path
        self.run_name = run_name
        self.diagnosis = diagnosis
        self.hypothesis = hypothesis

    @property
    def triage(self) -> TriageApp:
        return self.app  # type: ignore[return-value]  # Screen.app is an App; this screen only runs in TriageApp

    def compose(self) -> ComposeResult:
        hypothesis = self.hypothesis
        title = Text(" ")
        title.append_text(score_bar(hypothesis.score))
        title.append(printable(hypothesis.title), style="bold")
        title.append(f"  · {printable(self.run_name)}", style="dim")
        yield Static(title, id="drill-title")
        with TabbedContent(initial="evidence", id="drill-tabs"):
            with TabPane("Evidence", id="evidence"):
                with VerticalScroll():
                    yield Static(self._evidence(), id="evidence-body")
            with TabPane("Details", id="details"):
                with VerticalScroll():
                    yield Static(self._details(), id="details-body")
            with TabPane("Action", id="action"):
                with VerticalScroll():
                    yield Static(self._action(), id="action-body")
                    for index, command in enumerate(self._commands()):
                        if index:
                            yield Static(
                                "\nOr the opposite fix: keep the weights and give the trainer the "
                                "checkpoint's own mapping:"
                            )
                        # One line, never wrapped: copied from the terminal (tmux) it must still run.
                        # Wider than the pane, it scrolls sideways; `c` copies it (OSC 52).
                        with HorizontalScroll(classes="command-line"):
                            yield Static(Text(printable(command), style="cyan"), classes="command")
        yield Footer()

    def _evidence(self) -> RenderableType:
        text = Text()
        for line in self.hypothesis.evidence:
            text.append("• ", style="bold")
            text.append(f"{printable(line)}\n")
        if not self.hypothesis.evidence:
            text.append("no evidence recorded\n", style="dim")
        text.append("\nchecks\n", style="bold")
        for name, result in self.diagnosis.checks.items():
            glyph, style = STATUS_STYLE.get(result.status, ("?", ""))
            text.append(f"{glyph} {name:<14}", style=style)
            text.append(f"{printable(result.summary)}\n", style="dim" if result.status == "skipped" else "")
        inputs = self.diagnosis.inputs
        text.append("\ninputs\n", style="bold")
        for label in ("checkpoint", "mapping", "data", "target"):
            value = getattr(inputs, label)
            text.append(f"  {label:<11}", style="dim")
            text.append(f"{printable(value) if value is not None else '–'}\n")
        return text

    def _details(self) -> RenderableType:
        names = CHECKS_BEHIND.get(self.hypothesis.id, tuple(self.diagnosis.checks))
        sections = [check_section(self.diagnosis.checks[n]) for n in names if n in self.diagnosis.checks]
        return Group(*sections) if sections else Text("no check details", style="dim")

    def _commands(self) -> tuple[str, ...]:
        """The fix's shell commands, when this hypothesis has one and the vocab check calls for it."""
        if self.hypothesis.action != "remap" or not self._remap_called_for():
            return ()
        return self.diagnosis.inputs.fix_commands() or ()

    def _remap_called_for(self) -> bool:
        vocab = self.diagnosis.checks.get("vocab_mapping")
        return vocab is not None and vocab.status == "fail"

    def _action(self) -> RenderableType:
        text = Text()
        if self.hypothesis.action == "remap" and not self._remap_called_for():
            vocab = self.diagnosis.checks.get("vocab_mapping")
            text.append("Nothing to remap\n", style="bold")
            text.append(
                "The vocab check "
                + (f"{vocab.status}: {printable(vocab.summary)}" if vocab is not None else "did not run")
                + "\n"
            )
            return text
        if self.hypothesis.action == "remap":
            text.append("Remap the drafter's lm_head rows into the run's order\n", style="bold")
            text.append(
                "Row j of the new head is the old row of the run's token j; tokens the drafter never had "
                "get new rows; d2t/t2d become the run's. The source is not touched.\n\n"
            )
            if self.triage.readonly:
                text.append("read-only: the remap key is disabled here. From a shell:", style="magenta")
            else:
                text.append("press ", style="dim")
                text.append("m", style="bold")
                text.append(" to see exactly what would be written, then y to write it. From a shell (", style="dim")
                text.append("c", style="bold")
                text.append(" copies the command):", style="dim")
            return text
        # No fix triage can apply: show what the checks behind this hypothesis found, in their words.
        text.append("triage has no one-key fix for this. What the checks found:\n\n", style="bold")
        names = CHECKS_BEHIND.get(self.hypothesis.id, tuple(self.diagnosis.checks))
        for name in names:
            result = self.diagnosis.checks.get(name)
            if result is None or result.status not in ("fail", "error"):
                continue
            glyph, style = STATUS_STYLE.get(result.status, ("?", ""))
            text.append(f"{glyph} {name}: ", style=style)
            text.append(f"{printable(result.summary)}\n")
        for line in self.hypothesis.evidence:
            text.append("• ", style="bold")
            text.append(f"{printable(line)}\n")
        return text

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "remap":
            # Remaps, or says why not; absent in --readonly, on the other hypotheses, and where the
            # vocab check found nothing to remap (the Action tab says so; offering `m` would contradict it).
            return not (self.triage.readonly or self.hypothesis.id != REMAP_HYPOTHESIS or not self._remap_called_for())
        if action == "copy_command":
            return bool(self._commands())
        return True

    def action_remap(self) -> None:
        if self.triage.readonly:
            return
        if self.triage.remap_available(self.path):
            self.triage.request_remap(self.path)
        else:
            self.triage.explain_remap_blocker(self.path)

    def action_copy_command(self) -> None:
        commands = self._commands()
        if not commands:
            self.notify("this hypothesis has no shell command to copy", title="c", timeout=4)
            return
        self.app.copy_to_clipboard(commands[0])
        self.notify(commands[0], title="copied to the clipboard", timeout=6)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
