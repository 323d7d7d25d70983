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

/// Random bytes drawn from the OS per thread, this many at a time: a lock cycle made
/// one `getrandom(2)` system call for its token alone (one in six of the server's
/// system calls per cycle), now one per 32 tokens.
const DRAW: usize = 512;

thread_local! {
    /// This thread's bytes drawn from the OS, and how many of them are used.
    static DRAWN: std::cell::RefCell<([u8; DRAW], usize)> =
        const { std::cell::RefCell::new(([0; DRAW], DRAW)) };
}

/// 16 random bytes from the OS, each handed out once (and wiped from the pool).
fn random_16() -> [u8; 16] {
    DRAWN.with_borrow_mut(|(pool, used)| {
        if *used == DRAW {
            getrandom::fill(pool).expect("the OS random source works");
            *used = 0;
        }
        let taken = &mut pool[*used..*used + 16];
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(taken);
        taken.fill(0);
        *used += 16;
        bytes
    })
}

/// A fresh token: 128 random bits from the OS, as 32 lowercase hex digits.
pub fn new_token() -> String {
    let bytes = random_16();
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

    #[test]
    fn tokens_stay_distinct_across_many_draws_from_the_os() {
        // Several pools' worth: a refill that handed out a used block twice, or wiped
        // bytes, would repeat a token.
        let tokens: std::collections::HashSet<String> =
            (0..10 * super::DRAW).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 10 * super::DRAW);
        assert!(!tokens.contains(&"0".repeat(32)));
    }
}
