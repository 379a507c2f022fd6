//! The transport's own round trips, on the server's no-op echo service (`serve --echo`): what a
//! lease path would cost if the server did nothing but answer. A lease's added cost is judged
//! against the Redis round trips it needs plus these.

use leasehold_client::pb::bench::{
    EchoRequest, EchoStreamRequest, EchoStreamResponse, TicksRequest,
};
use leasehold_client::{Client, ClientError};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::figures::Figures;
use super::paths::{BenchError, sequential, unexpected};

/// About the size of an `acquire` (name, TTL, holder), so the echo carries what a lease does.
const PAYLOAD_BYTES: usize = 48;

/// Whether the server serves the echo service (started with `--echo`).
pub async fn available(client: &Client) -> bool {
    let request = EchoRequest::default();
    client.echo().echo(request).await.is_ok()
}

/// `calls` unary echoes one after the other. Two: the gRPC part of unary `Acquire` +
/// `Release`; one: the gRPC part of a `Check`. With `redis`, each also makes the server ask
/// Redis once (a `PING`): the floor of calls that each need one Redis round trip, the server's
/// own hop to Redis included.
pub async fn unary_calls(
    client: &Client,
    operations: usize,
    calls: usize,
    redis: bool,
) -> Result<Figures, BenchError> {
    let echo = client.echo();
    let path = format!(
        "gRPC echo{}: {calls} unary call{}",
        if redis { " + Redis PING" } else { "" },
        if calls == 1 { "" } else { "s" }
    );
    sequential(&path, operations, || {
        let mut echo = echo.clone();
        async move {
            for _ in 0..calls {
                let request = EchoRequest {
                    payload: vec![0; PAYLOAD_BYTES],
                    redis,
                };
                echo.echo(request).await.map_err(ClientError::from)?;
            }
            Ok(())
        }
    })
    .await
}

/// An open echo stream: the requests side and the answers.
struct EchoStream {
    requests: mpsc::Sender<EchoStreamRequest>,
    answers: tonic::Streaming<EchoStreamResponse>,
    /// Whether each message also makes the server ask Redis once.
    redis: bool,
}

impl EchoStream {
    /// Opens a stream on `client`'s connection, with its first exchange done.
    async fn open(client: &Client, redis: bool) -> Result<Self, BenchError> {
        let (requests, outbox) = mpsc::channel(2);
        requests
            .send(EchoStream::message(redis))
            .await
            .map_err(|_| unexpected("echo request stream closed"))?;
        let answers = client
            .echo()
            .echo_stream(ReceiverStream::new(outbox))
            .await
            .map_err(ClientError::from)?
            .into_inner();
        let mut stream = EchoStream {
            requests,
            answers,
            redis,
        };
        stream.answer().await?;
        Ok(stream)
    }

    fn message(redis: bool) -> EchoStreamRequest {
        EchoStreamRequest {
            payload: vec![0; PAYLOAD_BYTES],
            redis,
        }
    }

    /// One more message, and its answer.
    async fn exchange(&mut self) -> Result<(), BenchError> {
        self.requests
            .send(EchoStream::message(self.redis))
            .await
            .map_err(|_| unexpected("echo request stream closed"))?;
        self.answer().await
    }

    async fn answer(&mut self) -> Result<(), BenchError> {
        let answer = self.answers.message().await.map_err(ClientError::from)?;
        answer.ok_or_else(|| unexpected("echo stream ended early"))?;
        Ok(())
    }

    /// Half-closes, and expects the stream to end without another answer.
    async fn close(self) -> Result<(), BenchError> {
        let EchoStream {
            requests,
            mut answers,
            ..
        } = self;
        drop(requests);
        match answers.message().await.map_err(ClientError::from)? {
            Some(_) => Err(unexpected("echo stream answered a half-close")),
            None => Ok(()),
        }
    }
}

/// One stream with two exchanges, then the client's half-close and the stream's end: the gRPC
/// part of a `Lease` stream's acquire + release. With `redis`, each exchange also makes the
/// server ask Redis once: the floor of the stream's acquire + release, the server's own hop to
/// Redis included.
pub async fn stream_pair(
    client: &Client,
    operations: usize,
    redis: bool,
) -> Result<Figures, BenchError> {
    let path = match redis {
        false => "gRPC echo: 1 stream, 2 round trips",
        true => "gRPC echo + Redis PING: 1 stream, 2 round trips",
    };
    sequential(path, operations, || async {
        let mut stream = EchoStream::open(client, redis).await?;
        stream.exchange().await?;
        stream.close().await
    })
    .await
}

/// Idle echo streams held open: what one open stream costs the server with nothing of ours in
/// it (tonic, hyper and h2 alone), the floor under a held lease's memory.
pub struct IdleStreams {
    _streams: Vec<EchoStream>,
    /// The connections the streams are on.
    _connections: Vec<Client>,
}

/// Opens `count` echo streams spread over `connections`, each with one exchange done.
pub async fn idle_streams(
    connections: Vec<Client>,
    count: usize,
) -> Result<IdleStreams, BenchError> {
    let mut streams = Vec::with_capacity(count);
    for i in 0..count {
        streams.push(EchoStream::open(spread(&connections, i, count)?, false).await?);
    }
    Ok(IdleStreams {
        _streams: streams,
        _connections: connections,
    })
}

/// Echo streams that each get a message every `interval`, read by the bench as they come: what
/// telling that many held leases `extended` at that rate costs the transport alone.
pub struct TickingStreams {
    readers: Vec<tokio::task::JoinHandle<()>>,
    _connections: Vec<Client>,
}

impl Drop for TickingStreams {
    fn drop(&mut self) {
        for reader in &self.readers {
            reader.abort();
        }
    }
}

/// Opens `count` tick streams spread over `connections`.
pub async fn ticking_streams(
    connections: Vec<Client>,
    count: usize,
    interval: std::time::Duration,
) -> Result<TickingStreams, BenchError> {
    let interval_ms = leasehold_client::pb::millis(interval);
    let mut readers = Vec::with_capacity(count);
    for i in 0..count {
        let mut ticks = spread(&connections, i, count)?
            .echo()
            .ticks(TicksRequest { interval_ms })
            .await
            .map_err(ClientError::from)?
            .into_inner();
        readers.push(tokio::spawn(async move {
            while let Ok(Some(_)) = ticks.message().await {}
        }));
    }
    Ok(TickingStreams {
        readers,
        _connections: connections,
    })
}

/// The connection of stream `i` of `count`, in even shares.
fn spread(connections: &[Client], i: usize, count: usize) -> Result<&Client, BenchError> {
    connections
        .get(i * connections.len() / count.max(1))
        .ok_or_else(|| unexpected("no connection"))
}
