package dev.turnstile.client;

import turnstile.v1.Common;

/** Where a task is. */
public enum TaskState {
  DELAYED(Common.TaskState.TASK_STATE_DELAYED),
  READY(Common.TaskState.TASK_STATE_READY),
  IN_FLIGHT(Common.TaskState.TASK_STATE_IN_FLIGHT),
  DEAD(Common.TaskState.TASK_STATE_DEAD),
  COMPLETED(Common.TaskState.TASK_STATE_COMPLETED),
  CANCELLED(Common.TaskState.TASK_STATE_CANCELLED);

  final Common.TaskState wire;

  TaskState(Common.TaskState wire) {
    this.wire = wire;
  }

  static TaskState of(Common.TaskState wire) {
    for (TaskState state : values()) {
      if (state.wire == wire) {
        return state;
      }
    }
    return null;
  }
}
