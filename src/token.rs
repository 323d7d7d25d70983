//! Unguessable tokens: lock owner tokens, receipt prefixes, Subscribe sessions and the
//! ids the server makes for tasks. Each one grants access to what it names, so none is
//! ever logged in full. Also this machine's name, which default owners, worker ids and
//! a replica's name start with.

/// This machine's name ("localhost" when it has none).
pub fn hostname() -> String {
    let mut name = [0u8; 256];
    // SAFETY: gethostname(2) writes at most `len` bytes into the buffer we own.
    let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
    let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    match std::str::from_utf8(&name[..end]) {
        Ok(host) if ok && !host.is_empty() => host.to_owned(),
        _ => "localhost".to_owned(),
    }
}

/// A fresh token: 128 random bits from the OS, as 32 lowercase hex digits.
pub fn new_token() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(32);
    for byte in bytes {
        out.push(HEX[usize::from(byte >> 4)] as char);
        out.push(HEX[usize::from(byte & 15)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::new_token;

    #[test]
    fn tokens_are_32_hex_digits_and_differ() {
        let a = new_token();
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, new_token());
    }
}
