"""dcgm-exporter's counters file: which fields to export, as what type, with which help text.

One field a line, ``FIELD, type, help``; ``#`` starts a comment; spaces around fields are ignored. Types are
``gauge``, ``counter`` and ``label`` (a label field becomes a label on every series); ``histogram`` and ``summary``
are accepted and served as gauges, as dcgm-exporter does. A field this collector cannot serve is a warning that
names the line, so a user's existing file keeps working. A field may be named by its dcgm-exporter 1.x name
(``dcgm_gpu_temp``, ``counters/legacy_names.py``) or by its DCGM 4.7/4.8 name (``DCGM_FI_DEV_GPU_UTIL_RATIO``,
``counters/dcgm_names.py``): the series then carries that name, in the unit that name carries.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from collector.counters.dcgm_names import LABEL_SPELLINGS, SPELLINGS
from collector.counters.legacy_names import FIELD_ALIASES
from collector.errors import ConfigError
from collector.nvml.fields import FIELDS, LABEL_FIELDS, MetricType, without_dcgm

DEFAULT_FILE = "default-counters.csv"
# --dcgm-names: which release's names and units the built-in defaults use
DEFAULT_FILES = {"4.10": DEFAULT_FILE, "pre-4.9": "default-counters-pre-4.9.csv"}
_TYPES: dict[str, MetricType | None] = {
    "gauge": "gauge",
    "counter": "counter",
    "histogram": "gauge",
    "summary": "gauge",
    "label": None,
}


@dataclass(frozen=True)
class Counter:
    field: str
    type: MetricType
    help: str
    name: str = ""  # the series name when the file names the field otherwise (a 1.x name such as dcgm_gpu_temp)
    scale: float = 1.0  # from the field's unit to the unit the name carries (DCGM_FI_DEV_GPU_UTIL_RATIO: 0.01)

    @property
    def series(self) -> str:
        return self.name or self.field


@dataclass(frozen=True)
class Counters:
    """A parsed counters file: series to serve, fields to turn into labels, and what was skipped and why."""

    counters: tuple[Counter, ...]
    labels: tuple[str, ...]
    warnings: tuple[str, ...]
    source: str
    label_names: tuple[tuple[str, str], ...] = ()  # label field → the name the file gives it, where they differ

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(c.field for c in self.counters)


def parse(text: str, source: str) -> Counters:
    counters: list[Counter] = []
    labels: list[str] = []
    label_names: list[tuple[str, str]] = []
    warnings: list[str] = []
    seen: set[tuple[str, float]] = set()
    # lines end at \n alone, as Go's csv reader ends them (str.splitlines would also end one at a form feed or
    # U+2028 inside a help text); a byte-order mark an editor wrote is not part of the first field's name
    for lineno, line in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            record = next(csv.reader(io.StringIO(stripped), skipinitialspace=True, strict=True))
        except csv.Error as e:
            raise ConfigError(f"{source}:{lineno}: cannot parse {stripped!r}: {e}") from e
        record = [part.strip() for part in record]
        if len(record) < 3:
            raise ConfigError(
                f"{source}:{lineno}: expected 'FIELD, type, help' but found {len(record)} part(s) in {stripped!r}"
            )
        name, type_name = record[0], record[1].lower()
        help_text = ", ".join(record[2:])
        if type_name not in _TYPES:
            raise ConfigError(
                f"{source}:{lineno}: unknown type {record[1]!r} for {name}; expected one of {', '.join(sorted(_TYPES))}"
            )
        metric_type = _TYPES[type_name]
        spelling = SPELLINGS.get(name)
        if metric_type is None:
            field = LABEL_SPELLINGS.get(name, name)
        else:
            field = spelling.field if spelling is not None else FIELD_ALIASES.get(name, name)
        scale = spelling.scale if spelling is not None and metric_type is not None else 1.0
        # as dcgm-exporter: one series per field, the first line that names it; a name in another unit is a
        # field of its own in DCGM 4.7 (DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_GPU_UTIL_RATIO are both served)
        if (field, scale) in seen:
            warnings.append(f"{source}:{lineno}: {name} is listed again; the first entry is used")
            continue
        if metric_type is None:
            if field not in LABEL_FIELDS:
                warnings.append(f"{source}:{lineno}: {name} cannot be a label here; skipped")
                continue
            labels.append(field)
            if field != name:
                label_names.append((field, name))
        elif field in FIELDS:
            counters.append(Counter(field, metric_type, help_text, "" if field == name else name, scale))
        elif (why := without_dcgm(field)) is not None:
            warnings.append(f"{source}:{lineno}: {name} cannot be served without DCGM ({why}); skipped")
            continue
        else:
            warnings.append(f"{source}:{lineno}: {name} is not a field this collector serves; skipped")
            continue
        seen.add((field, scale))
    if not counters:
        raise ConfigError(f"{source}: no field this collector serves is listed; nothing would be exported")
    return Counters(tuple(counters), tuple(labels), tuple(warnings), source, tuple(label_names))


def load(path: str | None, names: str = "4.10") -> Counters:
    """Read the counters file at ``path``, or the file shipped with the package when ``path`` is None (``names``:
    the release whose names and units it uses, ``--dcgm-names``)."""
    if path is None:
        # beside this module, as the wheel installs it (importlib.resources' reader would bring zipfile)
        default = DEFAULT_FILES[names]
        text = (Path(__file__).parent / default).read_text(encoding="utf-8")
        return parse(text, f"<built-in {default}>")
    try:
        # help texts in another encoding are served with U+FFFD where they are not UTF-8, not refused whole
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError as e:
        raise ConfigError(f"counters file {path} does not exist") from e
    except OSError as e:
        raise ConfigError(f"counters file {path} cannot be read: {e}") from e
    return parse(text, path)
