//! The semaphore scripts: one file per state change in `lua/`, each assembled at build
//! time with the helpers of `lua/include/` it names (and the locks' `same_attach`).

use crate::redis::{script::Source, Script};

include!(concat!(env!("OUT_DIR"), "/lua_semaphore.rs"));
