//! The task queues. Until the queue issue lands, only the gRPC face exists and every
//! RPC answers UNIMPLEMENTED, so that clients generated from `proto/` already see the
//! whole contract.

pub mod api;
