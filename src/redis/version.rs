//! The oldest Redis the scripts run on, checked at start and by the readiness probe.

use crate::error::{Error, Result};

/// The oldest Redis the scripts run on: `PEXPIREAT … NX/GT` (owner index), `ZADD GT`
/// and `SET … KEEPTTL` need 7.0. On an older one every Acquire fails.
pub const MIN_REDIS_VERSION: (u32, u32) = (7, 0);

/// Checks the `redis_version` of an `INFO server` reply against
/// [`MIN_REDIS_VERSION`]; the error says which version was found and what is needed.
pub fn check_version(info: &str) -> Result<()> {
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(str::trim)
        .ok_or_else(|| Error::Internal("INFO server has no redis_version".into()))?;
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    let found = match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor),
        _ => {
            return Err(Error::Internal(format!(
                "cannot read redis_version {version:?}"
            )))
        }
    };
    if found < MIN_REDIS_VERSION {
        let (major, minor) = MIN_REDIS_VERSION;
        return Err(Error::Internal(format!(
            "redis {version} is too old: turnstile needs Redis {major}.{minor} or newer"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_version;

    #[test]
    fn redis_7_or_newer_passes_and_older_is_refused_with_its_version() {
        let info = |v: &str| format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n");
        assert!(check_version(&info("7.0.15")).is_ok());
        assert!(check_version(&info("7.2.4")).is_ok());
        assert!(check_version(&info("8.0.0")).is_ok());
        let old = check_version(&info("6.2.14")).unwrap_err().to_string();
        assert!(old.contains("6.2.14") && old.contains("7.0"), "{old}");
        assert!(check_version(&info("5.0.7")).is_err());
        assert!(check_version("# Server\r\n").is_err());
        assert!(check_version(&info("x.y")).is_err());
    }
}
