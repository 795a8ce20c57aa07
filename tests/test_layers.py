"""The tree as docs/architecture.md draws it: every package on the map, and every import pointing down the layers.

The layers are written once, in the ``layers`` blocks of docs/architecture.md; this test reads them. A module
belongs to the most specific name of a block that it is or lies under; it may import modules of its own name and of
names on lower lines only. Imports are read from the source (``ast``), so one made inside a function counts too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TOP_LEVEL = ("common", "collector", "adapter", "loadgen", "image", "harness", "demo", "tests", "bench")


def fenced(markdown: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", markdown, flags=re.S | re.M)


@dataclass(frozen=True)
class Layers:
    floors: dict[str, int]  # name → its line, counted from the bottom

    @classmethod
    def parse(cls, block: str) -> Layers:
        lines = [line.split() for line in block.strip().splitlines()]
        floors = {name: len(lines) - i for i, names in enumerate(lines) for name in names}
        return cls(floors)

    @property
    def scope(self) -> str:
        """The package whose modules the block covers ("" for the whole tree)."""
        parents = {name.rpartition(".")[0] for name in self.floors}
        assert len(parents) == 1, f"a layers block names modules of several packages: {sorted(parents)}"
        return parents.pop()

    def name_of(self, module: str) -> str | None:
        found = [n for n in self.floors if module == n or module.startswith(n + ".")]
        return max(found, key=len) if found else None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """Every module an import in ``path`` names, with its line; ``from a import b`` names ``a`` and ``a.b``."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def sources() -> list[Path]:
    return sorted(
        p
        for top in TOP_LEVEL
        for p in (ROOT / top).rglob("*.py")
        if "_pb2" not in p.name and "__pycache__" not in p.parts
    )


BLOCKS = [Layers.parse(block) for block in fenced(ARCHITECTURE.read_text(), "layers")]


def test_architecture_has_the_layers_of_the_tree_and_of_both_programs() -> None:
    assert sorted(b.scope for b in BLOCKS) == ["", "adapter", "collector"]
    assert set(next(b for b in BLOCKS if b.scope == "").floors) == set(TOP_LEVEL)


@pytest.mark.parametrize("layers", BLOCKS, ids=lambda b: b.scope or "tree")
def test_every_import_points_down_the_layers(layers: Layers) -> None:
    wrong = []
    for path in sources():
        module = module_name(path)
        if layers.scope and not module.startswith(layers.scope + "."):
            continue
        own = layers.name_of(module)
        if own is None:
            if module != layers.scope:
                wrong.append(f"{path.relative_to(ROOT)}: {module} is on no line of the {layers.scope or 'tree'} block")
            continue
        for line, target in imported(path):
            other = layers.name_of(target)
            if other is None or other == own:
                continue
            if layers.floors[other] >= layers.floors[own]:
                where = "above" if layers.floors[other] > layers.floors[own] else "beside"
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {own} imports {target}, which stands {where} it")
    assert not wrong, "\n".join(wrong)


def packages() -> list[str]:
    """Every package directory of the product, the harness, the demo and the benchmarks, as ``path/``."""
    found = [f"{top}/" for top in TOP_LEVEL]
    for top in TOP_LEVEL:
        if top == "tests":
            continue  # tests mirror the packages; the map names tests/ once
        found += [f"{p.parent.relative_to(ROOT)}/" for p in (ROOT / top).rglob("*/__init__.py")]
    return sorted(set(found))


def test_the_map_names_every_package_and_nothing_that_is_gone() -> None:
    [tree] = fenced(ARCHITECTURE.read_text(), "text")
    named = {line.split()[0] for line in tree.splitlines() if line and not line[0].isspace()}
    assert sorted(set(packages()) - named) == [], "packages missing from the map in docs/architecture.md"
    assert sorted(named - set(packages())) == [], "the map in docs/architecture.md names packages that do not exist"


def test_the_readme_layout_names_every_top_level_package() -> None:
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1]
    [block] = fenced(layout, "")[:1]
    named = {line.split()[0] for line in block.splitlines() if line and not line[0].isspace()}
    assert named == {f"{top}/" for top in TOP_LEVEL} | {"manifests/", "charts/", "docs/"}
    assert "docs/architecture.md" in layout


def test_tests_import_no_other_test_module_and_nothing_edits_sys_path() -> None:
    """What tests, benchmarks and the demo share lives in ``harness``: imported by name, never by path."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {target}"
        for path in sources()
        for line, target in imported(path)
        if target == "tests" or target.startswith("tests.")
    ]
    wrong += [
        f"{path.relative_to(ROOT)}: edits sys.path"
        for path in sources()
        if re.search(r"sys\.path\.(insert|append)|sys\.path\s*[+]?=", path.read_text())
    ]
    assert not wrong, "\n".join(wrong)
