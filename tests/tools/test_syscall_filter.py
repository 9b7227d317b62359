"""The sandbox's seccomp filter as built (tools/syscall_filter.py): the personality rules deny exactly what Docker
denies, the fallbacks' variant leaves out what `unshare` needs, and a host without libseccomp gets a clear
FilterUnavailable. What the filter does to running code is tested in test_sandbox_escape.py."""

from __future__ import annotations

import errno
import os
import random
import sys
import tempfile

import pytest

from tools import syscall_filter as sf

ALLOWED_PERSONAS = {0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF}


def _pfc(flt) -> str:
    with tempfile.TemporaryFile("w+") as f:
        flt.export_pfc(f)
        f.seek(0)
        return f.read()


def _denied_persona(x: int) -> bool:
    # The kernel takes personality's argument as an unsigned int; the rules compare the low 32 bits only.
    return any((x & 0xFFFFFFFF) & mask == value for mask, value in sf.persona_rules())


def test_persona_rules_deny_exactly_the_non_default_personas():
    rng = random.Random(0)
    single = [1 << b for b in range(32)]
    values = set(ALLOWED_PERSONAS) | set(single) | {0xFFFFFFFF ^ b for b in single} | {a | b for a in single
                                                                                       for b in single}
    values |= {rng.getrandbits(32) for _ in range(20000)} | {0x0040000, 0x0400000, 0x0100000, 0x20008 | 0x40000}
    for x in sorted(values):
        assert _denied_persona(x) == (x not in ALLOWED_PERSONAS), hex(x)
    # high bits are ignored by the kernel, so they neither allow nor deny anything
    assert not _denied_persona((1 << 40) | 0x8) and _denied_persona((1 << 40) | 0x0040000)


def test_filter_lists_every_class_and_fallback_variant_omits_namespaces():
    try:
        sf._binding()
    except sf.FilterUnavailable as e:
        pytest.skip(f"needs libseccomp: {e}")
    full = _pfc(sf.syscall_filter.__wrapped__(errno.EPERM, namespaces=True))
    for names in sf.DENIED.values():
        for name in names:
            number = sf._binding().resolve_syscall(0, name)
            if number >= 0:  # a syscall this arch has
                assert f'"{name}"' in full, name
    assert '"clone3"' in full and "ERRNO(38)" in full and '"clone"' in full  # ENOSYS for clone3
    light = _pfc(sf.syscall_filter.__wrapped__(errno.EPERM, namespaces=False))
    for name in ("unshare", "setns", "mount", "clone3", "pivot_root"):
        assert f'"{name}"' not in light, name
    assert '"add_key"' in light and '"bpf"' in light and '"ptrace"' in light
    program = sf.bpf_program.__wrapped__(4000)
    assert program and len(program) % 8 == 0  # struct sock_filter: 8 bytes an instruction


def test_no_libseccomp_is_a_clear_filter_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # import fails as it would without the package
    with pytest.raises(sf.FilterUnavailable, match="libseccomp is not usable.*make setup"):
        sf.syscall_filter.__wrapped__(errno.EPERM, True)


def test_pipe_holds_the_program_for_one_reader():
    fd = sf.pipe_with(b"x" * 1000)
    try:
        assert os.read(fd, 4096) == b"x" * 1000 and os.read(fd, 10) == b""
    finally:
        os.close(fd)
    with pytest.raises(ValueError, match="does not fit"):
        sf.pipe_with(b"x" * 100_000)
