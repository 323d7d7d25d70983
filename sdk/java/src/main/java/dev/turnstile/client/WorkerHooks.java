package dev.turnstile.client;

import java.time.Duration;

/** Called (on the handler's thread) for the user's metrics and logs; a hook that throws does not stop the worker. */
public interface WorkerHooks {
  default void onStart(Task task) {}

  default void onSuccess(Task task) {}

  default void onFailure(Task task, Throwable error) {}

  default void onRetry(Task task, Duration delay) {}

  default void onDead(Task task, Throwable error) {}
}
