package dev.turnstile.client;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import turnstile.v1.Queue.CancelRequest;
import turnstile.v1.Queue.ConfigureGroupRequest;
import turnstile.v1.Queue.EnqueueRequest;
import turnstile.v1.Queue.EnqueueResponse;
import turnstile.v1.Queue.EnqueueResult;
import turnstile.v1.Queue.GetTaskRequest;
import turnstile.v1.Queue.PeekRequest;
import turnstile.v1.Queue.RedriveRequest;
import turnstile.v1.Queue.StatsRequest;
import turnstile.v1.Queue.StatsResponse;
import turnstile.v1.Queue.WaitRequest;
import turnstile.v1.Queue.WaitResponse;

/** One queue of the client's tenant. */
public final class Queue {
  /** How much longer than a server-side wait a call's deadline runs. */
  private static final Duration WAIT_MARGIN = Duration.ofSeconds(5);

  private final Rpc rpc;
  private final String name;

  Queue(Rpc rpc, String name) {
    this.rpc = rpc;
    this.name = name;
  }

  public String name() {
    return name;
  }

  /** Adds one task with this payload. */
  public Enqueued enqueue(byte[] payload) {
    return enqueue(NewTask.of(payload));
  }

  /** Adds one task. */
  public Enqueued enqueue(NewTask task) {
    return enqueueMany(List.of(task)).get(0);
  }

  /** Adds up to 1,000 tasks in one atomic call, answering each in order. */
  public List<Enqueued> enqueueMany(List<NewTask> tasks) {
    EnqueueRequest.Builder request = EnqueueRequest.newBuilder().setQueue(name);
    tasks.forEach(task -> request.addTasks(task.wire()));
    EnqueueRequest built = request.build();
    EnqueueResponse reply = rpc.call(r -> r.queues.enqueue(built));
    List<Enqueued> added = new ArrayList<>();
    for (EnqueueResult r : reply.getResultsList()) {
      added.add(new Enqueued(r.getId(), r.getCreated(), r.getReplaced(), Rpc.instant(r.hasDueAt(), r.getDueAt())));
    }
    return added;
  }

  /**
   * A remote call through the queue: enqueues one task and waits up to {@code timeout}
   * (at most 1 h) for a worker's result. A task that went DEAD or was cancelled throws
   * {@link TaskFailedException}; one not done in time, {@link DeadlineExceededException}.
   */
  public byte[] call(NewTask task, Duration timeout) {
    EnqueueRequest request = EnqueueRequest.newBuilder().setQueue(name).addTasks(task.wire())
        .setWait(Rpc.duration(timeout)).build();
    EnqueueResult result = rpc.call(timeout.plus(WAIT_MARGIN), r -> r.queues.enqueue(request)).getResults(0);
    if (!result.getDone()) {
      throw new DeadlineExceededException("task " + result.getId() + " not done within " + timeout);
    }
    Task done = new Task(result.getTask(), name);
    if (done.state() != TaskState.COMPLETED) {
      throw new TaskFailedException(done.id(), done.state(), done.lastError());
    }
    return done.result();
  }

  /** {@link #call(NewTask, Duration)} of this payload. */
  public byte[] call(byte[] payload, Duration timeout) {
    return call(NewTask.of(payload), timeout);
  }

  /**
   * The task in whatever state, with its history, last error, progress and (kept
   * completed tasks) result; {@link NotFoundException} when the queue does not hold it.
   */
  public Task get(String id) {
    return new Task(rpc.call(r -> r.queues.getTask(GetTaskRequest.newBuilder().setQueue(name).setId(id).build())), name);
  }

  /**
   * Waits up to {@code timeout} (at most 1 h) for the task to be done (completed, dead or
   * cancelled): the task as it ended, or null when it was not done in time.
   */
  public Task wait(String id, Duration timeout) {
    WaitRequest request = WaitRequest.newBuilder().setQueue(name).setId(id).setTimeout(Rpc.duration(timeout)).build();
    WaitResponse reply = rpc.call(timeout.plus(WAIT_MARGIN), r -> r.queues.wait(request));
    return reply.getDone() ? new Task(reply.getTask(), name) : null;
  }

  /** The queue's counts by state. */
  public QueueStats stats() {
    StatsResponse s = rpc.call(r -> r.queues.stats(StatsRequest.newBuilder().setQueue(name).build()));
    return new QueueStats(s.getReady(), s.getDelayed(), s.getInFlight(), s.getDead(),
        Rpc.instant(s.hasOldestReadyAt(), s.getOldestReadyAt()), Rpc.instant(s.hasNextDueAt(), s.getNextDueAt()),
        s.getConfig().getPaused());
  }

  /** Up to {@code limit} tasks of {@code state} in delivery order, without taking them. */
  public List<Task> peek(TaskState state, int limit) {
    PeekRequest request = PeekRequest.newBuilder().setQueue(name).setState(state.wire).setLimit(limit).build();
    List<Task> tasks = new ArrayList<>();
    rpc.call(r -> r.queues.peek(request)).getTasksList().forEach(t -> tasks.add(new Task(t, name)));
    return tasks;
  }

  /**
   * Removes the tasks that are not running (with {@code running}, the running ones too:
   * their handlers are told); the ids removed.
   */
  public List<String> cancel(List<String> ids, boolean running) {
    CancelRequest request = CancelRequest.newBuilder().setQueue(name).addAllIds(ids).setRunning(running).build();
    return rpc.call(r -> r.queues.cancel(request)).getCancelledList();
  }

  /** Moves DEAD tasks (these ids, or all when none) back to READY; how many. */
  public long redrive(String... ids) {
    RedriveRequest request = RedriveRequest.newBuilder().setQueue(name).addAllIds(List.of(ids)).build();
    return rpc.call(r -> r.queues.redrive(request)).getRedriven();
  }

  /** Stops deliveries of the queue. */
  public void pause() {
    configure(QueueConfig.change().paused(true));
  }

  /** Lets the queue deliver again. */
  public void resume() {
    configure(QueueConfig.change().paused(false));
  }

  /** Stops deliveries of one group ("" is the ungrouped tasks). */
  public void pause(String group) {
    setGroupPaused(group, true);
  }

  /** Lets one group deliver again. */
  public void resume(String group) {
    setGroupPaused(group, false);
  }

  private void setGroupPaused(String group, boolean paused) {
    ConfigureGroupRequest request = ConfigureGroupRequest.newBuilder().setQueue(name).setGroup(group).setPaused(paused).build();
    rpc.call(r -> r.queues.configureGroup(request));
  }

  /** Changes the queue's flow control and retention. */
  public void configure(QueueConfig config) {
    rpc.call(r -> r.queues.configureQueue(config.wire(name)));
  }
}
