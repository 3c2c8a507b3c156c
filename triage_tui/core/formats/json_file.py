"""The one reader of JSON files (config.json, index.json, tokenizer.json, trainer_state.json): every
way one can be bad is BadInput naming the file, never a traceback."""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from triage_tui.core.errors import BadInput
from triage_tui.core.objstore import deferred

__all__ = ["Streamed", "read_json", "read_json_streaming"]

# A JSON string (escapes included) or a bracket: what the nesting bound looks at.
# Unrolled (``"[^"\\]*(?:\\.[^"\\]*)*"``), not ``"(?:[^"\\]|\\.)*"``: re keeps state for every repeat of a
# group, so the plain form costs ~100 bytes of memory per character of a long string.
_STRING_OR_BRACKET = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def read_json(path: Path, *, max_bytes: int | None = None, max_depth: int | None = None) -> Any:
    """The parsed document; BadInput when unreadable, larger than ``max_bytes``, not UTF-8, not JSON,
    or nested deeper than ``max_depth`` (else than the interpreter's recursion allows). A mirrored
    object left unfetched until read (``objstore.deferred``) is fetched first."""
    deferred.materialize(path)
    try:
        # O_NONBLOCK: a FIFO named like the file must not hang the read; only a regular file is read.
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise BadInput(path, "not a regular file")
            data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise BadInput(path, f"larger than {max_bytes} bytes: not a file this reader reads whole")
    if max_depth is not None:
        _check_depth(path, data, max_depth)
    try:
        return json.loads(data)
    except UnicodeDecodeError as err:  # json.loads detects UTF-8/16/32; other bytes land here
        raise BadInput(path, f"not valid JSON: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise BadInput(path, f"not valid JSON: {err}") from None
    except ValueError as err:  # an integer beyond Python's digit limit for int(str)
        raise BadInput(path, f"not valid JSON here: {err}") from None
    except RecursionError:
        raise BadInput(path, "not valid JSON: nested too deeply") from None


def _check_depth(path: Path, data: bytes, max_depth: int) -> None:
    """BadInput when brackets outside strings nest deeper than ``max_depth`` (before json's recursion)."""
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                raise BadInput(path, f"not valid JSON here: nested deeper than {max_depth} levels")
        elif token in (b"]", b"}"):
            depth -= 1


@dataclass(frozen=True)
class Streamed:
    """A member whose array was handed to its callback element by element: how many there were."""

    count: int


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_CHUNK = 1 << 20


def read_json_streaming(
    path: Path,
    *,
    arrays: Mapping[str, Callable[[Any], None]],
    max_value_bytes: int,
    max_depth: int,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """A JSON object read one value at a time, so memory follows the largest value, not the file.

    Each element of an array that is the value of a key in ``arrays`` is parsed and handed to that
    key's callback, never held here (the member becomes ``Streamed(count)``); every other member's
    value is parsed whole and returned. BadInput as ``read_json`` says, and when one value (an
    element, or a member outside ``arrays``) is longer than ``max_value_bytes`` characters."""
    try:
        # O_NONBLOCK: a FIFO named like the file must not hang the read; only a regular file is read.
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as handle:
            status = os.fstat(handle.fileno())
            if not stat.S_ISREG(status.st_mode):
                raise BadInput(path, "not a regular file")
            if max_bytes is not None and status.st_size > max_bytes:
                raise BadInput(path, f"larger than {max_bytes} bytes: not a file this reader reads")
            return _ObjectStream(path, handle, max_value_bytes, max_depth).members(arrays)
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None


class _ObjectStream:
    """A window of a JSON document's text: values are cut from its front with json's own decoder."""

    def __init__(self, path: Path, handle: BinaryIO, max_value: int, max_depth: int) -> None:
        self.path = path
        self.handle = handle
        self.max_value = max_value
        self.max_depth = max_depth
        self.text = ""
        self.at = 0  # where the next token starts in text
        self.consumed = 0  # characters dropped from text's front so far
        self.eof = False
        self.utf8 = codecs.getincrementaldecoder("utf-8")()

    def members(self, arrays: Mapping[str, Callable[[Any], None]]) -> dict[str, Any]:
        members: dict[str, Any] = {}
        if self.peek() != "{":
            raise BadInput(self.path, "the document is not an object")
        self.at += 1
        if self.peek() == "}":
            self.at += 1
        else:
            while True:
                key = self.value()
                if not isinstance(key, str):
                    self.bad("an object key that is not a string")
                self.expect(":")
                callback = arrays.get(key)
                members[key] = self.elements(callback) if callback is not None and self.peek() == "[" else self.value()
                if self.separator("}"):
                    break
        if self.peek() != "":
            self.bad("extra data after the document")
        return members

    def elements(self, callback: Callable[[Any], None]) -> Streamed:
        self.expect("[")
        count = 0
        if self.peek() == "]":
            self.at += 1
            return Streamed(0)
        while True:
            callback(self.value())
            count += 1
            if self.separator("]"):
                return Streamed(count)

    def separator(self, closing: str) -> bool:
        """True past ``closing``; False past a comma; else the document is bad."""
        found = self.peek()
        if found not in (",", closing):
            self.bad(f"expected ',' or '{closing}'")
        self.at += 1
        return found == closing

    def expect(self, token: str) -> None:
        if self.peek() != token:
            self.bad(f"expected '{token}'")
        self.at += 1

    def peek(self) -> str:
        """The next character that is not whitespace, "" at the end of the document."""
        while True:
            self.at = _WHITESPACE.match(self.text, self.at).end()  # type: ignore[union-attr]  # matches ""
            if self.at < len(self.text) or self.eof:
                return self.text[self.at : self.at + 1]
            self.more(_CHUNK)

    def value(self) -> Any:
        """The value starting at the next token, cut from the window; a value that reaches the window's
        end is parsed again with more text (a number may go on), twice as much each time."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.at)
            except json.JSONDecodeError as err:
                if self.eof:
                    self.bad(str(err))
                end = None
            except RecursionError:
                self.bad("nested too deeply")
            except ValueError as err:  # an integer beyond Python's digit limit for int(str)
                raise BadInput(self.path, f"not valid JSON here: {err}") from None
            if end is not None and (end < len(self.text) or self.eof) and end - self.at <= self.max_value:
                brackets = self.text.count("[", self.at, end) + self.text.count("{", self.at, end)
                if brackets > self.max_depth:  # else it cannot nest deeper: no need to look
                    _check_depth(self.path, self.text[self.at : end].encode(), self.max_depth)
                self.at = end
                return value
            if min(len(self.text), end or len(self.text)) - self.at > self.max_value:
                raise BadInput(
                    self.path,
                    f"a value at character {self.consumed + self.at} is longer than {self.max_value} characters: "
                    "not one this reader holds",
                )
            self.more(max(_CHUNK, len(self.text) - self.at))

    def more(self, size: int) -> None:
        """``size`` more bytes of the file onto the window, dropping what was read before ``at``."""
        data = self.handle.read(size)
        self.eof = not data
        try:
            added = self.utf8.decode(data, final=self.eof)
        except UnicodeDecodeError as err:
            raise BadInput(self.path, f"not valid JSON: not UTF-8 text ({err.reason})") from None
        self.consumed += self.at
        self.text = self.text[self.at :] + added
        self.at = 0

    def bad(self, what: str) -> NoReturn:
        raise BadInput(self.path, f"not valid JSON: {what} (character {self.consumed + self.at})")
