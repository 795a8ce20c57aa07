"""prometheus-adapter's rules file: rules, external and resource rules, parsed strictly and reloaded on change."""
