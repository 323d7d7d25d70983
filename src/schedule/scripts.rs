//! The schedule scripts (`lua/`), assembled at build time into one struct.

use crate::redis::{script::Source, Script};

include!(concat!(env!("OUT_DIR"), "/lua_schedule.rs"));
