package dev.turnstile.client;

import com.google.gson.Gson;
import com.google.gson.JsonParseException;
import java.nio.charset.StandardCharsets;

/** Payloads and results as JSON (UTF-8), through one Gson. */
final class Json {
  private static final Gson GSON = new Gson();

  private Json() {}

  static byte[] encode(Object value) {
    return GSON.toJson(value).getBytes(StandardCharsets.UTF_8);
  }

  /** {@code bytes} as a {@code type}; an {@link IllegalArgumentException} when they are not
   * JSON of that shape. */
  static <T> T decode(byte[] bytes, Class<T> type) {
    try {
      return GSON.fromJson(new String(bytes, StandardCharsets.UTF_8), type);
    } catch (JsonParseException e) {
      throw new IllegalArgumentException("not JSON of a " + type.getSimpleName() + ": "
          + e.getMessage(), e);
    }
  }
}
