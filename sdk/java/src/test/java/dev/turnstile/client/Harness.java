package dev.turnstile.client;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * Real processes for the scenarios: a redis-server and {@code turnstile serve} (the binary
 * TURNSTILE_BIN names, else the repository's target/debug/turnstile) on free loopback
 * ports, each in a temp dir of its own and killed when the test ends; the same shape as
 * the other languages' harnesses.
 */
final class Harness {
  private Harness() {}

  static int freePort() {
    try (ServerSocket socket = new ServerSocket(0)) {
      return socket.getLocalPort();
    } catch (IOException err) {
      throw new IllegalStateException(err);
    }
  }

  static String turnstileBin() {
    String path = System.getenv("TURNSTILE_BIN");
    if (path == null || path.isEmpty()) {
      path = Path.of("../../target/debug/turnstile").toAbsolutePath().normalize().toString();
    }
    if (!Files.isExecutable(Path.of(path))) {
      throw new IllegalStateException("no turnstile binary at " + path + ": run `cargo build` or set TURNSTILE_BIN");
    }
    return path;
  }

  /** Waits until {@code check} (observable state) holds; fails naming {@code what}. */
  static void eventually(String what, Duration within, BooleanSupplier check) {
    long end = System.nanoTime() + within.toNanos();
    while (!check.getAsBoolean()) {
      if (System.nanoTime() > end) {
        throw new AssertionError("not within " + within + ": " + what);
      }
      sleep(10);
    }
  }

  static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException err) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(err);
    }
  }

  /** A redis-server on a free port; {@code stop()} and {@code start()} again on the same port. */
  static final class Redis implements AutoCloseable {
    final int port = freePort();
    private final Path dir;
    private Process process;

    Redis() throws IOException {
      dir = Files.createTempDirectory("turnstile-java-redis-");
      start();
    }

    String url() {
      return "redis://127.0.0.1:" + port;
    }

    void start() throws IOException {
      process = new ProcessBuilder("redis-server", "--port", String.valueOf(port), "--bind", "127.0.0.1",
          "--save", "", "--appendonly", "no", "--dir", dir.toString())
          .redirectOutput(ProcessBuilder.Redirect.DISCARD).redirectError(ProcessBuilder.Redirect.DISCARD).start();
      eventually("redis answers", Duration.ofSeconds(10), this::answers);
    }

    private boolean answers() {
      try (Socket socket = new Socket("127.0.0.1", port)) {
        OutputStream out = socket.getOutputStream();
        out.write("PING\r\n".getBytes(StandardCharsets.US_ASCII));
        byte[] reply = new byte[5];
        return socket.getInputStream().read(reply) == 5 && new String(reply, StandardCharsets.US_ASCII).equals("+PONG");
      } catch (IOException err) {
        return false;
      }
    }

    void stop() throws InterruptedException {
      if (process != null) {
        process.destroyForcibly().waitFor();
        process = null;
      }
    }

    @Override
    public void close() throws InterruptedException {
      stop();
    }
  }

  /** {@code turnstile serve} on a Redis; its stderr kept line by line. */
  static final class Server implements AutoCloseable {
    final int port = freePort();
    private final Redis redis;
    private final List<String> extra;
    final List<String> lines = Collections.synchronizedList(new ArrayList<>());
    private Process process;

    Server(Redis redis, String... extra) throws IOException, InterruptedException {
      this.redis = redis;
      this.extra = List.of(extra);
      start();
    }

    String addr() {
      return "127.0.0.1:" + port;
    }

    String url() {
      return (extra.contains("--tls-cert") ? "https://" : "http://") + addr();
    }

    void start() throws IOException, InterruptedException {
      List<String> command = new ArrayList<>(List.of(turnstileBin(), "serve", "--listen", addr(), "--metrics-listen",
          "127.0.0.1:0", "--dashboard-listen", "off", "--redis-url", redis.url(), "--log-format", "json",
          "--reattach-grace", "2s", "--shutdown-grace", "5s"));
      command.addAll(extra);
      ProcessBuilder builder = new ProcessBuilder(command).redirectOutput(ProcessBuilder.Redirect.DISCARD);
      builder.environment().remove("TURNSTILE_TOKEN");
      Process started = builder.start();
      process = started;
      CountDownLatch ready = new CountDownLatch(1);
      Thread reader = new Thread(() -> {
        try (BufferedReader err = new BufferedReader(new InputStreamReader(started.getErrorStream(), StandardCharsets.UTF_8))) {
          for (String line = err.readLine(); line != null; line = err.readLine()) {
            lines.add(line);
            if (line.contains("\"ready\"")) {
              ready.countDown();
            }
          }
        } catch (IOException ended) {
          // the process is gone
        }
      });
      reader.setDaemon(true);
      reader.start();
      if (!ready.await(30, TimeUnit.SECONDS)) {
        started.destroyForcibly();
        throw new IllegalStateException("turnstile serve did not log ready:\n" + String.join("\n", lines));
      }
    }

    /** SIGKILL, as a crash. */
    void kill() throws InterruptedException {
      if (process != null) {
        process.destroyForcibly().waitFor();
        process = null;
      }
    }

    /** SIGTERM (a rolling restart), then the server again on its port. */
    void restart() throws IOException, InterruptedException {
      if (process != null) {
        process.destroy();
        process.waitFor();
        process = null;
      }
      start();
    }

    @Override
    public void close() throws InterruptedException {
      kill();
    }
  }
}
