package dev.turnstile.client;

/**
 * Runs one task. Returning acks it (with the result {@link Task#setResult} gave);
 * throwing {@link Retry} gives it back due after its delay; {@link Fail} gives up (the
 * task goes DEAD); anything else gives it back after the worker's backoff. {@link
 * Task#cancelled()} completes when the task's lease is lost, the server cancels the task,
 * or the drain runs out of time.
 */
@FunctionalInterface
public interface Handler {
  void handle(Task task) throws Exception;
}
