package interop;

import com.google.protobuf.ByteString;
import com.google.protobuf.Duration;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.function.BooleanSupplier;
import turnstile.v1.Common;
import turnstile.v1.Lock;
import turnstile.v1.LockServiceGrpc;
import turnstile.v1.Queue;
import turnstile.v1.QueueServiceGrpc;

/**
 * turnstile from Java through the raw generated stubs (none of the library): a lock round
 * trip, Hold with a re-attach by token, Enqueue, Subscribe and Ack against a real server.
 * Usage: Interop HOST:PORT METRICS_HOST:PORT. Exits non-zero on the first broken
 * expectation.
 */
public final class Interop {
  private Interop() {}

  private static void check(boolean holds, String what) {
    if (!holds) {
      System.err.println("broken: " + what);
      System.exit(1);
    }
  }

  /** Checks {@code done} every 20 ms until it holds, failing after 10 s. */
  private static void waitFor(String what, BooleanSupplier done) throws InterruptedException {
    long end = System.nanoTime() + 10_000_000_000L;
    while (!done.getAsBoolean()) {
      check(System.nanoTime() < end, "not within 10 s: " + what);
      Thread.sleep(20);
    }
  }

  /** The value of {@code name} (with its labels) in a scrape of /metrics, or -1. */
  private static double metric(String address, String name) {
    try {
      HttpResponse<String> reply = HttpClient.newHttpClient().send(
          HttpRequest.newBuilder(URI.create("http://" + address + "/metrics")).build(),
          HttpResponse.BodyHandlers.ofString());
      for (String line : reply.body().split("\n")) {
        if (line.startsWith(name + " ")) {
          return Double.parseDouble(line.substring(name.length() + 1));
        }
      }
    } catch (IOException | InterruptedException err) {
      return -1;
    }
    return -1;
  }

  private static Duration seconds(long s) {
    return Duration.newBuilder().setSeconds(s).build();
  }

  /** The next Hold event other than a heartbeat. */
  private static Lock.HoldResponse next(Iterator<Lock.HoldResponse> stream) {
    for (;;) {
      Lock.HoldResponse m = stream.next();
      if (!m.hasHeartbeat()) {
        return m;
      }
    }
  }

  public static void main(String[] args) throws Exception {
    String address = args[0];
    String metrics = args[1];
    ManagedChannel channel = ManagedChannelBuilder.forTarget(address).usePlaintext().build();
    LockServiceGrpc.LockServiceBlockingStub locks = LockServiceGrpc.newBlockingStub(channel);
    QueueServiceGrpc.QueueServiceBlockingStub queues = QueueServiceGrpc.newBlockingStub(channel);

    // A lock round trip.
    Lock.AcquireResponse won = locks.acquire(Lock.AcquireRequest.newBuilder().setName("java-lock").setOwner("java")
        .setTtl(seconds(30)).build());
    check(won.getAcquired() && won.getFencingToken() > 0, "acquired: " + won);
    Lock.DescribeResponse seen = locks.describe(Lock.DescribeRequest.newBuilder().setName("java-lock")
        .setToken(won.getToken()).build());
    check(seen.getHeld() && seen.getHeldByToken() && seen.getInfo().getOwner().equals("java"), "described: " + seen);
    Lock.AcquireResponse again = locks.acquire(Lock.AcquireRequest.newBuilder().setName("java-lock").setOwner("other").build());
    check(!again.getAcquired() && again.getHolder().getOwner().equals("java"), "acquired twice: " + again);
    check(locks.release(Lock.ReleaseRequest.newBuilder().setName("java-lock").setToken(won.getToken()).build())
        .getReleased(), "released");

    // Hold, then re-attach by token on a new stream: the same lease.
    Context.CancellableContext first = Context.current().withCancellation();
    Lock.HoldRequest hold = Lock.HoldRequest.newBuilder().setName("java-hold").setOwner("java").setTtl(seconds(3)).build();
    Iterator<Lock.HoldResponse> firstStream = first.call(() -> locks.hold(hold));
    Lock.HoldResponse.Acquired acquired = next(firstStream).getAcquired();
    Context.CancellableContext second = Context.current().withCancellation();
    Iterator<Lock.HoldResponse> secondStream = second.call(() -> locks.hold(hold.toBuilder().setToken(acquired.getToken()).build()));
    Lock.HoldResponse.Acquired reattached = next(secondStream).getAcquired();
    check(reattached.getToken().equals(acquired.getToken()) && reattached.getFencingToken() == acquired.getFencingToken(),
        "re-attached to the same lease");
    first.cancel(null); // The replaced stream's end does not release the lease.
    waitFor("the replaced stream ended", () -> metric(metrics, "turnstile_streams_open{kind=\"hold\"}") == 1);
    check(locks.describe(Lock.DescribeRequest.newBuilder().setName("java-hold").setToken(acquired.getToken()).build())
        .getHeldByToken(), "still held after the replaced stream's end");
    check(next(secondStream).hasRenewed(), "renewed on the re-attached stream");
    second.cancel(null); // Cancelling the stream that holds it releases at once.
    waitFor("released after the cancel",
        () -> !locks.describe(Lock.DescribeRequest.newBuilder().setName("java-hold").build()).getHeld());

    // Enqueue two tasks, Subscribe, Ack both.
    Queue.EnqueueResponse queued = queues.enqueue(Queue.EnqueueRequest.newBuilder().setQueue("java-q")
        .addTasks(Queue.TaskSpec.newBuilder().setId("a").setPayload(ByteString.copyFromUtf8("one")))
        .addTasks(Queue.TaskSpec.newBuilder().setId("b").setPayload(ByteString.copyFromUtf8("two"))).build());
    check(queued.getResults(0).getCreated() && queued.getResults(1).getCreated(), "created: " + queued);
    Context.CancellableContext subscribed = Context.current().withCancellation();
    Iterator<Queue.SubscribeResponse> stream = subscribed.call(() -> queues.subscribe(
        Queue.SubscribeRequest.newBuilder().setQueue("java-q").setMaxInFlight(2).build()));
    List<String> got = new ArrayList<>();
    List<String> receipts = new ArrayList<>();
    while (got.size() < 2) {
      Queue.SubscribeResponse m = stream.next();
      if (m.hasTask()) {
        Common.Task task = m.getTask();
        got.add(task.getId() + " " + task.getPayload().toStringUtf8() + " " + task.getAttempt());
        receipts.add(task.getReceipt());
      }
    }
    Collections.sort(got);
    check(got.equals(List.of("a one 1", "b two 1")), "delivered " + got);
    Queue.AckResponse acked = queues.ack(Queue.AckRequest.newBuilder().setQueue("java-q").addAllReceipts(receipts).build());
    check(acked.getAckedList().equals(List.of(true, true)), "acked " + acked.getAckedList());
    subscribed.cancel(null);
    Queue.StatsResponse stats = queues.stats(Queue.StatsRequest.newBuilder().setQueue("java-q").build());
    check(stats.getReady() + stats.getDelayed() + stats.getInFlight() + stats.getDead() == 0, "left: " + stats);

    // Errors arrive as gRPC status codes.
    try {
      queues.enqueue(Queue.EnqueueRequest.newBuilder().setQueue("").addTasks(Queue.TaskSpec.getDefaultInstance()).build());
      check(false, "an empty queue name was taken");
    } catch (StatusRuntimeException err) {
      check(err.getStatus().getCode() == Status.Code.INVALID_ARGUMENT
          && err.getStatus().getDescription().contains("queue"), "a bad queue name: " + err);
    }
    channel.shutdownNow();
    System.out.println("java interop ok");
  }
}
