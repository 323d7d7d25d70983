//! `Tenant`: the name of a key space. Every key and pub/sub channel a call touches is
//! built under its caller's tenant (`redis/keys.rs`), so nothing one tenant does can
//! reach another's locks or queues.

use std::{fmt, sync::Arc};

use crate::{error::Result, validate};

/// The tenant of every caller when no `--auth-file` is given.
pub const DEFAULT_TENANT: &str = "default";

/// A validated tenant name (the rules of an owner: 1–256 bytes of UTF-8, no control
/// characters). Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// `name` as a tenant; `field` names it in the error.
    pub fn new(field: &'static str, name: &str) -> Result<Self> {
        Ok(Self(validate::owner(field, name)?.into()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the tenant `default`, whose keys keep the layout they had
    /// before tenants existed (so data written then is still found).
    pub fn is_default(&self) -> bool {
        &*self.0 == DEFAULT_TENANT
    }
}

impl Default for Tenant {
    fn default() -> Self {
        Self(DEFAULT_TENANT.into())
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
