"""What an idle thread costs a Python process in resident memory, on the kernel this runs on.

On Linux a thread's stack is resident only as far as it is touched (tens of KiB for a thread that waits). gVisor's
memory manager gives private memory in 2 MiB-aligned units where the mapping allows, so the first touch of a new
thread's 8 MiB stack makes about 2 MiB resident: the reason the collector keeps its threads few (the pod-resources
refresh runs on the event loop, the process sampler starts with the first shared GPU; docs/collector-bench.md). Each
count of threads is measured in a new interpreter: RSS before and after starting them, each waiting on an event.

    python -m bench.thread_cost [--threads 1,2,4]
    runsc --network=none do python -m bench.thread_cost    # the same under gVisor
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys

_PROBE = """
import json, sys, threading, time
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
before = rss()
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(int(sys.argv[1]))]
for t in threads:
    t.start()
time.sleep(0.2)
after = rss()
stop.set()
print(json.dumps([before, after]))
"""


def measure(threads: int) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(threads)], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout)
    return float(before), float(after)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2,4", help="counts of idle threads, comma-separated")
    args = parser.parse_args()
    print(f"{platform.machine()}, kernel {platform.release()}, Python {platform.python_version()}; MiB\n")
    print("| idle threads | RSS before | RSS after | per thread |\n|---|---|---|---|")
    for count in (int(n) for n in args.threads.split(",")):
        before, after = measure(count)
        print(f"| {count} | {before:.1f} | {after:.1f} | {(after - before) / count:.2f} |")


if __name__ == "__main__":
    main()
