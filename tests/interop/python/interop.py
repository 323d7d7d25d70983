"""turnstile from Python: stubs generated from proto/ at test time (grpcio-tools),
then a lock round trip, Hold with a re-attach by token, Enqueue, Subscribe and Ack
against a real server. Usage: interop.py STUBS_DIR HOST:PORT METRICS_HOST:PORT. Exits
non-zero on the first broken expectation."""

import sys
import time
import urllib.request

sys.path.insert(0, sys.argv[1])

import grpc  # noqa: E402
from google.protobuf import duration_pb2  # noqa: E402
from turnstile.v1 import lock_pb2, lock_pb2_grpc, queue_pb2, queue_pb2_grpc  # noqa: E402


def seconds(s):
    return duration_pb2.Duration(seconds=s)


def first_event(stream, kind):
    for message in stream:
        event = message.WhichOneof("event")
        if event == "heartbeat":
            continue
        assert event == kind, f"expected {kind}, got {message}"
        return getattr(message, event)
    raise AssertionError(f"the stream ended before {kind}")


def wait_for(what, done):
    """Checks `done` every 20 ms until it holds, failing after 10 s."""
    deadline = time.time() + 10
    while not done():
        assert time.time() < deadline, f"not within 10 s: {what}"
        time.sleep(0.02)


def metric(name):
    """The value of `name` (with its labels) in a scrape of the server's /metrics."""
    with urllib.request.urlopen(f"http://{sys.argv[3]}/metrics") as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return None


def main():
    channel = grpc.insecure_channel(sys.argv[2])
    locks = lock_pb2_grpc.LockServiceStub(channel)
    queues = queue_pb2_grpc.QueueServiceStub(channel)

    # A lock round trip.
    won = locks.Acquire(lock_pb2.AcquireRequest(name="py-lock", owner="py", ttl=seconds(30)))
    assert won.acquired and won.fencing_token > 0, won
    seen = locks.Describe(lock_pb2.DescribeRequest(name="py-lock", token=won.token))
    assert seen.held and seen.held_by_token and seen.info.owner == "py", seen
    again = locks.Acquire(lock_pb2.AcquireRequest(name="py-lock", owner="other"))
    assert not again.acquired and again.holder.owner == "py", again
    assert locks.Release(lock_pb2.ReleaseRequest(name="py-lock", token=won.token)).released

    # Hold, then re-attach by token on a new stream: the same lease.
    first = locks.Hold(lock_pb2.HoldRequest(name="py-hold", owner="py", ttl=seconds(3)))
    acquired = first_event(first, "acquired")
    second = locks.Hold(
        lock_pb2.HoldRequest(name="py-hold", owner="py", ttl=seconds(3), token=acquired.token)
    )
    reattached = first_event(second, "acquired")
    assert reattached.token == acquired.token, reattached
    assert reattached.fencing_token == acquired.fencing_token, reattached
    first.cancel()  # The replaced stream's end does not release the lease.
    wait_for("the replaced stream ended", lambda: metric('turnstile_streams_open{kind="hold"}') == 1)
    seen = locks.Describe(lock_pb2.DescribeRequest(name="py-hold", token=acquired.token))
    assert seen.held_by_token, seen
    assert first_event(second, "renewed").expires_at.seconds > 0
    second.cancel()  # Cancelling the stream that holds it releases at once.
    wait_for("released after the cancel",
             lambda: not locks.Describe(lock_pb2.DescribeRequest(name="py-hold")).held)

    # Enqueue two tasks, Subscribe, Ack both.
    queued = queues.Enqueue(
        queue_pb2.EnqueueRequest(
            queue="py-q",
            tasks=[queue_pb2.TaskSpec(id="a", payload=b"one"), queue_pb2.TaskSpec(id="b", payload=b"two")],
        )
    )
    assert [r.created for r in queued.results] == [True, True], queued
    stream = queues.Subscribe(queue_pb2.SubscribeRequest(queue="py-q", max_in_flight=2))
    tasks = [first_event(stream, "task"), first_event(stream, "task")]
    assert sorted((t.id, t.payload, t.attempt) for t in tasks) == [("a", b"one", 1), ("b", b"two", 1)]
    acked = queues.Ack(queue_pb2.AckRequest(queue="py-q", receipts=[t.receipt for t in tasks]))
    assert list(acked.acked) == [True, True], acked
    stream.cancel()
    stats = queues.Stats(queue_pb2.StatsRequest(queue="py-q"))
    assert (stats.ready, stats.delayed, stats.in_flight, stats.dead) == (0, 0, 0, 0), stats

    # Errors arrive as gRPC status codes.
    try:
        queues.Enqueue(queue_pb2.EnqueueRequest(queue="", tasks=[queue_pb2.TaskSpec()]))
        raise AssertionError("an empty queue name was accepted")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        assert "queue" in err.details(), err.details()
    print("python interop ok")


if __name__ == "__main__":
    main()
