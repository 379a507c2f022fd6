//! A TCP proxy on loopback that can freeze traffic (connections stay open, nothing flows, as
//! with a frozen peer or a network that vanished without a reset) or cut every connection.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Flowing,
    Frozen,
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
                if *watcher.borrow() != Mode::Flowing {
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

    /// Closes every connection.
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Cut);
        self.task.abort();
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            _ = mode.wait_for(|m| *m != Mode::Flowing) => break,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if *mode.borrow() != Mode::Flowing || to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    // Frozen: hold both halves open, silent, until cut.
    let _ = mode.wait_for(|m| *m == Mode::Cut).await;
}
