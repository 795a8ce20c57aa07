"""The demo's HTML page (``--html``) as a person sees it, in a real browser: Debian's Chromium, headless, at a
desktop's width and at a narrow one. The page is written as the run writes it (``write_outputs``) from a run's worth
of known syncs, not from a run, so that this takes seconds.

What is looked at is measured by the browser after layout: a script the test appends to its copy of the page (never
to the page itself) writes the facts into the DOM, and Chromium's ``--dump-dom`` hands them back.
"""

import base64
import html
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from demo import chart, kubectl
from demo.console import Console
from demo.hpa import Autoscaler, HpaSpec
from demo.hpa_controller import Sync
from demo.run import SCRIPT, Record, decision_line, settings_text, worth_saying, write_outputs
from demo.table import SHARED, Table
from harness.browser import dom_after_load

TITLE = "gpuscale demo: an HPA on gpu_utilization from the custom metrics API"
SPEC = HpaSpec(70, 1, 6, scale_down_window=12)
PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
# an error that quotes a server's HTML page: the page shows the markup as text
REFUSAL = "the custom metrics API answered 503: <html><b>Bad Gateway</b></html>"

FACTS = """<script>
addEventListener("load", () => {
  const all = [...document.body.querySelectorAll("*")];
  const name = (e) => e.tagName.toLowerCase() + (e.className ? "." + e.className : "");
  const cells = (rows) => [...rows].map((row) => [...row.cells].map((cell) => cell.innerText));
  const facts = {
    width: innerWidth,
    pageWidth: document.documentElement.scrollWidth,
    pastTheEdge: all.filter((e) => e.getBoundingClientRect().right > innerWidth).map(name),
    scrolled: all.filter((e) => e.scrollWidth > e.clientWidth && e.clientWidth > 0).map(name),
    title: document.title,
    h1: [...document.querySelectorAll("h1")].map((e) => e.innerText),
    header: cells(document.querySelectorAll("thead tr")),
    rows: cells(document.querySelectorAll("tbody tr")),
    alignments: [...new Set([...document.querySelectorAll("th, td")].map((c) => getComputedStyle(c).textAlign))],
    bold: document.querySelectorAll("b").length,
    images: [...document.images].map((i) => [i.naturalWidth, i.getBoundingClientRect().width]),
    text: document.body.innerText,
  };
  const out = document.createElement("pre");
  out.id = "facts";
  out.textContent = JSON.stringify(facts);
  document.body.append(out);
});
</script>"""


def known_syncs() -> list[Sync]:
    """The default run's work (0.5 GPU's worth, 2.7 from 10 s, 0.5 from 44 s) on values that follow it at once, a
    sync every 3 s for 75 s; the first sync refused."""
    autoscaler = Autoscaler(SPEC)
    current, syncs = 1, []
    for n in range(25):
        at = 3.0 * n
        pods = tuple(f"trainer-{k}" for k in range(current))
        each = min(100.0, 100 * SCRIPT.total(at) / current)
        values = {} if n == 0 else dict.fromkeys(pods, each)
        decision = autoscaler.decide(at, current, pods, values)
        syncs.append(Sync(at, pods, values, decision, answer="", error=REFUSAL if n == 0 else ""))
        current = decision.replicas
    return syncs


def answer(values: dict[str, float]) -> str:
    """A MetricValueList as the adapter answers it."""
    items = [
        {"describedObject": {"kind": "Pod", "namespace": "ml", "name": name, "apiVersion": "v1"},
         "metric": {"name": "gpu_utilization", "selector": None}, "timestamp": "2026-12-04T18:23:28Z",
         "windowSeconds": 60, "value": f"{value * 1000:.0f}m"}
        for name, value in values.items()
    ]  # fmt: skip
    return json.dumps({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {},
                       "items": items})  # fmt: skip


def known_record() -> Record:
    """What control_loop keeps of a run, from the known syncs, by the functions it uses."""
    record = Record(Table(tuple(f"trainer-{n}" for n in range(SPEC.max_replicas)), ("infer-a", "infer-b")))
    for sync in known_syncs():
        previous = record.syncs[-1] if record.syncs else None
        record.syncs.append(sync)
        record.table.add(sync, {"infer-a": 55.0, "infer-b": 20.0})
        if worth_saying(sync, previous):
            record.decisions.append(decision_line(sync, SPEC.target))
        if not record.kubectl and len(sync.values) == 4:
            record.kubectl = f"$ {kubectl.user_command(PATH)}\n{kubectl.shorten(answer(sync.values))}"
    return record


def seen(page: Path, width: int) -> dict[str, Any]:
    """The facts the browser measured on ``page`` in a window ``width`` CSS pixels wide."""
    copy = page.with_name(f"seen-{width}.html")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", FACTS + "</body>"), encoding="utf-8")
    found = re.search(r'<pre id="facts">(.*?)</pre>', dom_after_load(copy, width, 1000), re.DOTALL)
    assert found is not None, "the page's load event did not run the facts script"
    facts: dict[str, Any] = json.loads(html.unescape(found[1]))
    assert facts["width"] == width
    return facts


@dataclass(frozen=True)
class Written:
    record: Record
    picture: Path
    page: Path
    seen: dict[int, dict[str, Any]]  # by the window's width


WIDTHS = (1280, 800)  # a desktop's window, and a narrow one


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """A record, the picture and the page ``write_outputs`` made of it, and what the browser saw of the page."""
    tmp = tmp_path_factory.mktemp("page")
    record = known_record()
    header = settings_text(SPEC, SCRIPT)
    write_outputs(Console(io.StringIO(), 75), record, SPEC, SCRIPT, header, tmp / "run.png", tmp / "run.html")
    return Written(record, tmp / "run.png", tmp / "run.html", {w: seen(tmp / "run.html", w) for w in WIDTHS})


def test_the_title_is_shown_once(written: Written) -> None:
    facts = written.seen[1280]
    assert facts["h1"] == [facts["title"]] == [TITLE], f"the title is shown as {facts['h1']}"
    inline = re.search(r'src="data:image/png;base64,([^"]+)"', written.page.read_text(encoding="utf-8"))
    assert inline is not None
    shown, titled = base64.b64decode(inline[1]), written.picture.read_bytes()
    again = shown == titled
    assert not again, "the page's picture says the title again under the heading"
    assert shown == chart.png(written.record.syncs, SPEC, None, SCRIPT.total)
    # the picture's file, seen alone, keeps the title: it says what it is
    assert titled == chart.png(written.record.syncs, SPEC, TITLE, SCRIPT.total)


def test_the_table_has_the_consoles_header_row_and_its_numbers_right_aligned(written: Written) -> None:
    facts, table = written.seen[1280], written.record.table
    assert facts["header"] == [["", SHARED], list(table.columns)], "the table's header row"
    assert facts["rows"] == [list(row) for row in table.rows]
    assert facts["alignments"] == ["right"]


def test_the_kubectl_line_the_console_shows_is_on_the_page(written: Written) -> None:
    text = written.seen[1280]["text"]
    assert f"$ kubectl get --raw '{PATH}'" in text
    assert '{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2"' in text


def test_text_with_markup_is_shown_as_it_is(written: Written) -> None:
    facts = written.seen[1280]
    assert f"0s  hold at 1: {REFUSAL}" in facts["text"]
    assert facts["bold"] == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_runs_off_the_side_of_the_page(written: Written, width: int) -> None:
    facts = written.seen[width]
    assert "HPA for Deployment trainer: Pods metric gpu_utilization, target averageValue 70" in facts["text"]
    assert facts["pageWidth"] <= width, f"the page is {facts['pageWidth']} pixels wide in a {width} pixel window"
    assert facts["pastTheEdge"] == [], f"past the window's right edge at {width} pixels"
    # nor does a block hide a part of itself behind a scroll bar of its own
    assert facts["scrolled"] == [], f"scrolled sideways at {width} pixels"
    [(natural, shown)] = facts["images"]
    assert natural == chart.WIDTH, "the picture decodes"
    assert shown < width
