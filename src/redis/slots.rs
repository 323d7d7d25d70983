//! Redis Cluster's hash slots, computed here: a key's slot is CRC16 (XMODEM) of its
//! hash tag, mod 16384. Used to give a per-slot index (`Keys::lock`'s `index`) a hash
//! tag of its own that lands on the same slot as the locks it indexes, so the lock
//! scripts can write it atomically with the lock on a cluster.

use std::sync::OnceLock;

/// How many slots a Redis Cluster has.
pub const SLOTS: u16 = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster's `keyHashSlot`.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of a hash tag's content (the text between the braces).
pub fn slot_of_tag(tag: &str) -> u16 {
    crc16(tag.as_bytes()) % SLOTS
}

/// A short hash tag (digits and letters, no braces) whose slot is `slot`: the first
/// base-36 number that lands there. The table is found once, by counting up (about
/// 170,000 CRCs, a few milliseconds).
pub fn tag_of_slot(slot: u16) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); usize::from(SLOTS)];
        let mut missing = usize::from(SLOTS);
        let mut n: u64 = 0;
        while missing > 0 {
            let tag = base36(n);
            let at = usize::from(slot_of_tag(&tag));
            if tags[at].is_empty() {
                tags[at] = tag;
                missing -= 1;
            }
            n += 1;
        }
        tags
    });
    &tags[usize::from(slot % SLOTS)]
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ascii")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // From the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot_of_tag("foo"), 12182);
        assert_eq!(slot_of_tag("user1000"), 3443);
    }

    #[test]
    fn every_slot_has_a_tag_that_lands_on_it() {
        for slot in [0, 1, 777, 12182, SLOTS - 1] {
            let tag = tag_of_slot(slot);
            assert_eq!(slot_of_tag(tag), slot, "{tag}");
            assert!(!tag.contains('{') && !tag.contains('}'));
        }
    }
}
