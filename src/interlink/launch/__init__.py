"""Starting and meeting processes: the launchers and the environment they leave.

- ``env.py``: which launcher started this process (torchrun / ``interlink run``, Open MPI, MPICH, Slurm)
  and what it says (:func:`~interlink.launch.env.detect_env`); read by the runtime at ``init``.
- ``supervisor.py``: the one supervisor every launcher uses (process groups, prefixed output, the first
  failure stops the rest, forwarded signals).
- ``local.py``: ``interlink run``'s launcher: the ranks of one node, torchrun-like.
- ``netns.py``: emulated hosts on one machine (network namespaces, veth pairs, tc shaping) and
  ``interlink run --emulate-hosts``.

This package sits beside ``transport/``: it imports nothing of the runtime.
"""
