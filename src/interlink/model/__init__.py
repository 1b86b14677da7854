"""The performance model: alpha-beta-gamma time of a Schedule on a Topology, predictions per collective,
the tuner the runtime asks for an algorithm, and the calibration of this host's parameters.

    from interlink.model import predict
    p = predict("all_reduce", 1 << 30, "dgx-h100")
    p.algorithm, p.busbw_gbps, p.runner_up
    nccl_default("all_reduce", 8, "2xdgx-a100")   # what NCCL runs there (its tuner's pick), priced the same way

Layering: imports interlink.errors, ops, algorithms and topology only (the runtime imports the tuner).
"""

from .cost import (Candidate, Estimate, Prediction, count_for, cpu_topology, itemsize_of, predict,
                   resolve_topology, schedule_time, this_host_topology)
from .nccl import NcclDefault, NcclPick, nccl_default, nccl_pick, nccl_tests_us
from .params import (DEFAULTS, ModelError, Param, Params, Profile, default_params, host_profile, load_params,
                     load_profile, params_from_dict, profile_path, save_profile, with_profile)

__all__ = [
    "Candidate", "Estimate", "Prediction", "count_for", "cpu_topology", "itemsize_of", "predict",
    "resolve_topology", "schedule_time", "this_host_topology",
    "DEFAULTS", "ModelError", "Param", "Params", "Profile", "default_params", "host_profile", "load_params",
    "load_profile", "params_from_dict", "profile_path", "save_profile", "with_profile",
    "NcclDefault", "NcclPick", "nccl_default", "nccl_pick", "nccl_tests_us",
]
