"""The commands of `sagellm`, one module each, named after the command; a group's module holds its subcommands."""
