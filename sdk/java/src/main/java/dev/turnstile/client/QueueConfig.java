package dev.turnstile.client;

import java.time.Duration;
import turnstile.v1.Queue.ConfigureQueueRequest;

/** Changes to a queue's flow control: only the fields set change (a zero cap or limit removes it). */
public final class QueueConfig {
  /** At most {@code burst + limit × t / period} deliveries start in any interval of length t. */
  public record RateLimit(int limit, Duration period, int burst) {
    public static RateLimit perSecond(int limit) {
      return new RateLimit(limit, Duration.ofSeconds(1), 0);
    }

    turnstile.v1.Queue.RateLimit wire() {
      turnstile.v1.Queue.RateLimit.Builder wire = turnstile.v1.Queue.RateLimit.newBuilder().setLimit(limit).setBurst(burst);
      if (period != null) {
        wire.setPeriod(Rpc.duration(period));
      }
      return wire.build();
    }
  }

  /** Ended tasks kept: none older than {@code age} (null: no bound) nor more than {@code count} (0: no bound). */
  public record Retention(Duration age, int count) {
    turnstile.v1.Queue.Retention wire() {
      turnstile.v1.Queue.Retention.Builder wire = turnstile.v1.Queue.Retention.newBuilder().setCount(count);
      if (age != null) {
        wire.setAge(Rpc.duration(age));
      }
      return wire.build();
    }
  }

  private final ConfigureQueueRequest.Builder wire = ConfigureQueueRequest.newBuilder();

  public static QueueConfig change() {
    return new QueueConfig();
  }

  public QueueConfig paused(boolean paused) {
    wire.setPaused(paused);
    return this;
  }

  public QueueConfig maxInFlight(int cap) {
    wire.setMaxInFlight(cap);
    return this;
  }

  public QueueConfig groupMaxInFlight(int cap) {
    wire.setGroupMaxInFlight(cap);
    return this;
  }

  public QueueConfig rateLimit(RateLimit limit) {
    wire.setRateLimit(limit.wire());
    return this;
  }

  public QueueConfig groupRateLimit(RateLimit limit) {
    wire.setGroupRateLimit(limit.wire());
    return this;
  }

  /** Keeps acked and cancelled tasks (with results and history). */
  public QueueConfig keepCompleted(Retention retention) {
    wire.setKeepCompleted(retention.wire());
    return this;
  }

  /** Bounds the DEAD tasks kept. */
  public QueueConfig keepDead(Retention retention) {
    wire.setKeepDead(retention.wire());
    return this;
  }

  ConfigureQueueRequest wire(String queue) {
    return wire.clone().setQueue(queue).build();
  }
}
