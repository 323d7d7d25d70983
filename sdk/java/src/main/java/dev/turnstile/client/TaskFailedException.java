package dev.turnstile.client;

/** A {@code call} whose task went DEAD or was cancelled: its state and last error. */
public class TaskFailedException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String id;
  private final TaskState state;
  private final String lastError;

  public TaskFailedException(String id, TaskState state, String lastError) {
    super("task " + id + " ended " + state + ": " + lastError);
    this.id = id;
    this.state = state;
    this.lastError = lastError;
  }

  public String id() {
    return id;
  }

  public TaskState state() {
    return state;
  }

  public String lastError() {
    return lastError;
  }
}
