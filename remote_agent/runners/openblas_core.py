"""The environment of a library job (``lib:openblas``): the agent's, without OPENBLAS_CORETYPE.

OPENBLAS_CORETYPE makes OpenBLAS run the named kernel core instead of the one its own dispatch
picks for the CPU at load time. Inherited from whatever started the agent (one machine here had
OPENBLAS_CORETYPE=Haswell set for every process), it makes the library row run older kernels than
the board has without anyone asking for it: on an AVX-512 CPU the README's first tune read 2.04x
over the library's Haswell core, and 1.10x to 1.12x over the SkylakeX core OpenBLAS picks there itself.
The library row is the library as its own dispatch runs it on the board; its ``message`` says
what was set aside. Standard library only.
"""

OVERRIDE = "OPENBLAS_CORETYPE"


def library_env(environ):
    """(``environ`` without OPENBLAS_CORETYPE, what the library row's message says), or (None, "")
    where it has none: the job then inherits the agent's environment as it is."""
    if OVERRIDE not in environ:
        return None, ""
    note = "%s=%s in the agent's environment set aside: OpenBLAS picked the kernels for this CPU" % (
        OVERRIDE, environ[OVERRIDE])
    return {k: v for k, v in environ.items() if k != OVERRIDE}, note
