"""Mechanisms the collector and the adapter both use, written once."""
