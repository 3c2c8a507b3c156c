"""TensorBoard's own scalar smoothing, run from the installed package: the frontend that
``tensorboard`` ships in ``tensorboard/webfiles.zip`` holds classicSmoothing
(tensorflow/tensorboard tensorboard/webapp/widgets/line_chart_v2/data_transformer.ts) compiled
into ``index.js``. Its function is cut out of that file as shipped and run with Node.js (on the
machine, as the CI image has it), so the smoothing the chart shows is held to what TensorBoard
draws, not to a port of it.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
import subprocess
import zipfile
from collections.abc import Sequence
from pathlib import Path

import tensorboard

# The first statements of classicSmoothing once compiled: the weight clamped to [0, 1] (non-finite -> 0).
_ANCHOR = re.compile(r"Number\.isFinite\((\w)\)\|\|\(\1=0\),\1=Math\.max\(0,Math\.min\(\1,1\)\);")


@functools.cache
def classic_smoothing_source() -> str:
    """``function(series, weight){...}`` as the installed TensorBoard's index.js has it."""
    webfiles = Path(tensorboard.__file__).parent / "webfiles.zip"
    with zipfile.ZipFile(webfiles) as archive:
        code = archive.read("index.js").decode()
    anchors = list(_ANCHOR.finditer(code))
    assert len(anchors) == 1, f"{webfiles}: classicSmoothing's opening found {len(anchors)} times"
    start = anchors[0].start()
    head = code.rfind("function*(){", 0, start)
    outer = code.rfind("function(", 0, head)
    params = code[outer + len("function(") : code.index(")", outer)]
    assert re.fullmatch(r"\w+,\w+", params) and params.split(",")[1] == anchors[0].group(1), params
    depth, i = 1, head + len("function*(){")
    while depth:  # the generator's body, to its closing brace (the compiled code has no braces in strings here)
        depth += {"{": 1, "}": -1}.get(code[i], 0)
        i += 1
    body = code[head + len("function*(){") : i - 1]
    return f"function({params}){{{body}}}"


_RUNNER = """
const smooth = %s;
const decode = (v) => (typeof v === "string" ? Number(v) : v);
const encode = (v) => (Number.isFinite(v) ? v : String(v));
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
const series = (values) => ({id: "s", points: values.map((y, x) => ({x, y: decode(y)}))});
const out = cases.map(([values, weight]) => smooth([series(values)], decode(weight))[0].points.map((p) => encode(p.y)));
process.stdout.write(JSON.stringify(out));
"""


def _encode(v: float) -> float | str:
    return v if math.isfinite(v) else {"inf": "Infinity", "-inf": "-Infinity"}.get(str(v), "NaN")


def _decode(v: float | str) -> float:
    return float(v) if not isinstance(v, str) else float(v.replace("Infinity", "inf"))


def tensorboard_smoothing(cases: Sequence[tuple[Sequence[float], float]]) -> list[list[float]]:
    """What TensorBoard's chart draws for each ``(values, weight)``, by its own code (one Node.js run)."""
    node = shutil.which("node")
    assert node is not None, "Node.js runs TensorBoard's shipped smoothing: install nodejs"
    payload = [[[_encode(float(v)) for v in values], _encode(float(weight))] for values, weight in cases]
    done = subprocess.run(
        [node, "-e", _RUNNER % classic_smoothing_source()],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return [[_decode(v) for v in smoothed] for smoothed in json.loads(done.stdout)]
