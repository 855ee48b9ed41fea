"""Errors that mean "the user's input is wrong": the CLI prints them as one line, exit 2."""


class UserError(Exception):
    """Bad input (file, key, URL, flag). The message must name what is at fault."""

    exit_code = 2


class TargetUnreachable(UserError):
    """The server could not be reached at all."""

    exit_code = 3


class ModelNotServed(UserError):
    """The server lists its models and ``--model`` is not among them: nothing is sent."""

    exit_code = 4
