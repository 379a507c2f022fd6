//! The transport's own round trips, on the server's no-op echo service (`serve --echo`): what a
//! lease path would cost if the server did nothing but answer. A lease's added cost is judged
//! against the Redis round trips it needs plus these.

use leasehold::client::{Client, ClientError};
use leasehold::pb::bench::{EchoRequest, EchoStreamRequest, EchoStreamResponse, TicksRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::figures::Figures;
use super::paths::{BenchError, sequential, unexpected};

/// About the size of an `acquire` (name, TTL, holder), so the echo carries what a lease does.
const PAYLOAD_BYTES: usize = 48;

/// Whether the server serves the echo service (started with `--echo`).
pub async fn available(client: &Client) -> bool {
    let request = EchoRequest { payload: vec![] };
    client.echo().echo(request).await.is_ok()
}

/// Two unary echoes one after the other: the gRPC part of unary `Acquire` + `Release`.
pub async fn unary_pair(client: &Client, operations: usize) -> Result<Figures, BenchError> {
    let echo = client.echo();
    sequential("gRPC echo: 2 unary calls", operations, || {
        let mut echo = echo.clone();
        async move {
            for _ in 0..2 {
                let request = EchoRequest {
                    payload: vec![0; PAYLOAD_BYTES],
                };
                echo.echo(request).await.map_err(ClientError::from)?;
            }
            Ok(())
        }
    })
    .await
}

/// One stream with two exchanges, then the client's half-close and the stream's end: the gRPC
/// part of a `Lease` stream's acquire + release.
pub async fn stream_pair(client: &Client, operations: usize) -> Result<Figures, BenchError> {
    let echo = client.echo();
    sequential("gRPC echo: 1 stream, 2 round trips", operations, || {
        let mut echo = echo.clone();
        async move {
            let message = || EchoStreamRequest {
                payload: vec![0; PAYLOAD_BYTES],
            };
            let (requests, outbox) = mpsc::channel(2);
            let closed = || unexpected("echo request stream closed");
            requests.send(message()).await.map_err(|_| closed())?;
            let mut answers = echo
                .echo_stream(ReceiverStream::new(outbox))
                .await
                .map_err(ClientError::from)?
                .into_inner();
            let answer = answers.message().await.map_err(ClientError::from)?;
            answer.ok_or_else(|| unexpected("echo stream ended early"))?;
            requests.send(message()).await.map_err(|_| closed())?;
            let answer = answers.message().await.map_err(ClientError::from)?;
            answer.ok_or_else(|| unexpected("echo stream ended early"))?;
            drop(requests);
            if answers
                .message()
                .await
                .map_err(ClientError::from)?
                .is_some()
            {
                return Err(unexpected("echo stream answered a half-close"));
            }
            Ok(())
        }
    })
    .await
}

/// Idle echo streams held open: what one open stream costs the server with nothing of ours in
/// it (tonic, hyper and h2 alone), the floor under a held lease's memory.
pub struct IdleStreams {
    _streams: Vec<(
        mpsc::Sender<EchoStreamRequest>,
        tonic::Streaming<EchoStreamResponse>,
    )>,
    /// The connections the streams are on.
    _connections: Vec<Client>,
}

/// Opens `count` echo streams, `per_connection` to a connection, each with one exchange done.
pub async fn idle_streams(
    connect: &leasehold::client::ConnectOptions,
    count: usize,
    per_connection: usize,
) -> Result<IdleStreams, BenchError> {
    let mut streams = Vec::with_capacity(count);
    let mut connections: Vec<Client> = Vec::new();
    for i in 0..count {
        if i % per_connection == 0 {
            connections.push(Client::connect_with(connect.clone()).await?);
        }
        let Some(client) = connections.last() else {
            return Err(unexpected("no connection"));
        };
        let (requests, outbox) = mpsc::channel(1);
        let message = EchoStreamRequest {
            payload: vec![0; PAYLOAD_BYTES],
        };
        requests
            .send(message)
            .await
            .map_err(|_| unexpected("echo request stream closed"))?;
        let mut answers = client
            .echo()
            .echo_stream(ReceiverStream::new(outbox))
            .await
            .map_err(ClientError::from)?
            .into_inner();
        let answer = answers.message().await.map_err(ClientError::from)?;
        answer.ok_or_else(|| unexpected("echo stream ended early"))?;
        streams.push((requests, answers));
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

/// Opens `count` tick streams, `per_connection` to a connection.
pub async fn ticking_streams(
    connect: &leasehold::client::ConnectOptions,
    count: usize,
    per_connection: usize,
    interval: std::time::Duration,
) -> Result<TickingStreams, BenchError> {
    let interval_ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
    let mut readers = Vec::with_capacity(count);
    let mut connections: Vec<Client> = Vec::new();
    for i in 0..count {
        if i % per_connection == 0 {
            connections.push(Client::connect_with(connect.clone()).await?);
        }
        let Some(client) = connections.last() else {
            return Err(unexpected("no connection"));
        };
        let mut ticks = client
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
