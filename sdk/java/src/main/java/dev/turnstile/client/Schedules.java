package dev.turnstile.client;

import com.google.protobuf.ByteString;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import turnstile.v1.ScheduleOuterClass;
import turnstile.v1.ScheduleOuterClass.OverlapPolicy;
import turnstile.v1.ScheduleOuterClass.ScheduledTask;

/** The tenant's schedules ({@code ScheduleService}). */
public final class Schedules {
  /** A schedule to put: exactly one of {@code cron} and {@code every}. */
  public static final class Spec {
    final String name;
    final String queue;
    String cron;
    Duration every;
    String timeZone = "";
    byte[] payload = new byte[0];
    int maxAttempts;
    int priority;
    String group = "";
    boolean skipOverlap;
    Duration catchUp;
    boolean paused;

    private Spec(String name, String queue) {
      this.name = name;
      this.queue = queue;
    }

    public static Spec of(String name, String queue) {
      return new Spec(name, queue);
    }

    /** Five fields (or six, seconds first) or {@code @hourly} and the like, on {@code timeZone}'s wall clock. */
    public Spec cron(String cron) {
      this.cron = cron;
      return this;
    }

    /** Fires at each multiple of {@code every} since the Unix epoch (at least 1 s). */
    public Spec every(Duration every) {
      this.every = every;
      return this;
    }

    public Spec timeZone(String timeZone) {
      this.timeZone = timeZone;
      return this;
    }

    /** The payload of the task each fire enqueues. */
    public Spec payload(byte[] payload) {
      this.payload = payload.clone();
      return this;
    }

    public Spec maxAttempts(int maxAttempts) {
      this.maxAttempts = maxAttempts;
      return this;
    }

    public Spec priority(int priority) {
      this.priority = priority;
      return this;
    }

    public Spec group(String group) {
      this.group = group;
      return this;
    }

    /** Skips a fire while the last fire's task is still in the queue. */
    public Spec skipOverlap() {
      this.skipOverlap = true;
      return this;
    }

    /** How old a missed fire time may be and still be enqueued on recovery (default 1 minute). */
    public Spec catchUp(Duration catchUp) {
      this.catchUp = catchUp;
      return this;
    }

    public Spec paused(boolean paused) {
      this.paused = paused;
      return this;
    }

    ScheduleOuterClass.Schedule wire() {
      if ((cron == null) == (every == null)) {
        throw new InvalidArgumentException("cron: give exactly one of cron and every");
      }
      ScheduleOuterClass.Schedule.Builder wire = ScheduleOuterClass.Schedule.newBuilder().setName(name)
          .setQueue(queue).setTimeZone(timeZone).setPaused(paused)
          .setOverlap(skipOverlap ? OverlapPolicy.OVERLAP_POLICY_SKIP : OverlapPolicy.OVERLAP_POLICY_ALLOW)
          .setTask(ScheduledTask.newBuilder().setPayload(ByteString.copyFrom(payload)).setMaxAttempts(maxAttempts)
              .setPriority(priority).setGroup(group));
      if (cron != null) {
        wire.setCron(cron);
      } else {
        wire.setEvery(Rpc.duration(every));
      }
      if (catchUp != null) {
        wire.setCatchUpWindow(Rpc.duration(catchUp));
      }
      return wire.build();
    }
  }

  /** A schedule as the server keeps it. */
  public record Schedule(String name, String queue, String cron, Duration every, String timeZone, byte[] payload,
      boolean skipOverlap, Duration catchUp, boolean paused, Instant nextFireAt, Instant lastFireAt) {
    static Schedule of(ScheduleOuterClass.Schedule wire) {
      return new Schedule(wire.getName(), wire.getQueue(), wire.hasCron() ? wire.getCron() : null,
          wire.hasEvery() ? Rpc.durationOf(wire.getEvery()) : null, wire.getTimeZone(),
          wire.getTask().getPayload().toByteArray(), wire.getOverlap() == OverlapPolicy.OVERLAP_POLICY_SKIP,
          wire.hasCatchUpWindow() ? Rpc.durationOf(wire.getCatchUpWindow()) : null, wire.getPaused(),
          Rpc.instant(wire.hasNextFireAt(), wire.getNextFireAt()), Rpc.instant(wire.hasLastFireAt(), wire.getLastFireAt()));
    }
  }

  private final Rpc rpc;

  Schedules(Rpc rpc) {
    this.rpc = rpc;
  }

  /** Creates or replaces a schedule. */
  public Schedule put(Spec spec) {
    return put(spec.wire());
  }

  private Schedule put(ScheduleOuterClass.Schedule wire) {
    ScheduleOuterClass.PutScheduleRequest request = ScheduleOuterClass.PutScheduleRequest.newBuilder().setSchedule(wire).build();
    return Schedule.of(rpc.call(r -> r.schedules.putSchedule(request)).getSchedule());
  }

  /** The schedule, or null when there is none. */
  public Schedule get(String name) {
    ScheduleOuterClass.Schedule wire = getWire(name);
    return wire == null ? null : Schedule.of(wire);
  }

  private ScheduleOuterClass.Schedule getWire(String name) {
    try {
      ScheduleOuterClass.GetScheduleRequest request = ScheduleOuterClass.GetScheduleRequest.newBuilder().setName(name).build();
      return rpc.call(r -> r.schedules.getSchedule(request)).getSchedule();
    } catch (NotFoundException gone) {
      return null;
    }
  }

  /** Every schedule whose name starts with {@code prefix}, by name (all pages). */
  public List<Schedule> list(String prefix) {
    List<Schedule> found = new ArrayList<>();
    String token = "";
    do {
      ScheduleOuterClass.ListSchedulesRequest request = ScheduleOuterClass.ListSchedulesRequest.newBuilder()
          .setPageSize(1000).setPageToken(token).build();
      ScheduleOuterClass.ListSchedulesResponse reply = rpc.call(r -> r.schedules.listSchedules(request));
      for (ScheduleOuterClass.Schedule wire : reply.getSchedulesList()) {
        if (wire.getName().startsWith(prefix)) {
          found.add(Schedule.of(wire));
        }
      }
      token = reply.getNextPageToken();
    } while (!token.isEmpty());
    return found;
  }

  /** Stops the schedule's fires; whether there was one. */
  public boolean delete(String name) {
    ScheduleOuterClass.DeleteScheduleRequest request = ScheduleOuterClass.DeleteScheduleRequest.newBuilder().setName(name).build();
    return rpc.call(r -> r.schedules.deleteSchedule(request)).getDeleted();
  }

  /** Stops the schedule's fires ({@link #trigger} still works). */
  public Schedule pause(String name) {
    return setPaused(name, true);
  }

  /** Fires the schedule again from now on. */
  public Schedule resume(String name) {
    return setPaused(name, false);
  }

  private Schedule setPaused(String name, boolean paused) {
    ScheduleOuterClass.Schedule wire = getWire(name);
    if (wire == null) {
      throw new NotFoundException("name: no schedule " + name);
    }
    return put(wire.toBuilder().setPaused(paused).clearNextFireAt().clearLastFireAt().build());
  }

  /** Enqueues one more task of the schedule now; its id. */
  public String trigger(String name) {
    ScheduleOuterClass.TriggerScheduleRequest request = ScheduleOuterClass.TriggerScheduleRequest.newBuilder().setName(name).build();
    return rpc.call(r -> r.schedules.triggerSchedule(request)).getId();
  }
}
