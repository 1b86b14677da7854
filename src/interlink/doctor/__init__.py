"""The doctor: who is stuck and why (flight-recorder dumps -> verdicts), what this machine is set up to
do (environment checks), and why a measured curve is below what the hardware allows (the model's
variants priced against it). Pure functions over data the rest of the library produces; the command is
``interlink doctor`` (cli/doctor.py). The runtime writes the dumps (runtime/recorder.py) and never
imports this package."""
