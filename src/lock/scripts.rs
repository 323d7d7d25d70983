//! The lock scripts: one file per state change in `lua/`, each assembled at build time
//! with the helpers of `lua/include/` it names (`--- @include "lease"`), so each is one
//! atomic EVALSHA that carries only what it uses.

use crate::redis::{script::Source, Script};

include!(concat!(env!("OUT_DIR"), "/lua_lock.rs"));
