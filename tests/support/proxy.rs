//! A TCP proxy on loopback that can freeze traffic (connections stay open, nothing flows, as
//! with a frozen peer or a partitioned network), let it flow again, or cut every connection.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Flowing,
    Frozen,
    /// Existing connections are closed; new ones are refused until `resume`.
    Cut,
}

pub struct Proxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (mode, watcher) = watch::channel(Mode::Flowing);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *watcher.borrow() == Mode::Cut {
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pipe(client_read, server_write, watcher.clone()));
                tokio::spawn(pipe(server_read, client_write, watcher.clone()));
            }
        });
        Proxy { addr, mode, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops all traffic but keeps the connections open.
    pub fn freeze(&self) {
        self.mode.send_replace(Mode::Frozen);
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Lets traffic flow again: frozen connections carry on, new connections are accepted.
    pub fn resume(&self) {
        self.mode.send_replace(Mode::Flowing);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Cut);
        self.task.abort();
    }
}

/// Waits while frozen; `false` once the connection must close.
async fn may_flow(mode: &mut watch::Receiver<Mode>) -> bool {
    match mode.wait_for(|m| *m != Mode::Frozen).await {
        Ok(m) => *m == Mode::Flowing,
        Err(_) => false,
    }
}

async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !may_flow(&mut mode).await {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            _ = mode.wait_for(|m| *m != Mode::Flowing) => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just as the proxy froze are held back until it flows again.
        if !may_flow(&mut mode).await || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
