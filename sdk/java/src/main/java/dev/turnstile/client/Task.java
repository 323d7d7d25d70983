package dev.turnstile.client;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import turnstile.v1.Common;

/** A task as the server shows it, or as a worker's handler gets it. */
public final class Task {
  /** One delivery in a task's history. */
  public record Attempt(int number, String workerId, Instant leasedAt, Instant endedAt, String outcome, String error) {}

  private final String id;
  private final String queue;
  private final byte[] payload;
  private final TaskState state;
  private final Instant dueAt;
  private final Instant enqueuedAt;
  private final int attempt;
  private final int maxAttempts;
  private final String group;
  private final int priority;
  private final String lastError;
  private final byte[] lastProgress;
  private final byte[] result;
  private final List<Attempt> history;
  private final String receipt;
  /** Completes when the handler should stop: its lease is lost, the task was cancelled, the drain ran out. */
  final CompletableFuture<String> cancelled = new CompletableFuture<>();
  private volatile byte[] progress;
  private volatile byte[] handlerResult;

  Task(Common.Task wire, String queue) {
    this.id = wire.getId();
    this.queue = queue;
    this.payload = wire.getPayload().toByteArray();
    this.state = TaskState.of(wire.getState());
    this.dueAt = Rpc.instant(wire.hasDueAt(), wire.getDueAt());
    this.enqueuedAt = Rpc.instant(wire.hasEnqueuedAt(), wire.getEnqueuedAt());
    this.attempt = wire.getAttempt();
    this.maxAttempts = wire.getMaxAttempts();
    this.group = wire.getGroup();
    this.priority = wire.getPriority();
    this.lastError = wire.getLastError();
    this.lastProgress = wire.getProgress().toByteArray();
    this.result = wire.getResult().toByteArray();
    List<Attempt> history = new ArrayList<>();
    for (Common.Attempt a : wire.getHistoryList()) {
      history.add(new Attempt(a.getNumber(), a.getWorkerId(), Rpc.instant(a.hasLeasedAt(), a.getLeasedAt()),
          Rpc.instant(a.hasEndedAt(), a.getEndedAt()), outcome(a.getOutcome()), a.getError()));
    }
    this.history = Collections.unmodifiableList(history);
    this.receipt = wire.getReceipt();
  }

  private static String outcome(Common.AttemptOutcome outcome) {
    switch (outcome) {
      case ATTEMPT_OUTCOME_ACKED:
        return "acked";
      case ATTEMPT_OUTCOME_NACKED:
        return "nacked";
      case ATTEMPT_OUTCOME_EXPIRED:
        return "expired";
      case ATTEMPT_OUTCOME_GAVE_UP:
        return "gave_up";
      case ATTEMPT_OUTCOME_CANCELLED:
        return "cancelled";
      default:
        return "";
    }
  }

  public String id() {
    return id;
  }

  public String queue() {
    return queue;
  }

  public byte[] payload() {
    return payload.clone();
  }

  /** The payload as UTF-8 text. */
  public String text() {
    return new String(payload, StandardCharsets.UTF_8);
  }

  /**
   * The payload as JSON read into a {@code type} (a record or class by its fields' names,
   * {@code Map.class}, {@code List.class}...).
   *
   * @throws IllegalArgumentException when the payload is not JSON of that shape
   */
  public <T> T json(Class<T> type) {
    return Json.decode(payload, type);
  }

  public TaskState state() {
    return state;
  }

  public Instant dueAt() {
    return dueAt;
  }

  public Instant enqueuedAt() {
    return enqueuedAt;
  }

  /** This delivery's number, from 1. */
  public int attempt() {
    return attempt;
  }

  public int maxAttempts() {
    return maxAttempts;
  }

  public String group() {
    return group;
  }

  public int priority() {
    return priority;
  }

  /** The error of its last failed delivery ("" for none). */
  public String lastError() {
    return lastError;
  }

  /** The last progress a handler recorded for it (empty for none): a retry resumes from it. */
  public byte[] lastProgress() {
    return lastProgress.clone();
  }

  /** What a completed task returned (kept tasks only). */
  public byte[] result() {
    return result.clone();
  }

  /** Its deliveries so far. */
  public List<Attempt> history() {
    return history;
  }

  /** The delivery's receipt ("" outside a worker). */
  public String receipt() {
    return receipt;
  }

  /**
   * Completes (with why) when the handler should stop: the task's lease is lost, the
   * server cancelled the task, or the worker's drain ran out of time.
   */
  public CompletableFuture<String> cancelled() {
    return cancelled.copy();
  }

  /** Whether {@link #cancelled()} has completed. */
  public boolean isCancelled() {
    return cancelled.isDone();
  }

  /**
   * Records the handler's latest word (at most 4 KiB): it rides on the next lease
   * extension, and a retry of the task gets it as {@link #lastProgress()}.
   */
  public void progress(byte[] data) {
    progress = data.clone();
  }

  /** Sets what the task returns when its handler succeeds (at most 64 KiB). */
  public void setResult(byte[] data) {
    handlerResult = data.clone();
  }

  /** {@link #setResult(byte[])} with {@code value} as JSON. */
  public void setResultJson(Object value) {
    handlerResult = Json.encode(value);
  }

  byte[] takeProgress() {
    byte[] taken = progress;
    progress = null;
    return taken;
  }

  byte[] handlerResult() {
    return handlerResult;
  }
}
