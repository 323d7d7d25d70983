//! Typed reading of script replies. Scripts answer flat arrays (status first, then
//! data); the stores read them by position through these, so a reply of the wrong
//! shape is one clear INTERNAL error ("reply item 3: expected a number") wherever it
//! happens, never a panic.

use redis::Value;

use crate::error::{Error, Result};

/// Item `at` as a number (an integer reply, or a bulk string of digits).
pub fn int(reply: &[Value], at: usize) -> Result<i64> {
    match reply.get(at) {
        Some(Value::Int(n)) => Ok(*n),
        Some(Value::BulkString(text)) => std::str::from_utf8(text)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| Error::Internal(format!("reply item {at} is not a number"))),
        other => Err(Error::Internal(format!(
            "reply item {at}: expected a number, got {other:?}"
        ))),
    }
}

/// Item `at` as a number, `None` when negative (the scripts' "none").
pub fn optional_int(reply: &[Value], at: usize) -> Result<Option<i64>> {
    int(reply, at).map(|n| (n >= 0).then_some(n))
}

/// Item `at` as bytes (a number reply is read as its digits).
pub fn bytes(reply: &[Value], at: usize) -> Result<Vec<u8>> {
    match reply.get(at) {
        Some(Value::BulkString(bytes)) => Ok(bytes.clone()),
        Some(Value::Int(n)) => Ok(n.to_string().into_bytes()),
        other => Err(Error::Internal(format!(
            "reply item {at}: expected a string, got {other:?}"
        ))),
    }
}

/// Item `at` as text (names, owners and ids were validated UTF-8 on the way in).
pub fn string(reply: &[Value], at: usize) -> Result<String> {
    bytes(reply, at).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_read_by_position_and_a_wrong_shape_is_internal() {
        let reply = vec![
            Value::Int(1),
            Value::BulkString(b"42".to_vec()),
            Value::BulkString(b"owner".to_vec()),
            Value::Int(-1),
        ];
        assert_eq!(int(&reply, 0), Ok(1));
        assert_eq!(int(&reply, 1), Ok(42));
        assert_eq!(string(&reply, 2), Ok("owner".to_owned()));
        assert_eq!(string(&reply, 0), Ok("1".to_owned()));
        assert_eq!(optional_int(&reply, 3), Ok(None));
        assert_eq!(optional_int(&reply, 1), Ok(Some(42)));
        assert!(matches!(int(&reply, 2), Err(Error::Internal(_))));
        assert!(matches!(int(&reply, 9), Err(Error::Internal(_))));
        assert!(matches!(bytes(&[Value::Nil], 0), Err(Error::Internal(_))));
    }
}
