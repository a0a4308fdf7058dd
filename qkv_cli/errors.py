"""The one error type users see: the CLI prints it on one line and exits with code 2."""


class QkvError(Exception):
    """Bad input or an impossible request; the message names the value and what is accepted."""


class TooLargeError(QkvError):
    """The run would need more memory than allowed; the message gives the estimate and a hint."""
