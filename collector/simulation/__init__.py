"""Simulated GPUs behind the same NVML protocol, for machines without one."""
