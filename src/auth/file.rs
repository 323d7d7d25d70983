//! The `--auth-file`: TOML, one `[[token]]` table per bearer token, holding the
//! token's SHA-256 (never the token), its tenant and its permissions. Parsed whole
//! into a [`Policy`] or refused whole, with a message that names the entry and field.

use serde::Deserialize;

use super::{Grant, Permission, Permissions, Policy, Tenant};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    token: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    sha256: String,
    tenant: String,
    permissions: Vec<String>,
}

/// Parses the file's text.
pub fn parse(text: &str) -> Result<Policy, String> {
    // Not the error's Display: it quotes the offending line, which could be a token
    // someone pasted in by mistake. The line number is enough to find it.
    let file: File = toml::from_str(text).map_err(|err| {
        let line = err
            .span()
            .map_or(1, |span| text[..span.start].matches('\n').count() + 1);
        format!("line {line}: {}", err.message())
    })?;
    let mut grants: Vec<Grant> = Vec::with_capacity(file.token.len());
    for (at, entry) in file.token.into_iter().enumerate() {
        let place = format!("token[{at}]");
        let hash = parse_hash(&entry.sha256).map_err(|why| format!("{place}.sha256: {why}"))?;
        if grants.iter().any(|g| g.hash == hash) {
            return Err(format!("{place}.sha256: the same hash is listed twice"));
        }
        let tenant =
            Tenant::new("tenant", &entry.tenant).map_err(|err| format!("{place}.{err}"))?;
        let mut permissions = Permissions::NONE;
        for name in &entry.permissions {
            let permission = Permission::from_name(name).ok_or_else(|| {
                format!(
                    "{place}.permissions: unknown permission {name:?} (use lock, produce, consume, admin)"
                )
            })?;
            permissions = permissions.with(permission);
        }
        if permissions == Permissions::NONE {
            return Err(format!(
                "{place}.permissions: must name at least one permission"
            ));
        }
        grants.push(Grant {
            hash,
            tenant,
            permissions,
        });
    }
    Ok(Policy::Tokens(grants))
}

/// 64 hex digits, either case.
fn parse_hash(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "must be 64 hex digits (the SHA-256 of the token), got {} characters",
            text.len()
        ));
    }
    let mut hash = [0u8; 32];
    for (at, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * at..2 * at + 2], 16).expect("checked hex");
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn the_contract_example_parses() {
        let text = format!(
            "[[token]]\nsha256 = \"{HASH}\"\ntenant = \"shop\"\npermissions = [\"lock\", \"produce\", \"consume\"]\n"
        );
        let Policy::Tokens(grants) = parse(&text).unwrap() else {
            panic!("tokens expected");
        };
        assert_eq!(grants.len(), 1);
        assert_eq!(grants[0].tenant.as_str(), "shop");
        assert!(grants[0].permissions.has(Permission::Consume));
        assert!(!grants[0].permissions.has(Permission::Admin));
        // "test" is the token whose SHA-256 the contract shows.
        assert_eq!(grants[0].hash, super::super::sha256("test"));
    }

    #[test]
    fn mistakes_are_refused_naming_the_entry_and_field() {
        let entry = |sha: &str, tenant: &str, permissions: &str| {
            format!("[[token]]\nsha256 = \"{sha}\"\ntenant = \"{tenant}\"\npermissions = {permissions}\n")
        };
        let cases = [
            (entry("abc", "shop", "[\"lock\"]"), "token[0].sha256"),
            (entry(HASH, "", "[\"lock\"]"), "token[0].tenant"),
            (entry(HASH, "shop", "[\"lok\"]"), "unknown permission \"lok\""),
            (entry(HASH, "shop", "[]"), "at least one permission"),
            (
                entry(HASH, "a", "[\"lock\"]") + &entry(HASH, "b", "[\"lock\"]"),
                "token[1].sha256: the same hash",
            ),
            (
                format!("[[token]]\nsha256 = \"{HASH}\"\ntenant = \"a\"\npermissions = [\"lock\"]\ntoken = \"oops\"\n"),
                "unknown field",
            ),
            ("x = 1\n[[token]\n".to_owned(), "line 2: "),
        ];
        for (text, wanted) in cases {
            let refused = parse(&text).err().unwrap_or_default();
            assert!(refused.contains(wanted), "{text:?}: {refused}");
        }
    }

    #[test]
    fn a_parse_error_never_quotes_the_file() {
        let refused = parse("[[token]]\nsecret-token-pasted-here\n").unwrap_err();
        assert!(refused.starts_with("line 2: "), "{refused}");
        assert!(!refused.contains("secret-token-pasted-here"), "{refused}");
    }

    #[test]
    fn an_empty_file_lets_nobody_in() {
        let Policy::Tokens(grants) = parse("").unwrap() else {
            panic!("tokens expected");
        };
        assert!(grants.is_empty());
    }
}
