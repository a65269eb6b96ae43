"""The one exception family users see; the CLI prints its message as one line (exit 2)."""


class SerenityError(Exception):
    """Bad input or an impossible request; the message names the culprit and what is wrong."""
