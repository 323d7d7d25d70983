//! `QueueApi` implements the generated `QueueService`. Every RPC answers UNIMPLEMENTED
//! for now: the queue store is the subject of its own issue.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::pb::{self, queue_service_server::QueueService};

/// The gRPC face of the queues (not yet implemented).
#[derive(Clone, Debug, Default)]
pub struct QueueApi;

fn not_yet<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented(
        "the queue service is not implemented yet",
    ))
}

type SubscribeStream = Pin<Box<dyn Stream<Item = Result<pb::SubscribeResponse, Status>> + Send>>;

#[tonic::async_trait]
impl QueueService for QueueApi {
    async fn enqueue(
        &self,
        _: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        not_yet()
    }
    async fn lease(
        &self,
        _: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        not_yet()
    }
    async fn ack(&self, _: Request<pb::AckRequest>) -> Result<Response<pb::AckResponse>, Status> {
        not_yet()
    }
    async fn nack(
        &self,
        _: Request<pb::NackRequest>,
    ) -> Result<Response<pb::NackResponse>, Status> {
        not_yet()
    }
    async fn extend_lease(
        &self,
        _: Request<pb::ExtendLeaseRequest>,
    ) -> Result<Response<pb::ExtendLeaseResponse>, Status> {
        not_yet()
    }
    async fn peek(
        &self,
        _: Request<pb::PeekRequest>,
    ) -> Result<Response<pb::PeekResponse>, Status> {
        not_yet()
    }
    async fn cancel(
        &self,
        _: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        not_yet()
    }
    async fn redrive(
        &self,
        _: Request<pb::RedriveRequest>,
    ) -> Result<Response<pb::RedriveResponse>, Status> {
        not_yet()
    }
    async fn stats(
        &self,
        _: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        not_yet()
    }
    type SubscribeStream = SubscribeStream;
    async fn subscribe(
        &self,
        _: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        not_yet()
    }
}
