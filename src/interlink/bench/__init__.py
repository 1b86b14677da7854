"""``interlink bench``: nccl-tests style benchmarks of the real collectives.

:mod:`.sweep` is the per-rank body (run inside every rank after ``interlink.init()``),
:mod:`.report` prints the nccl-tests table and writes the JSON; the command line is
:mod:`interlink.cli.bench`.
"""
