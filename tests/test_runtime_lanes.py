

# ---- the model and the simulator of hosts with several NICs -------------------------------------------

def _spec(nics: int) -> str:
    return f"2xcpu-host:ranks=2,cores=1,net=1gbit,nics={nics}"


def test_cpu_hosts_with_two_nics_have_two_rails() -> None:
    from interlink.topology import parse_topology, rail_plan

    t = parse_topology(_spec(2))
    assert [t.nic_for(r) for r in range(4)] == ["h0/eth0", "h0/eth1", "h1/eth0", "h1/eth1"]
    plan = rail_plan(t)
    assert plan.channels == 2 and plan.exits == (0, 1)
    assert rail_plan(parse_topology(_spec(1))).channels == 1


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical", "nccl_tree"])
def test_model_and_simulator_agree_on_one_and_two_nics(algorithm: str) -> None:
    """A ring's channels leave through NIC (channel mod K), as the runtime's lanes: 2 NICs halve the ring's
    time; one-channel algorithms (hierarchical) keep to NIC 0, as the runtime runs them; the simulator
    does not count a NIC's sharing twice (the model's terms hold it, so do the flows)."""
    from interlink.model.cost import predict
    from interlink.sim.engine import simulate_collective

    t = {}
    for k in (1, 2):
        m = predict("all_reduce", 16 << 20, _spec(k), algorithm=algorithm, profile=False).time_us
        s = simulate_collective("all_reduce", 16 << 20, _spec(k), algorithm=algorithm).time_us
        assert abs(s - m) / m < 0.08, (k, m, s)
        t[k] = m
    if algorithm == "hierarchical":
        assert t[2] == pytest.approx(t[1], rel=1e-6)
    else:
        assert 1.8 < t[1] / t[2] < 2.2, t


def test_tuner_models_the_nics(monkeypatch: pytest.MonkeyPatch) -> None:
    from interlink.model import tuner

    monkeypatch.setenv("INTERLINK_NET", "1gbit")
    monkeypatch.delenv("INTERLINK_CHANNELS", raising=False)
    monkeypatch.delenv("INTERLINK_TUNER", raising=False)
    monkeypatch.delenv("INTERLINK_TRANSPORT", raising=False)
    tuner.clear_cache()
    one = tuner.default_algorithm("all_reduce", 16 << 20, 4, (2, 2), 1)
    two = tuner.default_algorithm("all_reduce", 16 << 20, 4, (2, 2), 2)
    assert one == "hierarchical" and two in ("ring", "nccl_tree"), (one, two)
    assert tuner.schedule_channels("ring", 2, 2, 2) == {"channels": 2, "local_size": 2, "exits": (0, 1)}
    assert tuner.schedule_channels("nccl_tree", 2, 2, 2)["channels"] == 4
    assert tuner.schedule_channels("ring", 2, 1, 4) == {} and tuner.schedule_channels("ring", 1, 2, 2) == {}
    tuner.clear_cache()
