"""Every flag spelling docs/adapter.md's and docs/keda.md's tables name is one the adapter's command line takes: a
documented spelling that is not ends the start with exit 2 (the collector's ``-rbmn`` did)."""

import re
from pathlib import Path

import pytest

from adapter.errors import ConfigError
from adapter.settings import parse_settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_spellings() -> list[str]:
    found = []
    for doc in ("adapter.md", "keda.md"):
        for line in (DOCS / doc).read_text().splitlines():
            if line.startswith("| `-"):
                first = line.split("|")[1]
                found += [code.split("=")[0].split()[0] for code in re.findall(r"`([^`]+)`", first)]
    return sorted({name for name in found if name.startswith("-")})


def test_the_tables_are_read() -> None:
    assert {"--prometheus-url", "--discovery-interval", "--keda-max-streams", "-v"} <= set(documented_spellings())


def refusal(argv: list[str]) -> str:
    """Why the adapter's command line refuses ``argv``; "" when it takes it."""
    try:
        parse_settings(argv, env={})
    except ConfigError as e:  # a value this test made up may be refused; the name may not
        return str(e)
    return ""


@pytest.mark.parametrize("spelling", documented_spellings())
def test_each_documented_spelling_is_taken(spelling: str) -> None:
    said = refusal(["--prometheus-url=http://127.0.0.1:9", f"{spelling}=1"])
    assert not said.startswith("unknown flag"), said
    assert spelling.lstrip("-").partition("=")[0] in said or not said, said


def test_a_spelling_not_taken_is_refused_as_unknown() -> None:
    assert refusal(["--prometheus-url=http://127.0.0.1:9", "--no-such-flag=1"]).startswith("unknown flag")
