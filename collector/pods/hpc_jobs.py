"""GPU → batch jobs from ``--hpc-job-mapping-dir``, as dcgm-exporter reads it (Slurm and other schedulers).

The directory holds one file per GPU, named by its index (``0``) or, for a MIG GPU instance, ``<index>.<GPU
instance ID>`` (``2.1``), each listing job IDs one a line; a scheduler's prolog writes them and its epilog removes
them. Every series of a GPU (or instance) with jobs is served once per job with an ``hpc_job`` label; a GPU without
a file, or with an empty one, keeps its series unlabelled. Other names and sub-directories are ignored.

Looked at every collection cycle: the directory is listed and each file's inode, time and size compared, and only a
file that changed is read again. Unlike dcgm-exporter, blank lines and the spaces around an ID are dropped (an empty
``hpc_job`` would be no label at all) and an ID listed twice is served once (twice would repeat the series).

What the directory holds becomes label values on a scraped page, so only what a scheduler writes is read: a regular
file (a symbolic link, to ``/etc/shadow`` or ``/proc/self/environ``, is refused, and the file is opened without
following one), of at most ``MAX_FILE_BYTES``, at most ``MAX_JOBS`` IDs a GPU of at most ``MAX_ID_CHARS`` each. What
is refused is said in a log line (once a minute per file) and costs that GPU its ``hpc_job`` labels, or the jobs past
the limit; each ID is one more copy of every series of its GPU, so a 20,000-line file would be 20,000 copies.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from collector.series import Series
from common.log_limit import LogLimit, left_out
from common.watched_file import Stamp

log = logging.getLogger(__name__)

_GPU_FILE = re.compile(r"\d+(\.\d+)?")
MAX_FILE_BYTES = 64 * 1024
MAX_JOBS = 64  # per GPU or GPU instance
MAX_ID_CHARS = 256


class Refused(Exception):
    """A job file that is not read: what is wrong with it."""


class HpcJobs:
    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self._files: dict[str, tuple[Stamp, tuple[str, ...]]] = {}  # file name → (its stamp, its jobs)
        self._log_limit = LogLimit(60.0)
        self._missing = False

    def current(self) -> dict[str, tuple[str, ...]]:
        """``"<gpu>"`` or ``"<gpu>.<instance>"`` → its jobs, re-reading what changed since the last call."""
        try:
            entries = [e for e in os.scandir(self.directory) if _GPU_FILE.fullmatch(e.name)]
        except FileNotFoundError:
            if not self._missing:  # said once, and again only if it comes back and goes away again
                log.error(
                    "HPC job mapping directory %s does not exist; no hpc_job labels until it does", self.directory
                )
            self._missing = True
            self._files = {}
            return {}
        except OSError as e:
            self._complain("directory", f"HPC job mapping directory {self.directory} cannot be listed ({e})")
            self._files = {}
            return {}
        self._missing = False
        files = {}
        for entry in entries:
            try:
                if entry.is_symlink():
                    raise Refused("it is a symbolic link")
                if not entry.is_file(follow_symlinks=False):
                    continue  # a directory named like a GPU
                st = entry.stat(follow_symlinks=False)
                now: Stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
                known = self._files.get(entry.name)
                files[entry.name] = known if known is not None and known[0] == now else (now, self._read(entry.path))
            except Refused as e:
                self._complain(entry.name, f"HPC job mapping file {entry.path} is not read: {e}")
            except OSError as e:  # removed between listing and reading, or unreadable: no jobs for that GPU
                self._complain(entry.name, f"HPC job mapping file {entry.path} cannot be read ({e})")
        self._files = files
        return {name: jobs for name, (_, jobs) in files.items() if jobs}

    def label(self, series: Sequence[Series]) -> list[Series]:
        """Each series once per job of its GPU or GPU instance, with ``hpc_job``; the others as they are."""
        jobs = self.current()
        if not jobs:
            return list(series)
        out = []
        for s in series:
            entity = dict(s.entity)
            key = entity.get("gpu", "")
            if "GPU_I_ID" in entity:
                key = f"{key}.{entity['GPU_I_ID']}"
            mine = jobs.get(key, ())
            if not mine:
                out.append(s)
            out.extend(replace(s, owner=(*s.owner, ("hpc_job", job))) for job in mine)
        return out

    def _complain(self, kind: str, message: str) -> None:
        held = self._log_limit.allow(kind)
        if held is not None:
            log.warning("%s%s", message, left_out(held, self._log_limit.interval))

    def _read(self, path: str) -> tuple[str, ...]:
        """The file's job IDs, the first ``MAX_JOBS`` of them; ``Refused`` for what a scheduler does not write."""
        # O_NOFOLLOW: a file swapped for a link after the listing is refused too; O_NONBLOCK: a FIFO does not hang
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Refused("it is not a regular file")
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise Refused(f"it is larger than {MAX_FILE_BYTES // 1024} KiB")
        ids = dict.fromkeys(line.strip() for line in data.decode("utf-8", errors="replace").splitlines())
        ids.pop("", None)
        long = [i for i in ids if len(i) > MAX_ID_CHARS]
        if long:
            raise Refused(f"a line is longer than {MAX_ID_CHARS} characters, which no job ID is")
        jobs = tuple(ids)
        if len(jobs) > MAX_JOBS:
            self._complain(path, f"HPC job mapping file {path} lists {len(jobs)} jobs: the first {MAX_JOBS} are served")
        return jobs[:MAX_JOBS]
