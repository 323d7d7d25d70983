package dev.turnstile.client;

import java.time.Instant;

/** A queue's counts by state; the due times of its oldest READY and next DELAYED task (null when none). */
public record QueueStats(long ready, long delayed, long inFlight, long dead, Instant oldestReadyAt,
    Instant nextDueAt, boolean paused) {}
