"""The fake /proc lives with the demo, which writes one for its simulated processes too."""

from demo.proc_tree import ProcTree, outside_kubernetes, v1, v2_cgroupfs, v2_systemd

__all__ = ["ProcTree", "outside_kubernetes", "v1", "v2_cgroupfs", "v2_systemd"]
