"""fp4cl's exceptions: one class per fp4cl_status, all derived from fp4cl.Error.

A failed C call raises the class of its status with the library's own message
(fp4cl_last_error(): it names the argument, tensor or file and what was expected). Arguments the
binding can check itself (dtype, shape, a closed handle) raise the same classes before any C call.
"""

import enum


class Status(enum.IntEnum):
    """fp4cl_status of include/fp4cl/fp4cl.h."""
    SUCCESS = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    INVALID_MODEL = 3
    DEVICE_NOT_FOUND = 4
    OPENCL = 5
    OUT_OF_MEMORY = 6
    INVALID_EXPERT_ID = 7
    UNSUPPORTED = 8
    INTERNAL = 9


class Error(Exception):
    """An fp4cl failure. `status` is the fp4cl_status (a Status, or the raw int for a status this
    binding does not know), `message` the library's message, `cl_status` the OpenCL status behind
    it (0 when it did not come from OpenCL)."""

    status = None  # set per subclass; an int for an unknown status

    def __init__(self, message, status=None, cl_status=0):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.cl_status = cl_status

    @property
    def status_name(self):
        return f"FP4CL_ERROR_{self.status.name}" if isinstance(self.status, Status) else f"status {self.status}"

    def __str__(self):
        return f"{self.message} [{self.status_name}]"


class InvalidArgumentError(Error, ValueError):
    status = Status.INVALID_ARGUMENT


class NotFoundError(Error, LookupError):
    status = Status.NOT_FOUND


class InvalidModelError(Error):
    status = Status.INVALID_MODEL


class DeviceNotFoundError(Error):
    status = Status.DEVICE_NOT_FOUND


class OpenCLError(Error):
    status = Status.OPENCL


class OutOfMemoryError(Error, MemoryError):
    status = Status.OUT_OF_MEMORY


class InvalidExpertIdError(Error, ValueError):
    status = Status.INVALID_EXPERT_ID


class UnsupportedError(Error):
    status = Status.UNSUPPORTED


class InternalError(Error):
    status = Status.INTERNAL


class LibraryNotFoundError(Error, OSError):
    """libfp4cl could not be loaded, or it is not a version this binding works with."""
    status = None

    @property
    def status_name(self):
        return "library not loaded"


_BY_STATUS = {cls.status: cls for cls in (InvalidArgumentError, NotFoundError, InvalidModelError,
                                          DeviceNotFoundError, OpenCLError, OutOfMemoryError,
                                          InvalidExpertIdError, UnsupportedError, InternalError)}


def check(lib, status, what):
    """Raises the exception of a failed C call (status != 0) with the library's message. `what`
    names the call for the rare case of an empty message."""
    if status == Status.SUCCESS:
        return
    message = (lib.fp4cl_last_error() or b"").decode("utf-8", "replace") or f"{what} failed"
    cl_status = int(lib.fp4cl_last_cl_status())
    try:
        known = Status(status)
    except ValueError:
        raise Error(message, status, cl_status) from None
    raise _BY_STATUS[known](message, known, cl_status)
