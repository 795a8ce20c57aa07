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
from demo.decisions import decision_line, external_line, worth_saying
from demo.hpa import Autoscaler, propose_external
from demo.hpa_controller import ExternalSync, Sync
from demo.plan import SCRIPT, plan_for, settings_text
from demo.record import ChatSample, Record
from demo.run import write_outputs
from demo.table import SHARED, ChatTable, Table
from harness.browser import dom_after_load

TITLE = "gpuscale demo: HPAs on gpu_utilization (custom metrics API) and inference_demand (external metrics API)"
PLAN = plan_for(75, 70, 6, chat_gpus=True)
SPEC = PLAN.spec
# what chat's HPA read at each sync of a default run on this machine: nothing before the gateway's first scrape, then
# the gateway's queue from 24 s, the engines' from 30 s
DEMAND = (None, None, *[0.0] * 6, 16.0, 29.0, 15.0, 6.0, 2.0, 1.0, 1.0, *[0.0] * 10)
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
    images: [...document.images].map((i) => [i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().width]),
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


def known_chat() -> list[ChatSample]:
    """Chat's syncs on DEMAND, each replica ready by the next sync, the engines' queue all the demand once one is."""
    autoscaler = Autoscaler(PLAN.chat_spec)
    current, samples = 0, []
    for n, demand in enumerate(DEMAND):
        values = () if demand is None else (demand,)
        proposal = propose_external(current, current, values, PLAN.chat_spec, per_pod=True)
        decision = autoscaler.settle(3.0 * n, current, proposal)
        sync = ExternalSync(3.0 * n, values, decision, answer="")
        samples.append(ChatSample(sync, current, demand if current else None))
        current = decision.replicas
    return samples


def answer(values: dict[str, float]) -> str:
    """A MetricValueList as the adapter answers it (compact JSON)."""
    items = [
        {"describedObject": {"kind": "Pod", "namespace": "ml", "name": name, "apiVersion": "v1"},
         "metric": {"name": "gpu_utilization", "selector": None}, "timestamp": "2026-12-04T18:23:28Z",
         "windowSeconds": 60, "value": f"{value * 1000:.0f}m"}
        for name, value in values.items()
    ]  # fmt: skip
    return json.dumps({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {},
                       "items": items}, separators=(",", ":"))  # fmt: skip


def known_record() -> Record:
    """What control_loop keeps of a run, from the known syncs, by the functions it uses."""
    table = Table(tuple(f"trainer-{n}" for n in range(SPEC.max_replicas)), ("infer-a", "infer-b"))
    record = Record(table, ChatTable("chat (namespace llm)"))
    for sync, sample in zip(known_syncs(), known_chat(), strict=True):
        previous = record.syncs[-1].decision if record.syncs else None
        chat_previous = record.chat[-1].sync.decision if record.chat else None
        record.syncs.append(sync)
        record.chat.append(sample)
        record.shared.append({"infer-a": 55.0, "infer-b": 20.0})
        record.table.add(sync, record.shared[-1])
        record.chat_table.add(sample.sync, sample.ready, sample.waiting)
        if worth_saying(sync.decision, previous):
            record.decisions.append(decision_line("trainer", sync, SPEC.target))
        if worth_saying(sample.sync.decision, chat_previous):
            record.decisions.append(external_line("chat", sample.sync, "inference_demand", PLAN.chat_spec))
        if not record.kubectl and len(sync.values) == 4:
            record.kubectl = kubectl.block(kubectl.user_command(PATH), answer(sync.values))
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
    header = settings_text(PLAN)
    write_outputs(Console(io.StringIO(), 75), record, PLAN, header, tmp / "run.png", tmp / "run.html")
    return Written(record, tmp / "run.png", tmp / "run.html", {w: seen(tmp / "run.html", w) for w in WIDTHS})


def test_the_title_is_shown_once(written: Written) -> None:
    facts = written.seen[1280]
    assert facts["h1"] == [facts["title"]] == [TITLE], f"the title is shown as {facts['h1']}"
    inline = re.search(r'src="data:image/png;base64,([^"]+)"', written.page.read_text(encoding="utf-8"))
    assert inline is not None
    shown, titled = base64.b64decode(inline[1]), written.picture.read_bytes()
    again = shown == titled
    assert not again, "the page's picture says the title again under the heading"
    panels = chart.ChatPanels(written.record.chat, PLAN.chat_spec, PLAN.arrivals.rate, PLAN.capacity)
    shared = written.record.shared
    assert shown == chart.png(chart.figure(written.record.syncs, SPEC, None, SCRIPT.total, panels, shared))
    # the picture's file, seen alone, keeps the title: it says what it is
    assert titled == chart.png(chart.figure(written.record.syncs, SPEC, TITLE, SCRIPT.total, panels, shared))


def test_the_tables_have_the_consoles_header_rows_and_their_numbers_right_aligned(written: Written) -> None:
    facts, table, chat = written.seen[1280], written.record.table, written.record.chat_table
    assert facts["header"] == [["", SHARED], list(table.columns), list(chat.columns)], "the tables' header rows"
    assert facts["rows"] == [list(row) for row in (*table.rows, *chat.rows)]
    assert facts["alignments"] == ["right"]


def test_both_deployments_decisions_are_on_the_page_in_the_order_they_were_made(written: Written) -> None:
    text = written.seen[1280]["text"]
    up = "  24s  chat     scale 0 → 3: inference_demand 16 against a target of 5 a replica: from zero: ceil(16 / 5)"
    trainer_up = "  12s  trainer  scale 1 → 2: average 100.0 against a target of 70"
    assert up.lstrip() in text
    assert text.index(trainer_up.lstrip()) < text.index(up.lstrip())
    assert "chat     scale 1 → 0: inference_demand 0" in text


def test_the_kubectl_line_the_console_shows_is_on_the_page(written: Written) -> None:
    text = written.seen[1280]["text"]
    assert f"$ kubectl get --raw '{PATH}'" in text
    assert '{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2"' in text
    printed = written.record.kubectl.splitlines()[1]  # the answer whole, as kubectl wrote it: every pod's item
    assert printed in text
    assert [item["describedObject"]["name"] for item in json.loads(printed)["items"]] == [
        f"trainer-{n}" for n in range(4)
    ]


def test_text_with_markup_is_shown_as_it_is(written: Written) -> None:
    facts = written.seen[1280]
    assert f"0s  trainer  hold at 1: {REFUSAL}" in facts["text"]
    assert facts["bold"] == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_runs_off_the_side_of_the_page(written: Written, width: int) -> None:
    facts = written.seen[width]
    assert "HPA for Deployment trainer: Pods metric gpu_utilization, target averageValue 70" in facts["text"]
    assert facts["pageWidth"] <= width, f"the page is {facts['pageWidth']} pixels wide in a {width} pixel window"
    assert facts["pastTheEdge"] == [], f"past the window's right edge at {width} pixels"
    # nor does a block hide a part of itself behind a scroll bar of its own
    assert facts["scrolled"] == [], f"scrolled sideways at {width} pixels"
    [(natural, height, shown)] = facts["images"]
    assert (natural, height) == (chart.WIDTH, chart.HEIGHT + chart.CHAT_HEIGHT), (
        "the picture decodes, chat's panels too"
    )
    assert shown < width
