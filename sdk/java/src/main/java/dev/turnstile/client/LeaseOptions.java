package dev.turnstile.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/** How a lease is taken: a wait bound, the holder's name, a semaphore's permits. */
public final class LeaseOptions {
  private static final String DEFAULT_OWNER = hostPid() + "-" + Integer.toHexString(ThreadLocalRandom.current().nextInt(1 << 24));

  private Duration wait;
  private String owner = DEFAULT_OWNER;
  private int permits = 1;

  public static LeaseOptions defaults() {
    return new LeaseOptions();
  }

  /** Gives up ({@link NotAcquiredException}) when not won within {@code wait}; default: no bound. */
  public LeaseOptions waitFor(Duration wait) {
    this.wait = wait;
    return this;
  }

  /** Names the holder (default {@code <host>-<pid>-<random>}, the same for the process' life). */
  public LeaseOptions owner(String owner) {
    this.owner = owner;
    return this;
  }

  /** Takes {@code permits} of a semaphore's permits (default 1). */
  public LeaseOptions permits(int permits) {
    this.permits = permits;
    return this;
  }

  Duration waitOrNull() {
    return wait;
  }

  String owner() {
    return owner;
  }

  int permits() {
    return permits;
  }

  /** {@code <host>-<pid>}. */
  static String hostPid() {
    String host;
    try {
      host = java.net.InetAddress.getLocalHost().getHostName();
    } catch (java.net.UnknownHostException err) {
      host = "localhost";
    }
    return host + "-" + ProcessHandle.current().pid();
  }
}
