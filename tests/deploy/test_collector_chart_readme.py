"""The chart's README lists every value of values.yaml and every key of dcgm-exporter's chart, and no key that
is not there."""

from __future__ import annotations

import re

import yaml

from harness.deploy.collector_chart import CHART, FREE_FORM_VALUES, leaves
from harness.deploy.dcgm_exporter_values import ALL_KEYS
from harness.deploy.helm import key_paths

README = (CHART / "README.md").read_text()


def first_column_keys(section: str) -> set[str]:
    """The keys named in the first column of the table under ``## <section>``; ``.name`` after a key is a sibling
    of it (`tlsServerConfig.certFilename`, `.keyFilename`)."""
    body = README.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    keys: set[str] = set()
    for line in body.splitlines():
        if not line.startswith("| `"):
            continue
        names = re.findall(r"`([^`]+)`", line.split("|")[1])
        parent = names[0].rpartition(".")[0]
        keys |= {f"{parent}{n}" if n.startswith(".") else n for n in names}
    return keys


def test_the_values_table_lists_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    expected = leaves(key_paths(values, FREE_FORM_VALUES))
    assert first_column_keys("Values") == expected


def test_the_dcgm_exporter_table_lists_every_key_of_its_chart() -> None:
    assert first_column_keys("dcgm-exporter's values") == leaves(ALL_KEYS)
