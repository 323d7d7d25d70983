//! Request fields into domain values. Every error names the field as the `.proto`
//! spells it, so a client in any language can tell what to fix.

use crate::error::{Error, Result};

/// Lock and queue names: at most this many bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 512;
/// Owners, worker ids, request ids and task ids: at most this many bytes.
pub const MAX_OWNER_BYTES: usize = 256;
/// Tokens and receipts (which embed a task id) the server made are shorter than this.
pub const MAX_TOKEN_BYTES: usize = 1024;

/// A name (`name`, `queue`): 1–512 bytes, no control characters.
pub fn name<'a>(field: &'static str, value: &'a str) -> Result<&'a str> {
    text(field, value, MAX_NAME_BYTES, false)
}

/// An optional name (`prefix`): empty, or at most 512 bytes without control
/// characters.
pub fn optional_name<'a>(field: &'static str, value: &'a str) -> Result<&'a str> {
    text(field, value, MAX_NAME_BYTES, true)
}

/// An owner or worker id: 1–256 bytes, no control characters.
pub fn owner<'a>(field: &'static str, value: &'a str) -> Result<&'a str> {
    text(field, value, MAX_OWNER_BYTES, false)
}

/// An optional id (`request_id`, `worker_id`): empty, or like an owner.
pub fn optional_id<'a>(field: &'static str, value: &'a str) -> Result<&'a str> {
    text(field, value, MAX_OWNER_BYTES, true)
}

/// A token or receipt handed out by the server: non-empty and not absurdly long.
pub fn token<'a>(field: &'static str, value: &'a str) -> Result<&'a str> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.len() > MAX_TOKEN_BYTES {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_TOKEN_BYTES} bytes"),
        ));
    }
    Ok(value)
}

/// An optional token (`Describe.token`): empty is allowed.
pub fn optional_token<'a>(field: &'static str, value: &'a str) -> Result<&'a str> {
    if value.is_empty() {
        Ok(value)
    } else {
        token(field, value)
    }
}

/// Text of at most `max` bytes without control characters; empty only if `optional`.
/// The message says what is wanted: an optional field is never told it must not be
/// empty.
fn text<'a>(field: &'static str, value: &'a str, max: usize, optional: bool) -> Result<&'a str> {
    if value.is_empty() && optional {
        return Ok(value);
    }
    if value.is_empty() || value.len() > max {
        let wanted = if optional {
            format!("must be at most {max} bytes of UTF-8 (or empty, for none)")
        } else {
            format!("must be 1–{max} bytes of UTF-8")
        };
        return Err(Error::invalid(
            field,
            format!("{wanted}, got {}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(value)
}

/// A count (`max_tasks`, `limit`): 0 is the default, above `max` an error.
pub fn count(field: &'static str, value: u32, default: u32, max: u32) -> Result<u32> {
    match value {
        0 => Ok(default),
        n if n > max => Err(Error::invalid(
            field,
            format!("must be at most {max}, got {n}"),
        )),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_allow_braces_and_colons_but_not_control_characters() {
        assert!(name("name", "LockRoom:{42}").is_ok());
        assert!(name("name", "ключ").is_ok());
        assert!(name("name", "").is_err());
        assert!(name("name", "a\nb").is_err());
        assert!(name("name", "a\u{7f}b").is_err());
        assert!(name("name", &"x".repeat(512)).is_ok());
        assert!(name("name", &"x".repeat(513)).is_err());
    }

    #[test]
    fn an_optional_field_is_never_told_it_must_not_be_empty() {
        assert_eq!(optional_id("request_id", ""), Ok(""));
        let long = optional_id("request_id", &"x".repeat(257))
            .unwrap_err()
            .to_string();
        assert_eq!(
            long,
            "request_id: must be at most 256 bytes of UTF-8 (or empty, for none), got 257"
        );
        let required = owner("owner", "").unwrap_err().to_string();
        assert_eq!(required, "owner: must be 1–256 bytes of UTF-8, got 0");
    }
}
