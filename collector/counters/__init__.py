"""Which fields to export: dcgm-exporter's counters file, its 1.x names, and where it is read from."""
