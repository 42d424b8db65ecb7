"""One module per subcommand; see ``club3090.cli`` for the contract."""
