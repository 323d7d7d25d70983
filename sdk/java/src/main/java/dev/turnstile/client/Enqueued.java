package dev.turnstile.client;

import java.time.Instant;

/** What an enqueue says of one task. */
public record Enqueued(String id, boolean created, boolean replaced, Instant dueAt) {}
