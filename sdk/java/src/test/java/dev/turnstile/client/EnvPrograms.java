package dev.turnstile.client;

import java.nio.charset.StandardCharsets;
import java.time.Duration;

/** A program configured only by its environment (TURNSTILE_SERVER, TURNSTILE_TOKEN, TURNSTILE_CA_CERT). */
public final class EnvPrograms {
  private EnvPrograms() {}

  public static void main(String[] args) {
    try (Client client = Client.create()) {
      try (Lease lease = client.lock("over-tls", Duration.ofSeconds(5))) {
        if (lease.fencingToken() <= 0) {
          throw new AssertionError("no fencing token");
        }
      }
      if (!client.queue("tls").enqueue("x".getBytes(StandardCharsets.UTF_8)).created()) {
        throw new AssertionError("not created");
      }
      System.out.println("tls ok");
    } catch (UnauthenticatedException err) {
      System.out.println("unauthenticated");
    }
  }
}
