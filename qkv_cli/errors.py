"""The one error type users see: the CLI prints it on one line and exits with code 2."""

import contextlib
import functools
import warnings


class QkvError(Exception):
    """Bad input or an impossible request; the message names the value and what is accepted."""


class TooLargeError(QkvError):
    """The run would need more memory than allowed; the message gives the estimate and a hint."""


# NumPy's floating-point error warnings ("overflow encountered in matmul", "invalid value encountered in multiply",
# "divide by zero encountered in log", "underflow encountered in exp"), from any module and any thread
FLOAT_WARNINGS = r"(overflow|invalid value|divide by zero|underflow) encountered"


@contextlib.contextmanager
def owned_float_errors():
    """The floating-point error state of one whole command or API call, owned here and nowhere else.

    NumPy's floating-point flags never reach the user's stderr as RuntimeWarnings, in the calling thread or a worker
    (the filter is the interpreter's, so threads are covered; NumPy itself is not imported here, so `qkv shapes`
    and `--help` stay NumPy-free). What a non-finite value makes wrong is detected where it matters and raised as a
    QkvError: the weights' finite check when a tensor is read, each layer's output check, the softmax's row totals,
    the page's stored scores."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FLOAT_WARNINGS, category=RuntimeWarning)
        yield


def owning_float_errors(function):
    """An API entry point run inside owned_float_errors()."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with owned_float_errors():
            return function(*args, **kwargs)

    return wrapper
