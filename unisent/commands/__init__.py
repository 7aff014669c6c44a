"""unisent's own subcommands (the Lightning ones live in unisent.cli)."""
