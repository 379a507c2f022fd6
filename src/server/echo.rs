//! The no-op echo service (`serve --echo`): what a round trip through tonic costs on this
//! server's port and layers, and what pushing a message down many open streams costs, for
//! `leasehold bench` to measure a lease against. It touches no Redis unless asked to (an `Echo`
//! with `redis`: one `PING`, the floor of a call that needs Redis once), and no call has a task
//! or a channel of its own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use fred::interfaces::ClientLike;
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status, Streaming};

use super::events::ResponseStream;
use crate::pb::bench::echo_service_server::EchoService;
use crate::pb::bench::{
    EchoRequest, EchoResponse, EchoStreamRequest, EchoStreamResponse, TicksRequest, TicksResponse,
};
use crate::store::Connection;
use crate::tasks::Tasks;

/// The shortest tick interval: a bench tool, not a load generator.
const MIN_TICK: Duration = Duration::from_millis(10);

pub struct Echo {
    tasks: Tasks,
    /// The server's command connection to Redis, for `Echo` calls that ask it once.
    redis: Connection,
    /// One timer per interval asked for, shared by every `Ticks` stream of it.
    tickers: Mutex<HashMap<Duration, watch::Receiver<u64>>>,
}

impl Echo {
    pub fn new(tasks: Tasks, redis: Connection) -> Self {
        Echo {
            tasks,
            redis,
            tickers: Mutex::new(HashMap::new()),
        }
    }

    /// The shared ticker of `interval`, started on first use; it stops with the server.
    fn ticker(&self, interval: Duration) -> watch::Receiver<u64> {
        let mut tickers = self
            .tickers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tickers
            .entry(interval)
            .or_insert_with(|| {
                let (tick, ticks) = watch::channel(0);
                let tasks = self.tasks.clone();
                self.tasks.spawn(async move {
                    let mut timer = tokio::time::interval(interval);
                    timer.tick().await;
                    loop {
                        tokio::select! {
                            _ = timer.tick() => tick.send_modify(|n| *n += 1),
                            () = tasks.stopping() => return,
                        }
                    }
                });
                ticks
            })
            .clone()
    }
}

#[tonic::async_trait]
impl EchoService for Echo {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
        let EchoRequest { payload, redis } = request.into_inner();
        if redis {
            ping(&self.redis).await?;
        }
        Ok(Response::new(EchoResponse { payload }))
    }

    type EchoStreamStream = ResponseStream<EchoStreamResponse>;

    async fn echo_stream(
        &self,
        request: Request<Streaming<EchoStreamRequest>>,
    ) -> Result<Response<Self::EchoStreamStream>, Status> {
        // The answer's future is boxed: an idle stream (the bench's floor under a held lease's
        // memory) then carries a pointer for it, not the future itself.
        let redis = self.redis.clone();
        let answers = futures_util::StreamExt::then(request.into_inner(), move |message| {
            let redis = redis.clone();
            Box::pin(async move {
                let EchoStreamRequest {
                    payload,
                    redis: ping_asked,
                } = message?;
                if ping_asked {
                    ping(&redis).await?;
                }
                Ok::<_, Status>(EchoStreamResponse { payload })
            })
        });
        Ok(Response::new(Box::pin(answers)))
    }

    type TicksStream = ResponseStream<TicksResponse>;

    async fn ticks(
        &self,
        request: Request<TicksRequest>,
    ) -> Result<Response<Self::TicksStream>, Status> {
        let interval = Duration::from_millis(request.into_inner().interval_ms.into());
        if interval < MIN_TICK {
            return Err(Status::invalid_argument(format!(
                "interval_ms must be at least {}",
                MIN_TICK.as_millis()
            )));
        }
        let ticks =
            WatchStream::from_changes(self.ticker(interval)).map(|tick| Ok(TicksResponse { tick }));
        Ok(Response::new(Box::pin(ticks)))
    }
}

/// One `PING` on the server's command connection, sent as any command is (in line among those
/// in flight, within the command timeout).
async fn ping(redis: &Connection) -> Result<(), Status> {
    Ok(redis
        .bounded("echo", redis.client().ping::<()>(None))
        .await?)
}
