package dev.turnstile.client;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import turnstile.v1.Queue.AckRequest;
import turnstile.v1.Queue.SubscribeRequest;
import turnstile.v1.Queue.SubscribeResponse;
import turnstile.v1.QueueServiceGrpc;

/**
 * The Java library's benchmark (SDK.md's; ratios in one run, never a timed test), run by
 * {@code bench.sh}: its own redis-server and {@code turnstile serve} (TURNSTILE_BIN, else
 * the repository's target/release/turnstile). Each round enqueues the tasks and drains
 * them with a no-op handler: the raw loop (one Subscribe with max_in_flight 8, an Ack per
 * task sent as soon as it arrives, on the async stubs) and the library's Worker; prints
 * tasks/s of each and the library / raw ratio (goal ≥ 0.9).
 */
public final class Bench {
  private Bench() {}

  public static void main(String[] args) throws Exception {
    int tasks = args.length > 0 ? Integer.parseInt(args[0]) : 20_000;
    int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 2;
    int concurrency = 8;
    try (Harness.Redis redis = new Harness.Redis();
        Harness.Server server = new Harness.Server(redis);
        Client client = Client.create(server.url())) {
      double raw = 0;
      double library = 0;
      for (int round = 1; round <= rounds; round++) {
        fill(client, "bench-raw-" + round, tasks);
        double r = rawLoop(server.addr(), "bench-raw-" + round, tasks, concurrency);
        fill(client, "bench-lib-" + round, tasks);
        double l = worker(client, "bench-lib-" + round, tasks, concurrency);
        System.out.printf("round %d: raw loop %.0f tasks/s, Worker %.0f tasks/s%n", round, r, l);
        raw = Math.max(raw, r);
        library = Math.max(library, l);
      }
      System.out.printf("worker: raw %.0f tasks/s, library %.0f tasks/s, ratio %.2f (goal >= 0.9)%n", raw, library,
          library / raw);
    }
    System.exit(0);
  }

  private static void fill(Client client, String queue, int tasks) {
    for (int start = 0; start < tasks; start += 1000) {
      List<NewTask> batch = new ArrayList<>();
      for (int i = start; i < Math.min(tasks, start + 1000); i++) {
        batch.add(NewTask.of("x"));
      }
      client.queue(queue).enqueueMany(batch);
    }
  }

  private static double rawLoop(String address, String queue, int tasks, int concurrency) throws InterruptedException {
    ManagedChannel channel = ManagedChannelBuilder.forTarget(address).usePlaintext().build();
    QueueServiceGrpc.QueueServiceStub stub = QueueServiceGrpc.newStub(channel);
    CountDownLatch done = new CountDownLatch(tasks);
    long started = System.nanoTime();
    stub.subscribe(SubscribeRequest.newBuilder().setQueue(queue).setMaxInFlight(concurrency).build(),
        new StreamObserver<SubscribeResponse>() {
          @Override
          public void onNext(SubscribeResponse m) {
            if (m.hasTask()) {
              stub.ack(AckRequest.newBuilder().setQueue(queue).addReceipts(m.getTask().getReceipt()).build(),
                  new StreamObserver<>() {
                    @Override
                    public void onNext(turnstile.v1.Queue.AckResponse reply) {
                      done.countDown();
                    }

                    @Override
                    public void onError(Throwable err) {}

                    @Override
                    public void onCompleted() {}
                  });
            }
          }

          @Override
          public void onError(Throwable err) {}

          @Override
          public void onCompleted() {}
        });
    done.await();
    double rate = tasks / ((System.nanoTime() - started) / 1e9);
    channel.shutdownNow();
    return rate;
  }

  private static double worker(Client client, String queue, int tasks, int concurrency) throws InterruptedException {
    AtomicLong handled = new AtomicLong();
    Worker worker = client.worker(queue, task -> handled.incrementAndGet(),
        WorkerOptions.defaults().concurrency(concurrency).handleSignals(false));
    long started = System.nanoTime();
    Thread running = new Thread(worker::run);
    running.start();
    Queue q = client.queue(queue);
    while (true) {
      if (handled.get() >= tasks) {
        QueueStats stats = q.stats();
        if (stats.inFlight() + stats.ready() == 0) {
          break;
        }
      }
      Thread.sleep(1);
    }
    double rate = tasks / ((System.nanoTime() - started) / 1e9);
    worker.close();
    running.join(TimeUnit.SECONDS.toMillis(30));
    return rate;
  }
}
