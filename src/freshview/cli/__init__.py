"""Command line (typer) and terminal output (rich): ``freshview demo`` and friends.

rich is imported only here.  Commands call ``flow`` (and later the service);
nothing below imports the CLI.
"""
