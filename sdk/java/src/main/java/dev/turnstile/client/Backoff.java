package dev.turnstile.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * An exponential delay with jitter: {@code initial}, times {@code factor} per attempt,
 * at most {@code max}, each ±{@code jitter} (a fraction).
 */
public record Backoff(Duration initial, double factor, Duration max, double jitter) {
  /** The worker's delay before a failed task's next attempt: 1 s doubling to 10 min, ±20%. */
  public static final Backoff DEFAULT = new Backoff(Duration.ofSeconds(1), 2, Duration.ofMinutes(10), 0.2);

  /** Retries through UNAVAILABLE and re-opened streams: 100 ms doubling to 5 s, ±20%. */
  static final Backoff RETRY = new Backoff(Duration.ofMillis(100), 2, Duration.ofSeconds(5), 0.2);

  /** The wait before try {@code attempt + 1} (attempt counts from 1). */
  public Duration delay(int attempt) {
    double base = initial.toNanos();
    for (int i = 1; i < attempt && base < max.toNanos(); i++) {
      base *= factor;
    }
    base = Math.min(base, max.toNanos());
    double jittered = base * (1 + (ThreadLocalRandom.current().nextDouble() * 2 - 1) * jitter);
    return Duration.ofNanos((long) Math.max(0, jittered));
  }
}
