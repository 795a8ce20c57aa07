"""Settings and rules: flags and environment, prometheus-adapter's rules file."""
