package dev.turnstile.client;

import java.io.FileWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

/**
 * The programs the scenarios run as processes of their own (to SIGKILL or SIGTERM them);
 * the server comes from TURNSTILE_SERVER, as for any user of the library.
 *
 * <pre>
 *   candidate NAME OWNER TTL_MS          campaign; print "leading &lt;token&gt;"
 *   worker QUEUE LOG SLEEP_MS CONCURRENCY  work the queue, logging start/done, then "exited"
 * </pre>
 */
public final class Programs {
  private Programs() {}

  public static void main(String[] args) throws Exception {
    if (args[0].equals("candidate")) {
      candidate(args[1], args[2], Duration.ofMillis(Long.parseLong(args[3])));
    } else {
      worker(args[1], args[2], Long.parseLong(args[3]), Integer.parseInt(args[4]));
    }
  }

  private static void candidate(String name, String owner, Duration ttl) throws Exception {
    Client client = Client.create();
    Lease lease = client.campaign(name, owner, ttl);
    System.out.println("leading " + lease.fencingToken());
    System.out.flush();
    lease.lost().get();
    System.exit(1);
  }

  private static void worker(String queue, String log, long sleepMillis, int concurrency) throws IOException {
    try (PrintWriter out = new PrintWriter(new FileWriter(log, true), true); Client client = Client.create()) {
      Handler handle = task -> {
        synchronized (out) {
          out.println("start " + task.id());
        }
        Thread.sleep(sleepMillis); // the work itself
        synchronized (out) {
          out.println("done " + task.id());
        }
      };
      // A process' main worker drains on SIGTERM and SIGINT.
      client.worker(queue, handle, WorkerOptions.defaults().concurrency(concurrency)
          .drainTimeout(Duration.ofSeconds(10))).run();
      synchronized (out) {
        out.println("exited");
      }
    }
    System.exit(0);
  }

  /** Starts a program against {@code server}. */
  static Process spawn(String server, String... args) throws IOException {
    List<String> command = new java.util.ArrayList<>(List.of(
        Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp",
        System.getProperty("java.class.path"), Programs.class.getName()));
    command.addAll(List.of(args));
    ProcessBuilder builder = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT);
    builder.environment().put("TURNSTILE_SERVER", server);
    return builder.start();
  }
}
