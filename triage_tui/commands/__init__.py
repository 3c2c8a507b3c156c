"""One module per subcommand: the core plus printing. Each exposes `run(args) -> int`."""
