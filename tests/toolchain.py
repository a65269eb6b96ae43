"""Skip markers for tests that need the native compiler, the Arm toolchain, QEMU or rp2040js
(installed by `make test`; a bare checkout without them skips those tests with the reason)."""

import shutil

import pytest

from tvm_serenity.errors import SerenityError
from tvm_serenity.micro.runners import find_rp2040js


def rp2040js_missing() -> str | None:
    """Why rp2040js cannot run here, or None."""
    if shutil.which("node") is None:
        return "node not installed"
    try:
        find_rp2040js()
    except SerenityError as e:
        return str(e)
    return None


needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no native C compiler (cc)")
needs_arm = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None,
    reason="arm-none-eabi-gcc not installed (apt-get install gcc-arm-none-eabi "
           "libnewlib-arm-none-eabi)")
needs_qemu = pytest.mark.skipif(shutil.which("qemu-system-arm") is None,
                                reason="qemu-system-arm not installed")
needs_rp2040js = pytest.mark.skipif(rp2040js_missing() is not None,
                                    reason=f"rp2040js unavailable: {rp2040js_missing()}")
