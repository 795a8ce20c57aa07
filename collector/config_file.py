"""dcgm-exporter's YAML configuration file (``--config-file``, ``$DCGM_EXPORTER_CONFIG_FILE``), version 1 and 2.

Read as dcgm-exporter 4.8.4 reads it (``internal/pkg/appconfig/yaml_config.go``): one YAML document, no repeated or
non-scalar key, no key its schema does not name, ``version`` 1 (4.8.3's schema, with 4.8.4's additions) or 2 (4.8.4's
``collections``). What it sets here: the counters (``metrics.file`` or inline ``metrics.fields``), the collection
interval (v1 ``collection.interval``, v2 the collection whose ``metrics.include`` is ``["*"]``) and the GPU
bind/unbind watch (``sources.dcgm.detectBindUnbind``). The rest is checked as there and named at start as having no
effect (DCGM's watch groups and sample retention, the scrape limit, Go's runtime metrics).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from collector.errors import ConfigError
from common.flags import parse_duration

_MAX_INT32 = 2**31 - 1

_FIELD = {"name": "name", "prometheusType": "prometheusType", "help": "help"}
_BIND = ("enabled", "pollInterval")
_V1_RETENTION = ("maxAge", "maxSamples")
_V2_WATCH = ("maxKeepAge", "maxKeepSamples")
_METRICS = ("file", "fields", "enableExporterMetrics")


@dataclass(frozen=True)
class ConfigFile:
    """What the file sets; None where it says nothing."""

    path: str
    version: int
    collectors: str | None = None  # metrics.file
    inline_counters: str | None = None  # metrics.fields, as counters-file text
    interval_ms: int | None = None
    bind_watch: bool | None = None
    bind_poll_interval: float | None = None  # seconds
    without_effect: tuple[str, ...] = ()  # keys given that this collector does not act on


class _Doc:
    def __init__(self, path: str) -> None:
        self.path = path
        self.unused: list[str] = []

    def fail(self, key: str, problem: str) -> ConfigError:
        where = f" {key}:" if key else ""
        return ConfigError(f"config file {self.path}:{where} {problem}")

    def mapping(self, node: yaml.Node, key: str, allowed: tuple[str, ...]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(key, f"must be a mapping, not {_kind(node)}")
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise self.fail(key, f"YAML mapping keys must be scalar (line {k.start_mark.line + 1})")
            if k.value in out:
                raise self.fail(_join(key, k.value), f"duplicate YAML key at line {k.start_mark.line + 1}")
            if k.value not in allowed:
                known = ", ".join(allowed)
                raise self.fail(key, f"field {k.value} not found in the schema (known: {known})")
            out[k.value] = v
        return out

    def sequence(self, node: yaml.Node, key: str) -> list[yaml.Node]:
        if _null(node):
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(key, f"must be a list, not {_kind(node)}")
        return list(node.value)

    def text(self, node: yaml.Node | None, key: str) -> str:
        if node is None or _null(node):
            return ""
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(key, f"must be a string, not {_kind(node)}")
        return str(node.value).strip()

    def boolean(self, node: yaml.Node, key: str) -> bool:
        text = self.text(node, key).lower()
        if text not in ("true", "false"):
            raise self.fail(key, f"must be true or false, not {text!r}")
        return text == "true"

    def integer(self, node: yaml.Node, key: str) -> int:
        text = self.text(node, key)
        try:
            return int(text, 0)
        except ValueError:
            raise self.fail(key, f"must be an integer, not {text!r}") from None

    def duration(self, node: yaml.Node, key: str) -> float:
        text = self.text(node, key)
        try:
            return parse_duration(text)
        except ValueError as e:
            raise self.fail(key, str(e)) from None

    def millis(self, node: yaml.Node, key: str) -> int:
        """A positive duration in whole milliseconds (dcgm-exporter's collection intervals)."""
        seconds = self.duration(node, key)
        if seconds <= 0:
            raise self.fail(key, "must be greater than 0")
        ms = seconds * 1000
        if abs(ms - round(ms)) > 1e-6:
            raise self.fail(key, "must be expressed in whole milliseconds or larger")
        return round(ms)


def _join(key: str, sub: str) -> str:
    return f"{key}.{sub}" if key else sub


def _null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return f"{node.value!r}"


def load_config_file(path: str) -> ConfigFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} cannot be read: {e}") from None
    return parse_config_file(text, path)


def parse_config_file(text: str, path: str) -> ConfigFile:
    doc = _Doc(path)
    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path}: not YAML: {e}") from None
    if len(documents) > 1:
        raise doc.fail("", "multiple YAML documents are not supported")
    root = documents[0] if documents else None
    if root is None or _null(root):
        raise doc.fail("", "version must be 1 or 2")
    if not isinstance(root, yaml.MappingNode):
        raise doc.fail("", f"must be a mapping, not {_kind(root)}")
    top = {k.value: v for k, v in root.value if isinstance(k, yaml.ScalarNode)}
    version_text = doc.text(top.get("version"), "version")
    if version_text not in ("1", "2"):
        raise doc.fail("", "version must be 1 or 2")
    if version_text == "1":
        keys = doc.mapping(root, "", ("version", "sources", "metrics", "collection", "server"))
    else:
        keys = doc.mapping(root, "", ("version", "metrics", "collections", "sources", "server"))
    out: dict[str, Any] = {"path": path, "version": int(version_text)}
    if "server" in keys:
        server = doc.mapping(keys["server"], "server", ("maxConcurrentScrapes",))
        if "maxConcurrentScrapes" in server:
            if doc.integer(server["maxConcurrentScrapes"], "server.maxConcurrentScrapes") <= 0:
                raise doc.fail("server.maxConcurrentScrapes", "must be greater than 0")
            doc.unused.append("server.maxConcurrentScrapes")
    if "metrics" in keys:
        out |= _metrics(doc, keys["metrics"])
    if "sources" in keys:
        out |= _sources(doc, keys["sources"], int(version_text))
    if version_text == "1" and "collection" in keys:
        out |= _v1_collection(doc, keys["collection"])
    if version_text == "2" and "collections" in keys:
        out |= _v2_collections(doc, keys["collections"])
    return ConfigFile(**out, without_effect=tuple(doc.unused))


def _metrics(doc: _Doc, node: yaml.Node) -> dict[str, Any]:
    m = doc.mapping(node, "metrics", _METRICS)
    if "enableExporterMetrics" in m:
        doc.boolean(m["enableExporterMetrics"], "metrics.enableExporterMetrics")
        doc.unused.append("metrics.enableExporterMetrics")
    file = doc.text(m.get("file"), "metrics.file")
    fields = doc.sequence(m["fields"], "metrics.fields") if "fields" in m else []
    if not file and not fields:
        if "enableExporterMetrics" not in m:
            raise doc.fail("metrics", "must specify file, fields, or enableExporterMetrics")
        return {}
    if file and fields:
        raise doc.fail("metrics", "must specify exactly one of file or fields")
    if file:
        return {"collectors": file}
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    seen: dict[str, int] = {}
    for i, item in enumerate(fields):
        key = f"metrics.fields[{i}]"
        entry = doc.mapping(item, key, tuple(_FIELD))
        name, kind, help_text = (doc.text(entry.get(k), f"{key}.{k}") for k in _FIELD)
        if not name:
            raise doc.fail(f"{key}.name", "is required")
        if name in seen:
            raise doc.fail(f"{key}.name", f"duplicates metrics.fields[{seen[name]}].name {name!r}")
        seen[name] = i
        if not kind:
            raise doc.fail(f"{key}.prometheusType", "is required")
        if not help_text:
            raise doc.fail(f"{key}.help", "is required")
        writer.writerow([name, kind, help_text])
    return {"inline_counters": rows.getvalue()}


def _sources(doc: _Doc, node: yaml.Node, version: int) -> dict[str, Any]:
    s = doc.mapping(node, "sources", ("dcgm",))
    if "dcgm" not in s:
        return {}
    allowed = ("detectBindUnbind",) if version == 1 else ("watch", "detectBindUnbind")
    dcgm = doc.mapping(s["dcgm"], "sources.dcgm", allowed)
    if "watch" in dcgm:
        _retention(doc, dcgm["watch"], "sources.dcgm.watch", _V2_WATCH)
    out: dict[str, Any] = {}
    if "detectBindUnbind" in dcgm:
        key = "sources.dcgm.detectBindUnbind"
        bind = doc.mapping(dcgm["detectBindUnbind"], key, _BIND)
        if "enabled" in bind:
            out["bind_watch"] = doc.boolean(bind["enabled"], f"{key}.enabled")
        if doc.text(bind.get("pollInterval"), f"{key}.pollInterval"):
            seconds = doc.duration(bind["pollInterval"], f"{key}.pollInterval")
            if seconds <= 0:
                raise doc.fail(f"{key}.pollInterval", "must be greater than 0")
            if not 0.1 <= seconds <= 3600:
                raise doc.fail(f"{key}.pollInterval", "must be 100ms to 1h here")
            out["bind_poll_interval"] = seconds
    return out


def _retention(doc: _Doc, node: yaml.Node, key: str, names: tuple[str, str]) -> tuple[float | None, int | None]:
    r = doc.mapping(node, key, names)
    age = samples = None
    if names[0] in r:
        age = doc.duration(r[names[0]], f"{key}.{names[0]}")
    if names[1] in r:
        samples = doc.integer(r[names[1]], f"{key}.{names[1]}")
        if samples < 0:
            raise doc.fail(f"{key}.{names[1]}", "must not be negative")
        if samples > _MAX_INT32:
            raise doc.fail(f"{key}.{names[1]}", f"must not exceed {_MAX_INT32}")
    doc.unused.append(key)
    return age, samples


def _interval(doc: _Doc, ms: int, key: str) -> int:
    """``ms`` as the collection interval, within what ``-c`` takes."""
    if not 100 <= ms <= 3_600_000:
        raise doc.fail(key, f"{ms} ms is outside what -c takes here (100 to 3600000 ms)")
    return ms


def _groups(doc: _Doc, items: list[yaml.Node], key: str, every: str, fields: str, v2: bool) -> list[tuple[str, int]]:
    names: set[str] = set()
    out: list[tuple[str, int]] = []
    for i, item in enumerate(items):
        path = f"{key}[{i}]"
        allowed = ("name", every, "metrics", "sources") if v2 else ("name", every, fields, "retention")
        g = doc.mapping(item, path, allowed)
        name = doc.text(g.get("name"), f"{path}.name")
        if not name:
            raise doc.fail(f"{path}.name", "is required")
        if name in names:
            raise doc.fail(f"{path}.name", f"{name!r} is duplicated")
        names.add(name)
        if every not in g or not doc.text(g[every], f"{path}.{every}"):
            raise doc.fail(f"{path}.{every}", "is required (a duration such as 30s)")
        ms = doc.millis(g[every], f"{path}.{every}")
        if v2:
            metrics = doc.mapping(g["metrics"], f"{path}.metrics", ("include",)) if "metrics" in g else {}
            include_key = f"{path}.metrics.include"
            listed = doc.sequence(metrics["include"], include_key) if "include" in metrics else []
        else:
            include_key = f"{path}.{fields}"
            listed = doc.sequence(g[fields], include_key) if fields in g else []
        if not listed:
            raise doc.fail(include_key, "must not be empty")
        patterns = [doc.text(n, f"{include_key}[{j}]") for j, n in enumerate(listed)]
        for j, p in enumerate(patterns):
            if not p:
                raise doc.fail(f"{include_key}[{j}]", "is required")
        age, samples = None, None
        if v2 and "sources" in g:
            src = doc.mapping(g["sources"], f"{path}.sources", ("dcgm",))
            if "dcgm" in src:
                dcgm = doc.mapping(src["dcgm"], f"{path}.sources.dcgm", ("watch",))
                if "watch" in dcgm:
                    age, samples = _retention(doc, dcgm["watch"], f"{path}.sources.dcgm.watch", _V2_WATCH)
        elif not v2 and "retention" in g:
            age, samples = _retention(doc, g["retention"], f"{path}.retention", _V1_RETENTION)
        if age == 0 and samples == 0:
            raise doc.fail(f"{path}", "the retention's age and samples cannot both be zero")
        out.append(("*" if v2 and patterns == ["*"] else name, ms))
    return out


def _v1_collection(doc: _Doc, node: yaml.Node) -> dict[str, Any]:
    c = doc.mapping(node, "collection", ("interval", "retention", "watchGroups"))
    out: dict[str, Any] = {}
    if doc.text(c.get("interval"), "collection.interval"):
        out["interval_ms"] = _interval(doc, doc.millis(c["interval"], "collection.interval"), "collection.interval")
    if "retention" in c:
        _retention(doc, c["retention"], "collection.retention", _V1_RETENTION)
    if "watchGroups" in c:
        groups = doc.sequence(c["watchGroups"], "collection.watchGroups")
        if _groups(doc, groups, "collection.watchGroups", "interval", "fields", v2=False):
            doc.unused.append("collection.watchGroups")
    return out


def _v2_collections(doc: _Doc, node: yaml.Node) -> dict[str, Any]:
    items = doc.sequence(node, "collections")
    if not items:
        raise doc.fail("collections", "must contain at least one collection")
    groups = _groups(doc, items, "collections", "every", "", v2=True)
    defaults = [i for i, (name, _) in enumerate(groups) if name == "*"]
    if len(defaults) > 1:
        raise doc.fail(f"collections[{defaults[1]}].metrics.include", "duplicates the all-fields collection")
    out: dict[str, Any] = {}
    if defaults:
        i = defaults[0]
        out["interval_ms"] = _interval(doc, groups[i][1], f"collections[{i}].every")
    if len(groups) > len(defaults):
        doc.unused.append("collections (other than the all-fields one: per-field intervals)")
    return out
