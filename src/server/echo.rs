//! The no-op echo service (`serve --echo`): what a round trip through tonic costs on this
//! server's port and layers, for `leasehold bench` to measure a lease against. It touches
//! nothing: no Redis, no task, no channel.

use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::events::ResponseStream;
use crate::pb::bench::echo_service_server::EchoService;
use crate::pb::bench::{EchoRequest, EchoResponse, EchoStreamRequest, EchoStreamResponse};

pub struct Echo;

#[tonic::async_trait]
impl EchoService for Echo {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
        let payload = request.into_inner().payload;
        Ok(Response::new(EchoResponse { payload }))
    }

    type EchoStreamStream = ResponseStream<EchoStreamResponse>;

    async fn echo_stream(
        &self,
        request: Request<Streaming<EchoStreamRequest>>,
    ) -> Result<Response<Self::EchoStreamStream>, Status> {
        let answers = request.into_inner().map(|message| {
            message.map(|EchoStreamRequest { payload }| EchoStreamResponse { payload })
        });
        Ok(Response::new(Box::pin(answers)))
    }
}
