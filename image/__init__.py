"""The container image's entry point: one image runs the adapter or the collector, whichever its arguments ask for."""
