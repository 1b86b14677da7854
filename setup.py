"""The optional compiled core of the host page's one-shot path (src/interlink/runtime/_hotcore.c): built by
`pip install` where a C compiler exists; without one the install goes on and the pure-Python path runs
(runtime/ccore.py; INTERLINK_NO_CCORE=1 forces it). The rest of the build is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("interlink.runtime._hotcore", ["src/interlink/runtime/_hotcore.c"],
                             extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"],
                             optional=True)])
