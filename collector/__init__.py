"""Node-side GPU metrics collector: NVML → Prometheus, a drop-in replacement for dcgm-exporter."""
