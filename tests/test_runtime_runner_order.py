"""The runner keeps call order: a point-to-point batch run by a waiting thread (Runner.help) never takes
point-to-point jobs queued after a collective that has not run yet.

The failure this guards against: the runner thread popped a collective and blocked on the executor lock
while the waiting thread ran the p2p batch at the head of the queue; the batch's feed (take_p2p, called
while the engine waits) then took the p2p jobs queued behind that collective, so a message posted after
the collective reached the peer before the collective's own (the soak saw rank 2's all_to_all receive
rank 0's later isend: CollectiveMismatchError)."""
import random
import threading
import time

from interlink.runtime.work import Runner


def _valid(order: list, kinds: list) -> bool:
    """Each collective runs after every job submitted before it and before every job submitted after."""
    pos = {j: i for i, j in enumerate(order)}
    if sorted(order) != list(range(len(kinds))):
        return False
    for c, k in enumerate(kinds):
        if k != "coll":
            continue
        if any(pos[j] > pos[c] for j in range(c)) or any(pos[j] < pos[c] for j in range(c + 1, len(kinds))):
            return False
    return True


def test_help_never_lets_p2p_overtake_a_queued_collective():
    rng = random.Random(7)
    bad = []
    for trial in range(300):
        order: list = []
        lock = threading.Lock()
        runner: Runner

        def batch(jobs: list) -> None:
            with lock:
                order.extend(j.p2p for j in jobs)
            # the engine waits for the peers and asks for more queued p2p work meanwhile (run_p2p_batch's feed)
            for _ in range(3):
                time.sleep(0.0005)
                more = runner.take_p2p()
                with lock:
                    order.extend(j.p2p for j in more)
                jobs.extend(more)
            for j in jobs:
                j.work._finish(None)

        runner = Runner(batch)
        kinds = [rng.choice(["p2p", "p2p", "coll"]) for _ in range(rng.randint(3, 7))]
        kinds[0] = "p2p"
        works = []
        for i, k in enumerate(kinds):
            if k == "p2p":
                works.append(runner.submit(None, f"p2p {i}", p2p=i))  # type: ignore[arg-type]
            else:
                def coll(i: int = i) -> None:
                    with lock:
                        order.append(i)
                works.append(runner.submit(coll, f"coll {i}"))
        for w in rng.sample(works, len(works)):
            w.wait(timeout=10)
        runner.drain()
        runner.stop()
        if not _valid(order, kinds):
            bad.append((kinds, order))
    assert not bad, f"{len(bad)} of 300 trials ran a job out of call order, e.g. kinds {bad[0][0]} ran as {bad[0][1]}"
