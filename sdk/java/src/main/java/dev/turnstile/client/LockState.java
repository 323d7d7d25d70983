package dev.turnstile.client;

import java.time.Instant;

/** A lock as {@link LockWatch} sees it ({@code expiresAt} null when free). */
public record LockState(boolean held, String owner, long fencingToken, Instant expiresAt) {}
