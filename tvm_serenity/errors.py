"""The one exception family users see; the CLI prints its message as one line (exit 2).

Every class of the family is registered with TVM's FFI (``tvm_ffi.register_error``), so an
error a pass raises inside ``transform_module`` reaches the caller of the pass (or of
``tvm.transform.Sequential``, ``tvm.compile``) as itself, not as the ``RuntimeError`` TVM makes
of an unregistered Python exception crossing its C++ pass infrastructure. Importing TVM's FFI
takes most of a second, so this module does not: :mod:`tvm_serenity.passes` registers the
family once it has imported TVM (:func:`register_with_tvm`), and a class defined after that
registers itself.
"""

import sys


class SerenityError(Exception):
    """Bad input or an impossible request; the message names the culprit and what is wrong."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "tvm_ffi" in sys.modules:
            _register(cls)


def _register(cls: type) -> None:
    sys.modules["tvm_ffi"].register_error(f"{cls.__module__}.{cls.__qualname__}", cls)


def register_with_tvm() -> None:
    """Register :class:`SerenityError` and every subclass defined so far with TVM's FFI."""
    import tvm_ffi  # noqa: F401  (what _register uses)
    pending = [SerenityError]
    while pending:
        cls = pending.pop()
        _register(cls)
        pending.extend(cls.__subclasses__())
