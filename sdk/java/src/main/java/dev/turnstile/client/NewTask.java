package dev.turnstile.client;

import com.google.protobuf.ByteString;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.UUID;
import turnstile.v1.Common;
import turnstile.v1.Queue.TaskSpec;

/**
 * A task to enqueue. An empty id gets a random one before the first try, so a retried
 * enqueue never adds the task twice.
 */
public final class NewTask {
  private final byte[] payload;
  private String id = "";
  private Duration delay;
  private Instant at;
  private String group = "";
  private int priority;
  private int maxAttempts;
  private Duration dedupeWindow;
  private boolean replace;

  private NewTask(byte[] payload) {
    this.payload = payload.clone();
  }

  public static NewTask of(byte[] payload) {
    return new NewTask(payload);
  }

  /** A task whose payload is {@code text} in UTF-8. */
  public static NewTask of(String text) {
    return new NewTask(text.getBytes(StandardCharsets.UTF_8));
  }

  /** A task whose payload is {@code value} as JSON (a record, a map, a list, a string...). */
  public static NewTask json(Object value) {
    return new NewTask(Json.encode(value));
  }

  public NewTask id(String id) {
    this.id = id;
    return this;
  }

  /** Due {@code delay} from now. */
  public NewTask delay(Duration delay) {
    this.delay = delay;
    return this;
  }

  /** Due at {@code at}. */
  public NewTask at(Instant at) {
    this.at = at;
    return this;
  }

  public NewTask group(String group) {
    this.group = group;
    return this;
  }

  /** 0-9, higher first. */
  public NewTask priority(int priority) {
    this.priority = priority;
    return this;
  }

  /** How many deliveries it gets (default 25). */
  public NewTask maxAttempts(int maxAttempts) {
    this.maxAttempts = maxAttempts;
    return this;
  }

  /** Keeps its id reserved this long after it is done. */
  public NewTask dedupeWindow(Duration window) {
    this.dedupeWindow = window;
    return this;
  }

  /** Replaces a waiting task of the same id (default: keeps it). */
  public NewTask replace() {
    this.replace = true;
    return this;
  }

  TaskSpec wire() {
    TaskSpec.Builder spec = TaskSpec.newBuilder()
        .setId(id.isEmpty() ? UUID.randomUUID().toString().replace("-", "") : id)
        .setPayload(ByteString.copyFrom(payload)).setGroup(group).setPriority(priority)
        .setMaxAttempts(maxAttempts);
    if (at != null) {
      spec.setDueAt(Rpc.timestamp(at));
    } else if (delay != null && !delay.isZero()) {
      spec.setDelay(Rpc.duration(delay));
    }
    if (dedupeWindow != null) {
      spec.setDedupeWindow(Rpc.duration(dedupeWindow));
    }
    if (replace) {
      spec.setOnDuplicate(Common.DuplicatePolicy.DUPLICATE_POLICY_REPLACE);
    }
    return spec.build();
  }
}
