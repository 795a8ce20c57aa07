"""One way to tell a file changed (common/watched_file.py), used by the rules file, CA bundles, certificate, token."""

import os
from pathlib import Path

from common.watched_file import WatchedFiles


def test_an_unchanged_file_is_not_a_change_and_an_edit_is(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules: []\n")
    files = WatchedFiles(path)
    assert not files.changed()
    path.write_text("rules: [] # edited, one byte longer\n")
    assert files.changed()
    assert not files.changed()  # seen once, not again


def test_a_symlink_swap_is_a_change_even_with_the_same_time_and_size(tmp_path: Path) -> None:
    # how the kubelet updates a mounted ConfigMap: a new directory, then the link renamed over the old one
    for name in ("v1", "v2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ca.crt").write_text("same size")
        os.utime(tmp_path / name / "ca.crt", ns=(10**18, 10**18))
    (tmp_path / "data").symlink_to("v1")
    files = WatchedFiles(tmp_path / "data" / "ca.crt")
    (tmp_path / "next").symlink_to("v2")
    os.replace(tmp_path / "next", tmp_path / "data")
    assert files.changed()


def test_disappearing_and_returning_are_changes_and_an_absent_path_is_none(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("t1")
    files = WatchedFiles(path, None)
    path.unlink()
    assert files.changed()
    assert files.stamps == [None, None]
    assert not files.changed()
    path.write_text("t2")
    assert files.changed()
