"""The one exception family users see; the CLI prints its message as one line (exit 2).

Every class of the family is registered with TVM's FFI (``tvm_ffi.register_error``), so an
error a pass raises inside ``transform_module`` reaches the caller of the pass (or of
``tvm.transform.Sequential``, ``tvm.compile``) as itself, not as the ``RuntimeError`` TVM makes
of an unregistered Python exception crossing its C++ pass infrastructure.
"""

import tvm_ffi


class SerenityError(Exception):
    """Bad input or an impossible request; the message names the culprit and what is wrong."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        tvm_ffi.register_error(f"{cls.__module__}.{cls.__qualname__}", cls)


tvm_ffi.register_error(f"{SerenityError.__module__}.SerenityError", SerenityError)
